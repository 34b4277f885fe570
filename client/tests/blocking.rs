//! The blocking facade: reentrant per thread, like Redisson.

mod support;

use std::time::Duration;

use dlock_client::{blocking, Backend, Client, LostReason};
use support::*;

fn bclient(s: &Server, b: Backend) -> blocking::Client {
    blocking::Client::build(
        Client::builder(s.url())
            .backend(b)
            .lease(LEASE)
            .renew_interval(INTERVAL),
    )
    .unwrap()
}

fn per_thread_reentrancy(b: Backend) {
    let s = server(b);
    let c = bclient(&s, b);
    let lock = c.lock("t");
    let g1 = lock.acquire().unwrap();
    let g2 = lock.try_acquire().unwrap().expect("same thread: reentrant");
    assert_eq!((g1.hold_count(), g2.hold_count()), (1, 2));
    assert_eq!(g1.owner_id(), c.thread_owner().id());
    assert!(lock.is_held_by_current_thread().unwrap());
    // Another thread is another owner.
    let (c2, l2) = (c.clone(), lock.clone());
    let other = std::thread::spawn(move || {
        assert!(!l2.is_held_by_current_thread().unwrap());
        let none = l2
            .try_acquire_for(Duration::from_millis(200), None)
            .unwrap()
            .is_none();
        (none, c2.thread_owner())
    })
    .join()
    .unwrap();
    assert!(other.0);
    assert_ne!(other.1, c.thread_owner());
    // Watchdog keeps it past its lease.
    std::thread::sleep(LEASE * 3);
    assert!(g1.lost().check().is_none());
    assert!(lock.is_locked().unwrap());
    g2.release().unwrap();
    let lost = g1.lost();
    g1.release().unwrap();
    assert_eq!(lost.check(), Some(LostReason::Released));
    assert!(!lock.is_locked().unwrap());
    // Now another thread gets it; a waiter on this thread is woken by its release.
    let l3 = lock.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let g = l3.acquire().unwrap();
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        g.release().is_ok()
    });
    rx.recv().unwrap();
    let g = lock
        .try_acquire_for(Duration::from_secs(5), Some(Duration::from_secs(2)))
        .unwrap();
    assert!(g.is_some());
    assert!(h.join().unwrap());
    assert!(lock.remaining_lease().unwrap().unwrap() <= Duration::from_secs(2));
    assert!(lock.force_unlock().unwrap());
    // A lease lock has no watchdog: it reports the loss when its lease runs out.
    let g = g.unwrap();
    assert_eq!(
        g.wait_lost(Duration::from_secs(4)),
        Some(LostReason::LeaseExpired)
    );
    assert!(matches!(g.release(), Err(dlock_client::Error::NotHeld(_))));
}

fn drop_releases_before_returning(b: Backend) {
    let s = server(b);
    let c = bclient(&s, b);
    let g = c.lock("bd").acquire().unwrap();
    drop(c);
    drop(g); // the client's runtime goes away with it: the release must already be done
    let mut r = s.connection();
    let n: i64 = redis::cmd("EXISTS").arg("bd").query(&mut r).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn native_drop_releases_before_returning() {
    drop_releases_before_returning(Backend::Native)
}

#[test]
fn script_drop_releases_before_returning() {
    drop_releases_before_returning(Backend::Script)
}

#[test]
fn native_per_thread_reentrancy() {
    per_thread_reentrancy(Backend::Native)
}

#[test]
fn script_per_thread_reentrancy() {
    per_thread_reentrancy(Backend::Script)
}

/// The blocking read-write lock: readers on two threads share it, a writer thread waits for
/// both, and the writer's own thread may also read (same owner).
fn per_thread_rwlock(b: Backend) {
    let s = server(b);
    let c = bclient(&s, b);
    let rw = c.rwlock("cfg");
    let r1 = rw.read().acquire().unwrap();
    let rw2 = rw.clone();
    let r2_held = std::thread::spawn(move || {
        let g = rw2.read().try_acquire().unwrap().expect("readers share");
        g.release().is_ok()
    })
    .join()
    .unwrap();
    assert!(r2_held, "the second reader held and released its own hold");
    // A writer on another thread waits until the reader releases.
    let rw3 = rw.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let w = rw3.write().acquire().unwrap();
        tx.send(()).unwrap();
        // The writer's thread may read too (same owner), and then releases both.
        let r = rw3.read().try_acquire().unwrap().expect("writer may read");
        r.release().unwrap();
        w.release().is_ok()
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "writer granted while a reader holds"
    );
    r1.release().unwrap();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("writer granted after the reader released");
    assert!(writer.join().unwrap());
    assert!(!rw.read().is_locked().unwrap());
}

#[test]
fn native_per_thread_rwlock() {
    per_thread_rwlock(Backend::Native)
}

#[test]
fn script_per_thread_rwlock() {
    per_thread_rwlock(Backend::Script)
}
