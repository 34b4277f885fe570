//! Replication and persistence as plain Redis commands: a replica without the module mirrors
//! the lock state, an AOF replays without the module, a replica with the module is read-only.

use crate::common;
use common::*;
use dlock_testutil::{assert_mirrored, sync_replicas, ReplicaSet};

#[test]
fn replica_without_module_mirrors_locks() {
    let set = ReplicaSet::plain_replicas(1);
    let (mut m, mut r) = set.connections();
    let fk = slot_fence_key("k");

    let got = cmd(&mut m, &["DLOCK.ACQUIRE", "k", "o1", "30000", "FENCE"]);
    assert_eq!(got, Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]));
    assert_mirrored(&mut m, &mut r, &["k", &fk]);
    assert_eq!(hgetall(&mut r, "k"), map(&[("o1", "1"), ("", "1")]));

    assert_eq!(acquire(&mut m, "k", "o1", 40_000), Reply::Int(2));
    assert_mirrored(&mut m, &mut r, &["k", &fk]);
    assert!(pttl(&mut r, "k") > 38_000, "replica got the new lease");

    assert_eq!(renew(&mut m, "k", "o1", 50_000), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k"]);
    assert!(pttl(&mut r, "k") > 48_000);

    assert_eq!(release(&mut m, "k", "o1"), Reply::Int(0));
    assert_mirrored(&mut m, &mut r, &["k"]);

    // hand-off to a waiter on release
    let w = enqueue(
        &set.primary,
        &mut m,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "20000", "WAIT", "10000"],
        1,
    );
    assert_eq!(release(&mut m, "k", "o1"), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k", &fk]);
    assert_eq!(hgetall(&mut r, "k"), map(&[("w", "1")]));
    assert_eq!(
        get_int(&mut r, &fk),
        Some(1),
        "a hand-off without FENCE takes no token"
    );

    // hand-off on DEL
    let w2 = enqueue(
        &set.primary,
        &mut m,
        "k",
        &["DLOCK.ACQUIRE", "k", "w2", "25000", "WAIT", "10000"],
        1,
    );
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut m).unwrap();
    assert_eq!(w2.reply(), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k", &fk]);
    assert_eq!(hgetall(&mut r, "k"), map(&[("w2", "1")]));

    // last release deletes on the replica too
    assert_eq!(release(&mut m, "k", "w2"), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k", &fk]);
    assert!(!exists(&mut r, "k"));
}

#[test]
fn replica_without_module_mirrors_expiry_handoff() {
    let set = ReplicaSet::plain_replicas(1);
    let (mut m, mut r) = set.connections();
    assert_eq!(acquire(&mut m, "k", "h", 250), Reply::Int(1));
    let w = enqueue(
        &set.primary,
        &mut m,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "30000", "WAIT", "10000"],
        1,
    );
    assert_eq!(w.reply(), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k"]);
    assert_eq!(
        hgetall(&mut r, "k"),
        map(&[("w", "1")]),
        "the replica must not lose the new grant to the expiry DEL"
    );
    assert!(pttl(&mut r, "k") > 28_000);
}

#[test]
fn aof_replays_without_the_module() {
    // Kept across the three servers below, removed when dropped.
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut master = Server::builder().dir(dir).aof().start();
    let mut m = master.connection();
    let got = cmd(&mut m, &["DLOCK.ACQUIRE", "k1", "o", "600000", "FENCE"]);
    assert_eq!(got, Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]));
    assert_eq!(acquire(&mut m, "k1", "o", 600_000), Reply::Int(2));
    let got = cmd(&mut m, &["DLOCK.ACQUIRE", "k2", "o", "600000", "FENCE"]);
    assert_eq!(got, Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]));
    assert_eq!(release(&mut m, "k2", "o"), Reply::Int(1));
    assert_eq!(acquire(&mut m, "k3", "h", 600_000), Reply::Int(1));
    let w = enqueue(
        &master,
        &mut m,
        "k3",
        &["DLOCK.ACQUIRE", "k3", "w", "600000", "WAIT", "10000"],
        1,
    );
    assert_eq!(release(&mut m, "k3", "h"), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(1));
    let before_k1 = hgetall(&mut m, "k1");
    let before_k3 = hgetall(&mut m, "k3");
    master.shutdown();

    let plain = Server::builder().without_module().dir(dir).aof().start();
    let mut p = plain.connection();
    assert_eq!(hgetall(&mut p, "k1"), before_k1);
    assert_eq!(before_k1, map(&[("o", "2"), ("", "1")]));
    assert_eq!(hgetall(&mut p, "k3"), before_k3);
    assert_eq!(before_k3, map(&[("w", "1")]));
    let t = pttl(&mut p, "k1");
    assert!(t > 500_000 && t <= 600_000, "lease kept: PTTL {t}");
    assert!(!exists(&mut p, "k2"));
    assert_eq!(get_int(&mut p, &slot_fence_key("k1")), Some(1));
    assert_eq!(get_int(&mut p, &slot_fence_key("k2")), Some(1));
    drop(p);
    let mut plain = plain;
    plain.shutdown();

    // and with the module again, tokens continue
    let again = Server::builder().dir(dir).aof().start();
    let mut a = again.connection();
    assert_eq!(acquire(&mut a, "k1", "x", 1000), Reply::Nil, "still held");
    let got = cmd(&mut a, &["DLOCK.ACQUIRE", "k2", "o", "1000", "FENCE"]);
    assert_eq!(
        got,
        Reply::Arr(vec![Reply::Int(1), Reply::Int(2)]),
        "token continues after restart"
    );
}

