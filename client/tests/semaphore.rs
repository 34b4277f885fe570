//! Semaphores through the client, on both backends (native DLOCK.SEMAPHORE, Lua on plain
//! Redis), the blocking facade, and `Client::waiters` (DLOCK.WAITERS).

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_client::{
    blocking, Backend, Client, Error, LostReason, Semaphore, SemaphoreGuard, WaitRequest,
};
use redis::aio::MultiplexedConnection as Conn;
use support::*;
use tokio::task::JoinHandle;

/// Take, add up, refuse what does not fit, give back; the hash is the module's layout;
/// the errors of both backends are the module's.
async fn permits_add_up_and_release(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let sem = c.semaphore("pool", 3);
    let g1 = sem.acquire(2).await.unwrap();
    assert_eq!((g1.permits(), g1.owner_permits()), (2, 2));
    assert!(g1.is_watched());
    let me = sem.owner().id().to_string();
    assert_eq!(hget_as::<String>(&mut r, "pool", "mode").await, "semaphore");
    assert_eq!(hget(&mut r, "pool", "capacity").await, Some(3));
    assert_eq!(
        hget(&mut r, "pool", &format!("permits:{me}")).await,
        Some(2)
    );
    let deadline = hget(&mut r, "pool", &format!("lease:{me}")).await.unwrap();
    assert!(
        deadline > 1_600_000_000_000,
        "absolute deadline: {deadline}"
    );
    let p = pttl(&mut r, "pool").await;
    assert!(p > 0 && p <= LEASE.as_millis() as i64, "pttl {p}");

    // Another owner: 2 do not fit, 1 does.
    let g2 = take_the_last_permit(&c.semaphore("pool", 3)).await;
    assert_eq!(g2.owner_permits(), 1);
    assert!(sem.try_acquire(1).await.unwrap().is_none(), "full");
    g2.release().await.unwrap();
    // The same owner again: its permits add up.
    let g3 = sem.try_acquire(1).await.unwrap().expect("a free permit");
    assert_eq!((g3.permits(), g3.owner_permits()), (1, 3));
    assert_eq!(sem.held_by_owner().await.unwrap(), 3);

    // Errors change nothing.
    match c.semaphore("pool", 5).try_acquire(1).await {
        Err(Error::Server(m)) => assert_eq!(m, "ERR semaphore capacity is 3, not 5"),
        x => panic!("expected the capacity error, got {x:?}"),
    }
    match sem.try_acquire(4).await {
        Err(Error::Server(m)) => assert_eq!(m, "ERR COUNT 4 is more than the capacity 3"),
        x => panic!("expected the COUNT error, got {x:?}"),
    }
    assert!(matches!(sem.try_acquire(0).await, Err(Error::Config(_))));
    assert!(matches!(
        c.semaphore("zero", 0).try_acquire(1).await,
        Err(Error::Config(_))
    ));
    assert_eq!(sem.held_by_owner().await.unwrap(), 3);

    g3.release().await.unwrap();
    assert_eq!(sem.held_by_owner().await.unwrap(), 2);
    assert!(exists(&mut r, "pool").await);
    let lost = g1.lost();
    g1.release().await.unwrap();
    assert_eq!(lost.check(), Some(LostReason::Released));
    assert!(!exists(&mut r, "pool").await, "the last holder left");
    assert_eq!(c.watched_locks(), 0);

    // A key that is not a semaphore: WRONGTYPE, as for locks.
    set_string(&mut r, "text").await;
    assert!(matches!(
        c.semaphore("text", 2).try_acquire(1).await,
        Err(Error::WrongType { .. })
    ));
    let lock = c.lock("locked").acquire().await.unwrap();
    assert!(matches!(
        c.semaphore("locked", 2).try_acquire(1).await,
        Err(Error::WrongType { .. })
    ));
    lock.release().await.unwrap();
}

