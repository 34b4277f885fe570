//! The blocking facade: reentrant per thread, like Redisson.

use crate::support;

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

/// Keys held on `s` among `keys`.
fn held_on(s: &Server, keys: &[&str]) -> usize {
    let mut c = s.connection();
    keys.iter()
        .filter(|k| redis::cmd("EXISTS").arg(**k).query::<i64>(&mut c).unwrap() == 1)
        .count()
}

/// The blocking multi-lock: all or nothing over two servers, per thread like the locks.
#[test]
fn blocking_multilock_all_or_nothing_per_thread() {
    let (s1, s2) = (server(Backend::Native), server(Backend::Native));
    let (c1, c2) = (bclient(&s1, Backend::Native), bclient(&s2, Backend::Native));
    let m = blocking::MultiLock::new([c1.lock("a"), c2.lock("b")]);
    assert_eq!(m.len(), 2);
    let g = m.acquire().unwrap();
    assert_eq!(g.len(), 2);
    assert!(g.lost().check().is_none());
    // The same thread again: reentrant on both members.
    let again = m.try_acquire().unwrap().expect("same thread: reentrant");
    again.release().unwrap();
    // Another thread: not granted within the wait, and it leaves nothing of its own.
    let m2 = m.clone();
    let other = std::thread::spawn(move || {
        m2.try_acquire_for(Duration::from_millis(200), None)
            .unwrap()
            .is_none()
    });
    assert!(other.join().unwrap());
    // The watchdog renews every member past its lease.
    std::thread::sleep(LEASE * 3);
    assert_eq!(g.wait_lost(Duration::from_millis(10)), None);
    assert_eq!((held_on(&s1, &["a"]), held_on(&s2, &["b"])), (1, 1));
    g.release().unwrap();
    assert_eq!((held_on(&s1, &["a"]), held_on(&s2, &["b"])), (0, 0));
    // Now another thread gets both; its guard dropped outside a runtime releases at once.
    let m3 = m.clone();
    std::thread::spawn(move || {
        let g = m3
            .try_acquire_for(Duration::from_secs(5), Some(Duration::from_secs(5)))
            .unwrap()
            .expect("free");
        assert_eq!(g.fencing_tokens(), [None, None]);
        drop(g);
    })
    .join()
    .unwrap();
    assert_eq!((held_on(&s1, &["a"]), held_on(&s2, &["b"])), (0, 0));
}

/// The blocking RedLock, built while a node is down: a failed vote; the node is used again
/// once it is back. A multi-lock over the same nodes fails naming the node that is down.
#[test]
fn blocking_redlock_and_multilock_with_a_node_down() {
    let mut servers: Vec<Server> = (0..3).map(|_| server(Backend::Native)).collect();
    let port = servers[0].port();
    servers[0].kill();
    let nodes: Vec<blocking::Node> = servers
        .iter()
        .map(|s| blocking::Node::connect(support::builder(s, Backend::Native)).unwrap())
        .collect();
    assert_eq!(
        nodes.iter().map(blocking::Node::is_up).collect::<Vec<_>>(),
        [false, true, true]
    );
    let lease = Duration::from_secs(5);
    let red = blocking::RedLock::on_nodes(&nodes, "job").node_timeout(Duration::from_millis(300));
    assert_eq!((red.len(), red.quorum()), (3, 2));
    let g = red.try_acquire(lease).unwrap().expect("2 of 3");
    assert_eq!(g.granted(), 2);
    assert!(g.is_valid() && g.remaining() <= lease);
    assert_eq!(g.wait_lost(Duration::from_millis(10)), None);
    // Another thread is another owner: no quorum for it, nothing left of its own.
    let r2 = red.clone();
    let other = std::thread::spawn(move || r2.try_acquire(lease).unwrap().is_none());
    assert!(other.join().unwrap());
    g.release().unwrap();
    assert_eq!(
        held_on(&servers[1], &["job"]) + held_on(&servers[2], &["job"]),
        0
    );

    let m = blocking::MultiLock::on_nodes(nodes.iter().cloned().zip(["x", "y", "z"]));
    match m.try_acquire() {
        Err(dlock_client::Error::Connect { addr, .. }) => {
            assert_eq!(addr, format!("127.0.0.1:{port}"))
        }
        other => panic!(
            "expected a connect error naming the node, got {:?}",
            other.map(|g| g.map(|g| g.len()))
        ),
    }
    assert_eq!(
        held_on(&servers[1], &["x", "y", "z"]) + held_on(&servers[2], &["x", "y", "z"]),
        0
    );

    // Back on its port: the RedLock gets all three votes, the multi-lock all three members.
    servers[0] = Server::builder().port(port).start();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(g) = red.try_acquire(lease).unwrap() {
            let granted = g.granted();
            g.release().unwrap();
            if granted == 3 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node that came back was not used again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let g = m.acquire().unwrap();
    assert_eq!(g.len(), 3);
    g.release().unwrap();
}