#[test]
fn replica_with_module_is_read_only_but_answers_info() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.connection();
    let mut r = replica.connection();
    let got = cmd(&mut m, &["DLOCK.ACQUIRE", "k", "o", "60000", "FENCE"]);
    assert_eq!(got, Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]));
    sync_replicas(&mut m);
    for args in [
        vec!["DLOCK.ACQUIRE", "k", "o2", "1000"],
        vec!["DLOCK.ACQUIRE", "fresh", "o2", "1000"],
        vec!["DLOCK.RELEASE", "k", "o"],
        vec!["DLOCK.RENEW", "k", "o", "1000"],
        vec!["DLOCK.RWLOCK", "rw", "o", "READ", "1000"],
    ] {
        assert_err(&cmd(&mut r, &args), "READONLY");
    }
    let info = dinfo(&mut r, "k");
    assert_eq!(info[0].1, Reply::Bulk("lock".into()));
    assert_eq!(info[3].1.arr()[0].arr()[0], Reply::Bulk("o".into()));
    assert_eq!(info[5].1, Reply::Int(1), "fence visible on the replica");
    assert_eq!(hgetall(&mut r, "k"), map(&[("o", "1"), ("", "1")]));

    // a hand-off on the master is mirrored, and the replica's module does not act on it
    let w = enqueue(
        &master,
        &mut m,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "60000", "WAIT", "10000"],
        1,
    );
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut m).unwrap();
    assert_eq!(w.reply(), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k", &slot_fence_key("k")]);

    // failover: the promoted replica continues the tokens
    assert_eq!(
        cmd(&mut r, &["REPLICAOF", "NO", "ONE"]),
        Reply::Status("OK".into())
    );
    assert_eq!(
        acquire(&mut r, "k", "x", 1000),
        Reply::Nil,
        "still held by w"
    );
    assert_eq!(release(&mut r, "k", "w"), Reply::Int(1));
    let got = cmd(&mut r, &["DLOCK.ACQUIRE", "k", "x", "1000", "FENCE"]);
    assert_eq!(got, Reply::Arr(vec![Reply::Int(1), Reply::Int(2)]));
}