/// 8 tasks x 25 rounds on capacity 3, taking 1 or 2 permits: the permits in use, counted
/// on the client side, never exceed 3; and the tasks did overlap.
async fn capacity_never_exceeded(b: Backend) {
    const CAPACITY: u32 = 3;
    let (_s, c, mut r) = setup(b).await;
    let in_use = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..8u32)
        .map(|t| {
            let sem = c.semaphore("crowd", CAPACITY);
            let (in_use, most) = (in_use.clone(), most.clone());
            tokio::spawn(async move {
                let n = 1 + t % 2;
                for _ in 0..25 {
                    let g = sem.acquire(n).await.unwrap();
                    let now = in_use.fetch_add(n, Ordering::SeqCst) + n;
                    assert!(now <= CAPACITY, "{now} permits in use");
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    // Counted down before the permits go back, so the count never lags.
                    in_use.fetch_sub(n, Ordering::SeqCst);
                    g.release().await.unwrap();
                }
            })
        })
        .collect();
    let all = futures::future::join_all(tasks);
    for t in tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("every round done")
    {
        t.unwrap();
    }
    assert!(
        most.load(Ordering::SeqCst) >= 2,
        "the tasks never overlapped"
    );
    assert!(!exists(&mut r, "crowd").await);
    assert_eq!(c.watched_locks(), 0);
}

/// Native: strict FIFO seen from the client. A head request that does not fit blocks a
/// smaller one behind it, and a try without wait is refused while others wait; the release
/// grants both waiters together. `waiters()` shows the queue in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_head_of_line_native() {
    let b = Backend::Native;
    let (_s, c, mut r) = setup(b).await;
    let holder = c.semaphore("hol", 3).acquire(2).await.unwrap();
    let big = c.semaphore("hol", 3);
    let small = c.semaphore("hol", 3);
    let big_task = {
        let big = big.clone();
        tokio::spawn(async move { big.acquire(2).await })
    };
    until(Duration::from_secs(5), "the big request to queue", || {
        let c = c.clone();
        async move { c.waiters("hol").await.unwrap().len() == 1 }
    })
    .await;
    let small_task = {
        let small = small.clone();
        tokio::spawn(async move {
            small
                .try_acquire_for(1, Duration::from_secs(10), None)
                .await
        })
    };
    until(Duration::from_secs(5), "the small request to queue", || {
        let c = c.clone();
        async move { c.waiters("hol").await.unwrap().len() == 2 }
    })
    .await;
    let queue = c.waiters("hol").await.unwrap();
    assert_eq!(queue[0].owner, big.owner().id());
    assert_eq!(queue[0].request, WaitRequest::Permits(2));
    assert_eq!(queue[0].timeout_left, None);
    assert_eq!(queue[1].owner, small.owner().id());
    assert_eq!(queue[1].request, WaitRequest::Permits(1));
    let left = queue[1].timeout_left.expect("a wait with a limit");
    assert!(left <= Duration::from_secs(10), "{left:?}");
    assert!(queue[0].waited >= queue[1].waited);
    // One permit is free, but the head needs two: nobody passes it.
    newcomer_refused(&c, &mut r, "hol", 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !small_task.is_finished(),
        "the small request passed the head"
    );
    let t = Instant::now();
    holder.release().await.unwrap();
    let g_big = big_task.await.unwrap().unwrap();
    let g_small = granted_soon(small_task, t).await; // with the head
    assert_eq!((g_big.owner_permits(), g_small.owner_permits()), (2, 1));
    assert!(c.waiters("hol").await.unwrap().is_empty());
    assert_eq!(info_int(&mut r, "hol", "available").await, 0);
    release_all(&mut r, "hol", [g_big, g_small]).await;
}

/// A wait with a limit answers None at its end and leaves nothing behind: no waiter in the
/// module's queue, no subscription on plain Redis.
async fn try_acquire_for_times_out_leaving_no_waiter(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let holder = c.semaphore("t", 2).acquire(2).await.unwrap();
    let other = c.semaphore("t", 2);
    let t = Instant::now();
    let got = other
        .try_acquire_for(1, Duration::from_millis(300), None)
        .await
        .unwrap();
    let waited = t.elapsed();
    assert!(got.is_none());
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    if b == Backend::Native {
        assert!(c.waiters("t").await.unwrap().is_empty());
        assert_eq!(info_waiters(&mut r, "t").await, 0);
    } else {
        let channel =
            dlock_client::scripts::channel_name(dlock_client::scripts::DEFAULT_CHANNEL_PREFIX, "t");
        let mut rc = r.clone();
        until(Duration::from_secs(3), "the subscription to end", || {
            let (mut rc, channel) = (rc.clone(), channel.clone());
            async move { numsub(&mut rc, &channel).await == 0 }
        })
        .await;
        assert_eq!(numsub(&mut rc, &channel).await, 0);
    }
    assert_eq!(other.held_by_owner().await.unwrap(), 0);
    holder.release().await.unwrap();
    let g = other.try_acquire(2).await.unwrap().expect("free again");
    g.release().await.unwrap();
}

