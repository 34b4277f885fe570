//! Read-write lock guards on both backends (native DLOCK.RWLOCK, Lua on plain Redis).

use crate::support;

use std::time::{Duration, Instant};

use dlock_client::{Backend, Error, LockKind, LostReason};
use support::*;

async fn readers_share_writer_excluded(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let rw1 = c.rwlock("cfg");
    let rw2 = c.rwlock("cfg");
    let r1 = rw1.read().acquire().await.unwrap();
    assert_eq!(r1.hold_count(), 1);
    let r2 = rw2
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("second reader");
    assert_eq!(rw1.mode().await.unwrap(), Some(LockKind::Read));
    let field = format!("read:{}", rw1.owner().id());
    assert_eq!(hget(&mut r, "cfg", &field).await, Some(1));
    let lease: Option<i64> = hget(&mut r, "cfg", &format!("lease:{}", rw1.owner().id())).await;
    assert!(
        lease.unwrap() > 1_600_000_000_000,
        "absolute deadline: {lease:?}"
    );
    // A writer is refused while readers hold it.
    let w = c.rwlock("cfg");
    assert!(w.write().try_acquire().await.unwrap().is_none());
    // ... and waits until both readers are gone.
    let waiter = {
        let w = w.clone();
        tokio::spawn(async move {
            w.write()
                .try_acquire_for(Duration::from_secs(5), None)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    r1.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "writer got in with a reader left");
    let t = Instant::now();
    r2.release().await.unwrap();
    let g = waiter.await.unwrap().unwrap().expect("writer granted");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(w.mode().await.unwrap(), Some(LockKind::Write));
    // Readers are refused while the writer holds it.
    assert!(rw1.read().try_acquire().await.unwrap().is_none());
    g.release().await.unwrap();
    assert!(!exists(&mut r, "cfg").await);
}

async fn writer_reentrant_reads_no_upgrade(b: Backend) {
    let s = server(b);
    let c = client(&s, b).await;
    let rw = c.rwlock("doc");
    let w1 = rw.write().acquire().await.unwrap();
    let w2 = rw
        .write()
        .try_acquire()
        .await
        .unwrap()
        .expect("reentrant write");
    assert_eq!(w2.hold_count(), 2);
    let rd = rw
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("writer may read");
    w2.release().await.unwrap();
    w1.release().await.unwrap();
    // Still read-held by us: the lock is now in read mode; other readers come in.
    assert_eq!(rw.mode().await.unwrap(), Some(LockKind::Read));
    let other = c.rwlock("doc");
    let r2 = other
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("reader joins");
    // A reader asking for WRITE is refused with an error; its read hold is untouched.
    match other.write().try_acquire().await {
        Err(Error::Server(m)) => assert!(m.contains("upgrade"), "{m}"),
        x => panic!("expected an upgrade error, got {x:?}"),
    }
    assert!(other.read().is_held_by_owner().await.unwrap());
    r2.release().await.unwrap();
    rd.release().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());
}

/// Each holder has its own lease: a reader that stops renewing lapses while another reader
/// keeps renewing; the watchdog keeps the lock far beyond one lease.
async fn per_holder_leases_and_watchdog(b: Backend) {
    let (_s, c, mut r) = setup(b).await;
    let a = c.rwlock("k");
    let bb = c.rwlock("k");
    let short = a
        .read()
        .try_acquire_for(Duration::ZERO, Some(Duration::from_millis(200)))
        .await
        .unwrap()
        .unwrap();
    assert!(!short.is_watched());
    let long = bb.read().acquire().await.unwrap(); // watchdog, lease 300 ms
    let lost_short = short.lost();
    assert_eq!(lost_short.await, LostReason::LeaseExpired);
    tokio::time::sleep(Duration::from_millis(900)).await; // three leases
    assert!(long.lost().check().is_none());
    // A writer is still excluded by the renewed reader; the lapsed one is gone.
    let w = c.rwlock("k");
    assert!(w.write().try_acquire().await.unwrap().is_none());
    assert_eq!(
        hget(&mut r, "k", &format!("read:{}", a.owner().id())).await,
        None,
        "lapsed reader pruned"
    );
    assert!(
        matches!(short.release().await, Err(dlock_client::Error::NotHeld(_))),
        "the lapsed hold is not held"
    );
    // Deleting the lock: the watchdog reports it lost.
    let lost = long.lost();
    bb.force_unlock().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), lost)
        .await
        .unwrap();
    assert_eq!(reason, LostReason::NotHeld);
    let g = w.write().acquire().await.unwrap();
    g.release().await.unwrap();
}

both_backends!(
    readers_share_writer_excluded,
    writer_reentrant_reads_no_upgrade,
    per_holder_leases_and_watchdog
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_write_fencing_and_read_token() {
    let s = server(Backend::Native);
    let c = client(&s, Backend::Native).await;
    let rw = c.rwlock("ledger");
    let w = rw.write().fenced().acquire().await.unwrap();
    let t1 = w.fencing_token().unwrap();
    w.release().await.unwrap();
    let w = rw.write().fenced().acquire().await.unwrap();
    let t2 = w.fencing_token().unwrap();
    assert!(t2 > t1);
    w.release().await.unwrap();
    let r = c.rwlock("ledger").read().fenced().acquire().await.unwrap();
    assert_eq!(
        r.fencing_token(),
        Some(t2),
        "READ FENCE returns the current token"
    );
    r.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_rwlock_fencing_unsupported() {
    let s = server(Backend::Script);
    let c = client(&s, Backend::Script).await;
    assert!(matches!(
        c.rwlock("x").write().fenced().try_acquire().await,
        Err(Error::Unsupported(_))
    ));
}

/// The Lua read-write lock writes the module's layout: on a server with the module, a
/// script client's hold excludes a native writer, and the module's DLOCK.INFO reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_rwlock_is_the_module_layout() {
    let s = server(Backend::Native);
    let lua = client(&s, Backend::Script).await;
    let native = client(&s, Backend::Native).await;
    let r = lua.rwlock("shared").read().acquire().await.unwrap();
    assert!(native
        .rwlock("shared")
        .write()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let nr = native
        .rwlock("shared")
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("native reader joins the Lua reader");
    let mut c = raw(&s).await;
    let info: redis::Value = redis::cmd("DLOCK.INFO")
        .arg("shared")
        .query_async(&mut c)
        .await
        .unwrap();
    let txt = format!("{info:?}");
    assert!(
        txt.contains("rwlock") && txt.contains(r.owner_id()),
        "{txt}"
    );
    // The module renews the Lua holder's lease too (same fields).
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(r.lost().check().is_none() && nr.lost().check().is_none());
    nr.release().await.unwrap();
    r.release().await.unwrap();
    let w = native.rwlock("shared").write().try_acquire().await.unwrap();
    assert!(w.is_some());
}
