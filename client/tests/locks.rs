//! The lock API on both backends (native on the module, script on plain Redis).

use crate::support;

use std::time::{Duration, Instant};

use dlock_client::{Backend, Error, LostReason};
use support::*;

async fn acquire_release_reentrant(b: Backend) {
    let s = server(b);
    let c = client(&s, b).await;
    assert_eq!(c.is_native(), b == Backend::Native);
    let mut r = raw(&s).await;
    let lock = c.lock("k");
    let owner = lock.owner().id().to_string();
    assert!(owner.starts_with(c.owner_prefix()));
    let g1 = lock.acquire().await.unwrap();
    assert_eq!(g1.hold_count(), 1);
    assert_eq!(hget(&mut r, "k", &owner).await, Some(1));
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.is_held_by_owner().await.unwrap());
    let g2 = lock.try_acquire().await.unwrap().expect("reentrant");
    assert_eq!(g2.hold_count(), 2);
    assert_eq!(hget(&mut r, "k", &owner).await, Some(2));
    // Another owner is refused.
    let other = c.lock("k");
    assert!(other.try_acquire().await.unwrap().is_none());
    assert!(!other.is_held_by_owner().await.unwrap());
    g2.release().await.unwrap();
    assert_eq!(hget(&mut r, "k", &owner).await, Some(1));
    assert!(other.try_acquire().await.unwrap().is_none());
    let lost = g1.lost();
    g1.release().await.unwrap();
    assert!(!exists(&mut r, "k").await);
    assert_eq!(lost.await, LostReason::Released);
    assert!(!lock.is_locked().await.unwrap());
    let g3 = other.try_acquire().await.unwrap().expect("free now");
    assert_eq!(g3.hold_count(), 1);
    g3.release().await.unwrap();
}