/// 30 rounds: an acquire of 2 permits waiting on a full semaphore is cancelled at a random
/// moment around the holder's release; afterwards nobody holds a permit (the waiter's
/// client has a long lease, so a forgotten grant would stay for 30 s).
async fn cancelled_acquire_leaves_no_hold(b: Backend) {
    cancel_rounds(b, 30, "permit", |h, w, key| async move {
        let g = h.semaphore(key.as_str(), 2).acquire(2).await.unwrap();
        let sem = w.semaphore(key.as_str(), 2);
        (
            tokio::spawn(async move { sem.acquire(2).await }),
            g.release(),
        )
    })
    .await;
}

/// A holder that crashes (its runtime, watchdog and connections gone, no release sent)
/// gives its permits back when its own lease lapses, while another holder keeps renewing.
async fn crashed_holder_gives_permits_back(b: Backend) {
    let (s, c, mut r) = setup(b).await;
    let renewer = c.semaphore("crash", 2).acquire(1).await.unwrap();
    // The crashing holder lives on its own runtime, shut down under its feet.
    let crashed_owner = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Runtime::new().unwrap();
                let id = rt.block_on(async {
                    let doomed = client(&s, b).await;
                    let g = doomed.semaphore("crash", 2).acquire(1).await.unwrap();
                    let id = g.owner_id().to_string();
                    std::mem::forget(g); // never released
                    id
                });
                rt.shutdown_background();
                id
            })
            .join()
            .unwrap()
    });
    let crashed_at = Instant::now();
    let field = format!("permits:{crashed_owner}");
    assert_eq!(hget(&mut r, "crash", &field).await, Some(1));
    let waiter = c.semaphore("crash", 2);
    let g = waiter
        .try_acquire_for(1, Duration::from_secs(5), None)
        .await
        .unwrap()
        .expect("the crashed holder's permit comes back");
    let after = crashed_at.elapsed();
    assert!(after <= LEASE + Duration::from_secs(1), "{after:?}");
    assert_eq!(hget(&mut r, "crash", &field).await, None);
    // The renewing holder kept its permit all along.
    tokio::time::sleep(LEASE * 2).await; // time passing is what is tested
    assert!(renewer.lost().check().is_none());
    let me = format!("permits:{}", renewer.owner_id());
    assert_eq!(hget(&mut r, "crash", &me).await, Some(1));
    release_all(&mut r, "crash", [g, renewer]).await;
}

/// The watchdog keeps permits far beyond one lease; permits taken with a lease (no
/// watchdog) lapse, the guard's lost signal says so, and the permits are free again.
async fn watchdog_keeps_permits_lease_lapses(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let sem = c.semaphore("wd", 3);
    let watched = sem.acquire(1).await.unwrap();
    let leased = c
        .semaphore("wd", 3)
        .try_acquire_for(2, Duration::ZERO, Some(Duration::from_millis(200)))
        .await
        .unwrap()
        .unwrap();
    assert!(!leased.is_watched());
    let lost = tokio::time::timeout(Duration::from_secs(3), leased.lost())
        .await
        .expect("the lease ends");
    assert_eq!(lost, LostReason::LeaseExpired);
    tokio::time::sleep(LEASE * 3).await; // time passing is what is tested
    assert!(watched.lost().check().is_none());
    assert_eq!(sem.held_by_owner().await.unwrap(), 1);
    let p = pttl(&mut r, "wd").await;
    assert!(p > 0 && p <= LEASE.as_millis() as i64, "pttl {p}");
    // The lapsed permits are free again.
    let again = c
        .semaphore("wd", 3)
        .try_acquire(2)
        .await
        .unwrap()
        .expect("the lapsed permits");
    assert!(matches!(leased.release().await, Err(Error::NotHeld(_))));
    release_all(&mut r, "wd", [again, watched]).await;
}

/// Deleting the key: the watchdog's next renewal finds the owner gone and `lost()` fires.
async fn lost_when_deleted(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let g = c.semaphore("del", 3).acquire(2).await.unwrap();
    let lost = g.lost();
    assert!(lost.check().is_none());
    del(&mut r, "del").await;
    let t = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .expect("lost fires");
    assert_eq!(reason, LostReason::NotHeld);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(c.watched_locks(), 0);
    assert!(matches!(g.release().await, Err(Error::NotHeld(_))));
}

