//! Reliability (issue #7), promise 4: replica promotion and master demotion.
//!
//! - A replica WITH the module, promoted with `REPLICAOF NO ONE` after its master crashed,
//!   serves the same locks: the holder can RENEW and RELEASE, others get null, WAIT works
//!   (release and lease-expiry hand-offs), fencing continues.
//! - A master demoted to replica (`REPLICAOF host port`) unblocks its waiters with an error
//!   (Redis answers `-UNBLOCKED ...`), INFO dlock shows 0 waiters, and nobody was granted.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use dlock_testutil::{sync_replicas, wait_replica_synced, LATENESS_BOUND};

#[test]
fn promoted_replica_serves_the_same_locks() {
    let mut master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.connection();
    assert_eq!(
        cmd(&mut m, &["DLOCK.ACQUIRE", "x", "A", "30000", "FENCE"]),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(1)])
    );
    assert_eq!(acquire(&mut m, "x", "A", 30_000), Reply::Int(2));
    assert_eq!(rwlock(&mut m, "rw", "R1", "READ", 30_000), Reply::Int(1));
    assert_eq!(rwlock(&mut m, "rw", "R2", "READ", 30_000), Reply::Int(1));
    assert_eq!(acquire(&mut m, "short", "S", 3000), Reply::Int(1));
    sync_replicas(&mut m);
    let mut r = replica.connection();
    // Before the promotion the replica refuses writes (like any write command).
    assert_err(&acquire(&mut r, "free", "B", 1000), "READONLY");

    // The master crashes; the replica is promoted.
    master.kill();
    assert_eq!(
        cmd(&mut r, &["REPLICAOF", "NO", "ONE"]),
        Reply::Status("OK".into())
    );
    assert_eq!(hgetall(&mut r, "x"), map(&[("A", "2"), ("", "1")]));
    assert!(acquire(&mut r, "x", "B", 1000).is_nil(), "others get null");
    assert_eq!(release(&mut r, "x", "B"), Reply::Nil);
    assert_eq!(renew(&mut r, "x", "B", 1000), Reply::Int(0));
    assert_eq!(
        renew(&mut r, "x", "A", 30_000),
        Reply::Int(1),
        "holder renews"
    );
    assert_pttl_about(&mut r, "x", 30_000);

    // WAIT works on the promoted server: hand-off on release, fence continues.
    let c = enqueue(
        &replica,
        &mut r,
        "x",
        &["DLOCK.ACQUIRE", "x", "C", "30000", "WAIT", "0", "FENCE"],
        1,
    );
    assert_eq!(release(&mut r, "x", "A"), Reply::Int(0));
    c.assert_blocked(ms(50));
    assert_eq!(release(&mut r, "x", "A"), Reply::Int(1));
    assert_eq!(
        c.reply(),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(2)]),
        "waiter granted with the next fencing token"
    );
    assert_eq!(hgetall(&mut r, "x"), map(&[("C", "1"), ("", "2")]));

    // Read-write lock: readers renew and leave, a queued writer gets it.
    assert_eq!(renew(&mut r, "rw", "R1", 30_000), Reply::Int(1));
    let w = enqueue(
        &replica,
        &mut r,
        "rw",
        &["DLOCK.RWLOCK", "rw", "W", "WRITE", "30000", "WAIT", "0"],
        1,
    );
    assert!(
        rwlock(&mut r, "rw", "R3", "READ", 1000).is_nil(),
        "R3 queues behind W"
    );
    assert_eq!(cmd(&mut r, &["DLOCK.RELEASE", "rw", "R1"]), Reply::Int(1));
    w.assert_blocked(ms(50));
    assert_eq!(cmd(&mut r, &["DLOCK.RELEASE", "rw", "R2"]), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(1));

    // A lease replicated from the old master runs out on the new one: punctual hand-off.
    let t0 = Instant::now();
    let left = pttl(&mut r, "short");
    assert!(left > 0, "short lease still running ({left})");
    let deadline = t0 + Duration::from_millis(left as u64);
    let d = enqueue(
        &replica,
        &mut r,
        "short",
        &["DLOCK.ACQUIRE", "short", "D", "5000", "WAIT", "10000"],
        1,
    );
    let (reply, _, at) = d.wait_at(Duration::from_secs(10));
    assert_eq!(reply, Reply::Int(1));
    let late = at.saturating_duration_since(deadline).as_secs_f64() * 1000.0;
    assert!(at + ms(3) >= deadline, "granted before the lease ended");
    assert!(
        late <= LATENESS_BOUND.as_secs_f64() * 1000.0,
        "granted {late:.0} ms after the lease ended"
    );
    println!("promoted replica: expired lease handed on {late:.1} ms after its end");
    assert_eq!(info_dlock(&mut r)["dlock_waiters"], 0);
}

#[test]
fn demoted_master_unblocks_its_waiters_with_an_error() {
    let old = Server::start();
    let new = Server::start();
    let mut o = old.connection();
    let mut n = new.connection();
    let _: () = redis::cmd("SET")
        .arg("on-new")
        .arg("1")
        .query(&mut n)
        .unwrap();
    assert_eq!(acquire(&mut o, "x", "A", 30_000), Reply::Int(1));
    assert_eq!(rwlock(&mut o, "rw", "W", "WRITE", 30_000), Reply::Int(1));
    let waiting = [
        enqueue(
            &old,
            &mut o,
            "x",
            &["DLOCK.ACQUIRE", "x", "W1", "30000", "WAIT", "0"],
            1,
        ),
        enqueue(
            &old,
            &mut o,
            "x",
            &[
                "DLOCK.ACQUIRE",
                "x",
                "W2",
                "30000",
                "WAIT",
                "20000",
                "FENCE",
            ],
            2,
        ),
        enqueue(
            &old,
            &mut o,
            "rw",
            &["DLOCK.RWLOCK", "rw", "R", "READ", "30000", "WAIT", "0"],
            1,
        ),
    ];
    assert_eq!(info_dlock(&mut o)["dlock_waiters"], 3);

    let port = new.port().to_string();
    assert_eq!(
        cmd(&mut o, &["REPLICAOF", "127.0.0.1", &port]),
        Reply::Status("OK".into())
    );
    for p in &waiting {
        let (r, _) = p.wait(Duration::from_secs(5));
        println!("demoted master: {:?} -> {r:?}", p.args);
        match &r {
            Reply::Err(e) => assert!(e.starts_with("UNBLOCKED"), "{:?}: {r:?}", p.args),
            other => panic!("{:?}: expected an UNBLOCKED error, got {other:?}", p.args),
        }
    }
    assert_eq!(info_dlock(&mut o)["dlock_waiters"], 0, "no waiter left");
    assert_eq!(waiters(&mut o, "x"), 0);
    // It follows the new master: its data replaces the old locks; nobody was granted.
    wait_replica_synced(&old, new.port());
    sync_replicas(&mut n);
    assert_eq!(get_int(&mut o, "on-new"), Some(1));
    assert!(!exists(&mut o, "x") && !exists(&mut o, "rw"));
    assert!(
        !exists(&mut n, "x"),
        "no stale grant reached the new master"
    );
    // As a replica it refuses lock writes.
    assert_err(&acquire(&mut o, "x", "W1", 1000), "READONLY");
    ping(&mut o);
}