async fn try_acquire_for_times_out_and_wakes(b: Backend) {
    let s = server(b);
    let c = client(&s, b).await;
    let a = c.lock("w").acquire().await.unwrap();
    let t = Instant::now();
    let r = c
        .lock("w")
        .try_acquire_for(Duration::from_millis(300), None)
        .await
        .unwrap();
    let el = t.elapsed();
    assert!(r.is_none());
    assert!(
        el >= Duration::from_millis(250),
        "gave up too early: {el:?}"
    );
    assert!(el < Duration::from_secs(3), "gave up too late: {el:?}");
    // A waiter gets the lock once it is released (the watchdog keeps it alive meanwhile).
    let c2 = c.clone();
    let waiter = tokio::spawn(async move {
        let t = Instant::now();
        let g = c2
            .lock("w")
            .try_acquire_for(Duration::from_secs(10), None)
            .await
            .unwrap();
        (g.map(|g| g.hold_count()), t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await; // let it start waiting (not a sync point: either order passes)
    a.release().await.unwrap();
    let (held, el) = waiter.await.unwrap();
    assert_eq!(held, Some(1));
    assert!(el < Duration::from_secs(5), "waiter took {el:?}");
}

async fn lease_without_watchdog_lapses(b: Backend) {
    let (s, c, mut r) = setup(b).await;
    let g = c
        .lock("l")
        .try_acquire_for(Duration::ZERO, Some(Duration::from_millis(200)))
        .await
        .unwrap()
        .unwrap();
    assert!(!g.is_watched());
    let p = pttl(&mut r, "l").await;
    assert!(p > 0 && p <= 200, "pttl {p}");
    let lease = c.lock("l").remaining_lease().await.unwrap().unwrap();
    assert!(lease <= Duration::from_millis(200));
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("lost in time");
    assert_eq!(reason, LostReason::LeaseExpired);
    wait_for(Duration::from_secs(3), "key expiry", || {
        let mut sc = s.connection();
        let n: i64 = redis::cmd("EXISTS").arg("l").query(&mut sc).unwrap();
        (n == 0).then_some(())
    });
    assert_eq!(c.lock("l").remaining_lease().await.unwrap(), None);
    // Releasing a lock that lapsed says it was not held.
    assert!(matches!(
        g.release().await,
        Err(dlock_client::Error::NotHeld(_))
    ));
}

async fn owner_moves_across_tasks(b: Backend) {
    let s = server(b);
    let c = client(&s, b).await;
    let owner = c.owner();
    let g1 = c.lock_as("o", &owner).acquire().await.unwrap();
    let (c2, o2) = (c.clone(), owner.clone());
    let g2 =
        tokio::spawn(async move { c2.lock_as("o", &o2).try_acquire().await.unwrap().unwrap() })
            .await
            .unwrap();
    assert_eq!(g2.hold_count(), 2);
    // A different owner in another task is refused.
    let c3 = c.clone();
    assert!(
        tokio::spawn(async move { c3.lock("o").try_acquire().await.unwrap() })
            .await
            .unwrap()
            .is_none()
    );
    // Release both holds from other tasks.
    tokio::spawn(async move { g2.release().await.unwrap() })
        .await
        .unwrap();
    tokio::spawn(async move { g1.release().await.unwrap() })
        .await
        .unwrap();
    let mut r = raw(&s).await;
    assert!(!exists(&mut r, "o").await);
}

async fn drop_releases(b: Backend) {
    let s = server(b);
    let c = client(&s, b).await;
    let g = c.lock("d").acquire().await.unwrap();
    assert!(c.lock("d").try_acquire().await.unwrap().is_none());
    drop(g);
    // The background release frees it well before the lease could (watchdog stopped too).
    let g2 = c
        .lock("d")
        .try_acquire_for(Duration::from_secs(5), None)
        .await
        .unwrap();
    assert!(g2.is_some());
}

async fn watchdog_keeps_lock(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let lock = c.lock("wd");
    let g = lock.acquire().await.unwrap();
    assert!(g.is_watched());
    assert_eq!(c.watched_locks(), 1);
    tokio::time::sleep(LEASE * 4).await; // time passing is what is tested
    assert!(g.lost().check().is_none());
    assert_eq!(hget(&mut r, "wd", lock.owner().id()).await, Some(1));
    let p = pttl(&mut r, "wd").await;
    assert!(p > 0 && p <= LEASE.as_millis() as i64, "pttl {p}");
    assert!(c.lock("wd").try_acquire().await.unwrap().is_none());
    g.release().await.unwrap();
    assert_eq!(c.watched_locks(), 0);
}

async fn renewal_stops_after_release(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let lock = c.lock("rs");
    let owner = lock.owner().id().to_string();
    let g = lock.acquire().await.unwrap();
    g.release().await.unwrap();
    assert_eq!(c.watched_locks(), 0);
    // Re-create the same owner's hold behind the client's back with a short lease: if the
    // watchdog still renewed it, it would outlive its lease.
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("rs")
        .arg(&owner)
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg("rs")
        .arg(250)
        .ignore()
        .query_async(&mut r)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await; // time passing is what is tested
    assert!(!exists(&mut r, "rs").await, "renewed after release");
}

async fn lost_when_deleted(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let g = c.lock("del").acquire().await.unwrap();
    let lost = g.lost();
    assert!(lost.check().is_none());
    del(&mut r, "del").await;
    let t = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(3), lost.clone())
        .await
        .expect("lost fires");
    assert_eq!(reason, LostReason::NotHeld);
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(g.lost().check(), Some(LostReason::NotHeld));
    assert_eq!(c.watched_locks(), 0);
    assert!(matches!(
        g.release().await,
        Err(dlock_client::Error::NotHeld(_))
    ));
}

async fn lost_when_server_dies(b: Backend) {
    let mut s = server(b);
    let c = client(&s, b).await;
    let g = c.lock("kill").acquire().await.unwrap();
    // Let one renewal succeed first.
    tokio::time::sleep(INTERVAL * 2).await;
    assert!(g.lost().check().is_none());
    s.kill();
    let t = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("lost fires");
    let el = t.elapsed();
    assert_eq!(reason, LostReason::LeaseExpired);
    assert!(
        el <= LEASE + dlock_testutil::LATENESS_BOUND,
        "noticed late: {el:?}"
    );
    // Releasing answers an error, not a panic.
    let e = g.release().await.unwrap_err();
    assert!(e.is_connection(), "{e:?}");
}

async fn wrong_type(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    set_string(&mut r, "str").await;
    match c.lock("str").try_acquire().await {
        Err(Error::WrongType { key, .. }) => assert_eq!(key, "str"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    let v: String = redis::cmd("GET")
        .arg("str")
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(v, "x");
}

async fn force_unlock_frees(b: Backend) {
    let s = server(b);
    let c = client(&s, b).await;
    let g = c.lock("f").acquire().await.unwrap();
    let lost = g.lost();
    assert!(c.lock("f").force_unlock().await.unwrap());
    assert!(!c.lock("f").force_unlock().await.unwrap());
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(3), lost)
            .await
            .unwrap(),
        LostReason::NotHeld
    );
    let g2 = c.lock("f").try_acquire().await.unwrap();
    assert!(g2.is_some());
}

async fn fencing(b: Backend) {
    let s = server(b);
    let c = client(&s, b).await;
    let lock = c.lock("fence").fenced();
    match b {
        Backend::Native => {
            let g = lock.acquire().await.unwrap();
            let t1 = g.fencing_token().expect("token");
            g.release().await.unwrap();
            let g = lock.acquire().await.unwrap();
            let t2 = g.fencing_token().unwrap();
            assert!(t2 > t1, "{t2} > {t1}");
        }
        _ => assert!(matches!(lock.acquire().await, Err(Error::Unsupported(_)))),
    }
}

async fn disconnect_errors_not_panics(b: Backend) {
    let mut s = server(b);
    let c = client(&s, b).await;
    s.kill();
    let e = c.lock("x").try_acquire().await.unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert!(c.lock("x").is_locked().await.is_err());
}

both_backends!(
    acquire_release_reentrant,
    try_acquire_for_times_out_and_wakes,
    lease_without_watchdog_lapses,
    owner_moves_across_tasks,
    drop_releases,
    watchdog_keeps_lock,
    renewal_stops_after_release,
    lost_when_deleted,
    lost_when_server_dies,
    wrong_type,
    force_unlock_frees,
    fencing,
    disconnect_errors_not_panics,
);