/// `waiters()`: typed rows for every kind of request on the native backend (in order, with
/// their time-outs); empty for a free or missing key; WRONGTYPE for a non-lock value. The
/// script backend has no server-side queue and says so.
async fn waiters_of_every_kind(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    if b == Backend::Script {
        assert!(matches!(c.waiters("any").await, Err(Error::Unsupported(_))));
        return;
    }
    assert!(c.waiters("missing").await.unwrap().is_empty());
    let held = c.lock("L").acquire().await.unwrap();
    assert!(c.waiters("L").await.unwrap().is_empty());
    let lock_waiter = c.lock("L");
    let t1 = {
        let l = lock_waiter.clone();
        tokio::spawn(async move { l.acquire().await })
    };
    let rw = c.rwlock("R");
    let reader = rw.read().acquire().await.unwrap();
    let writer = c.rwlock("R");
    let t2 = {
        let w = writer.clone();
        tokio::spawn(async move {
            w.write()
                .try_acquire_for(Duration::from_secs(20), None)
                .await
        })
    };
    until(Duration::from_secs(5), "both to queue", || {
        let c = c.clone();
        async move {
            c.waiters("L").await.unwrap().len() == 1 && c.waiters("R").await.unwrap().len() == 1
        }
    })
    .await;
    let wl = &c.waiters("L").await.unwrap()[0];
    assert_eq!(
        (wl.owner.as_str(), &wl.request, wl.timeout_left),
        (lock_waiter.owner().id(), &WaitRequest::Lock, None)
    );
    let ww = &c.waiters("R").await.unwrap()[0];
    assert_eq!(ww.owner, writer.owner().id());
    assert_eq!(ww.request, WaitRequest::Write);
    assert!(ww
        .timeout_left
        .is_some_and(|t| t <= Duration::from_secs(20)));
    // A reader after a waiting writer queues behind it (fair to writers).
    let late_reader = c.rwlock("R");
    let t3 = {
        let l = late_reader.clone();
        tokio::spawn(async move { l.read().acquire().await })
    };
    until(Duration::from_secs(5), "the reader to queue", || {
        let c = c.clone();
        async move { c.waiters("R").await.unwrap().len() == 2 }
    })
    .await;
    let q = c.waiters("R").await.unwrap();
    assert_eq!(q[1].request, WaitRequest::Read);
    assert_eq!(q[1].owner, late_reader.owner().id());
    // Served: the queues empty.
    held.release().await.unwrap();
    reader.release().await.unwrap();
    t1.await.unwrap().unwrap().release().await.unwrap();
    let w = t2.await.unwrap().unwrap().expect("writer granted");
    w.release().await.unwrap();
    t3.await.unwrap().unwrap().release().await.unwrap();
    assert!(c.waiters("L").await.unwrap().is_empty());
    assert!(c.waiters("R").await.unwrap().is_empty());
    set_string(&mut r, "text").await;
    assert!(matches!(
        c.waiters("text").await,
        Err(Error::WrongType { .. })
    ));
}

/// A server with the module, a native and a script client on one semaphore: the module
/// accepts the Lua scripts' hash (same layout), they exclude each other, and each one's
/// release lets the other's waiter in (native waiters hear the script's writes; script
/// waiters try again within 100 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_and_script_share_a_semaphore() {
    let s = Server::start();
    let n = client(&s, Backend::Native).await;
    let sc = client(&s, Backend::Script).await;
    assert!(n.is_native() && !sc.is_native());
    let mut r = raw(&s).await;
    let native_held = n.semaphore("shared", 3).acquire(2).await.unwrap();
    let script_sem = sc.semaphore("shared", 3);
    let script_held = take_the_last_permit(&script_sem).await;
    newcomer_refused(&n, &mut r, "shared", 0).await;
    // Both watchdogs renew, each with its own command; the module still reads a semaphore.
    tokio::time::sleep(LEASE * 2).await; // time passing is what is tested
    assert!(script_held.lost().check().is_none() && native_held.lost().check().is_none());
    assert_eq!(info_int(&mut r, "shared", "available").await, 0);

    // A native waiter, let in by the script client's release.
    let native_waiter = n.semaphore("shared", 3);
    let task = tokio::spawn(async move { native_waiter.acquire(1).await });
    until_waiting(&r, Backend::Native, "shared").await;
    let t = Instant::now();
    script_held.release().await.unwrap();
    let g = task.await.unwrap().unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // A script waiter, let in by the native client's release.
    let task = tokio::spawn(async move {
        script_sem
            .try_acquire_for(2, Duration::from_secs(5), None)
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = Instant::now();
    native_held.release().await.unwrap();
    let sg = granted_soon(task, t).await;
    assert_eq!(info_int(&mut r, "shared", "available").await, 0);
    release_all(&mut r, "shared", [sg, g]).await;
}

/// Another owner on a semaphore with one permit free: 2 do not fit, 1 does.
async fn take_the_last_permit(sem: &Semaphore) -> SemaphoreGuard {
    assert!(sem.try_acquire(2).await.unwrap().is_none(), "2 permits fit");
    sem.try_acquire(1).await.unwrap().expect("the last permit")
}

/// `available` permits of `key` are free (DLOCK.INFO), yet a new owner's try for one is
/// refused (none free, or a request ahead in the queue needs more).
async fn newcomer_refused(c: &Client, r: &mut Conn, key: &str, available: i64) {
    assert_eq!(info_int(r, key, "available").await, available);
    let newcomer = c.semaphore(key, 3).try_acquire(1).await.unwrap();
    assert!(newcomer.is_none(), "a newcomer got a permit of {key}");
}

/// The permits a waiting `try_acquire_for` task got, soon after `released` (when the
/// release that lets it in was sent).
async fn granted_soon(
    task: JoinHandle<dlock_client::Result<Option<SemaphoreGuard>>>,
    released: Instant,
) -> SemaphoreGuard {
    let g = task
        .await
        .unwrap()
        .unwrap()
        .expect("granted after the release");
    let after = released.elapsed();
    assert!(after < Duration::from_secs(2), "{after:?}");
    g
}

/// Release every guard; the last holder leaves, so `key` is gone.
async fn release_all<const N: usize>(r: &mut Conn, key: &str, guards: [SemaphoreGuard; N]) {
    for g in guards {
        g.release().await.unwrap();
    }
    assert!(!exists(r, key).await, "the last holder left {key}");
}

both_backends!(
    permits_add_up_and_release,
    capacity_never_exceeded,
    try_acquire_for_times_out_leaving_no_waiter,
    cancelled_acquire_leaves_no_hold,
    crashed_holder_gives_permits_back,
    watchdog_keeps_permits_lease_lapses,
    lost_when_deleted,
    waiters_of_every_kind,
);

/// The blocking facade: permits per thread (a thread's guards add up, another thread is
/// another owner), waiting, release, lost, drop.
fn blocking_semaphore(b: Backend) {
    let s = server(b);
    let c = blocking::Client::build(
        Client::builder(s.url())
            .backend(b)
            .lease(LEASE)
            .renew_interval(INTERVAL),
    )
    .unwrap();
    let sem = c.semaphore("bs", 2);
    let g1 = sem.acquire(1).unwrap();
    let g2 = sem.try_acquire(1).unwrap().expect("the second permit");
    assert_eq!((g1.owner_permits(), g2.owner_permits()), (1, 2));
    assert_eq!(g1.owner_id(), c.thread_owner().id());
    assert_eq!(sem.held_by_current_thread().unwrap(), 2);
    // Another thread: full, then woken by this thread's release.
    let (tx, rx) = std::sync::mpsc::channel();
    let other = {
        let sem = sem.clone();
        std::thread::spawn(move || {
            let none = sem
                .try_acquire_for(1, Duration::from_millis(200), None)
                .unwrap()
                .is_none();
            tx.send(none).unwrap();
            let g = sem.acquire(2).unwrap();
            let me = sem.held_by_current_thread().unwrap();
            g.release().unwrap();
            me
        })
    };
    assert!(
        rx.recv().unwrap(),
        "another thread got a permit of a full semaphore"
    );
    std::thread::sleep(LEASE * 2); // the watchdog keeps ours meanwhile
    assert_eq!(g1.wait_lost(Duration::from_millis(10)), None);
    let lost = g1.lost();
    g2.release().unwrap();
    assert_eq!(lost.check(), None, "the thread still holds a permit");
    drop(g1); // released before drop returns
    assert_eq!(lost.check(), Some(LostReason::Released));
    assert_eq!(other.join().unwrap(), 2);
    assert_eq!(sem.held_by_current_thread().unwrap(), 0);
    if b == Backend::Native {
        assert!(c.waiters("bs").unwrap().is_empty());
    }
}

#[test]
fn blocking_semaphore_native() {
    blocking_semaphore(Backend::Native)
}

#[test]
fn blocking_semaphore_script() {
    blocking_semaphore(Backend::Script)
}
