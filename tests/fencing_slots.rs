//! Bounded fencing state: one counter per cluster hash slot however many lock names are
//! fenced, tokens that still strictly increase per lock, and the per-lock counters of earlier
//! versions absorbed (never reissued) on upgrade.

use crate::common;
use common::*;
use dlock_testutil::{assert_mirrored, ReplicaSet};
use std::collections::{BTreeMap, BTreeSet};

fn fenced(c: &mut Connection, key: &str, owner: &str) -> Reply {
    cmd(c, &["DLOCK.ACQUIRE", key, owner, "60000", "FENCE"])
}

fn token(r: &Reply) -> i64 {
    r.arr()[1].int()
}

fn fence_keys(c: &mut Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("dlock:fence*").query(c).unwrap();
    keys.sort();
    keys
}

#[test]
fn many_fenced_names_leave_one_counter_per_slot() {
    let srv = Server::start();
    let mut c = srv.connection();
    let names: Vec<String> = (0..10_000).map(|i| format!("entity:{i}")).collect();
    // Two rounds of acquire + release with FENCE on every name, pipelined.
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    for round in 0..2 {
        for chunk in names.chunks(1000) {
            let mut p = redis::pipe();
            for k in chunk {
                p.cmd("DLOCK.ACQUIRE")
                    .arg(k)
                    .arg("o")
                    .arg(60_000)
                    .arg("FENCE");
                p.cmd("DLOCK.RELEASE").arg(k).arg("o");
            }
            let replies: Vec<redis::Value> = p.query(&mut c).unwrap();
            for (k, pair) in chunk.iter().zip(replies.chunks(2)) {
                let got = token(&to_reply(pair[0].clone()));
                assert_eq!(to_reply(pair[1].clone()), Reply::Int(1), "{k} released");
                if let Some(before) = last.insert(k, got) {
                    assert!(
                        got > before,
                        "{k}: token {got} after {before} (round {round})"
                    );
                }
            }
        }
    }
    let slots: BTreeSet<String> = names.iter().map(|k| slot_fence_key(k)).collect();
    let keys = fence_keys(&mut c);
    assert_eq!(
        keys,
        slots.iter().cloned().collect::<Vec<_>>(),
        "one counter per slot used"
    );
    assert!(keys.len() < names.len(), "{} counters", keys.len());
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize as usize, keys.len(), "nothing else left behind");
}

#[test]
fn legacy_per_lock_counters_are_absorbed_and_replicated() {
    let set = ReplicaSet::plain_replicas(1);
    let (mut m, mut r) = set.connections();
    // What an earlier version left: per-lock counters, one far above the slot's own counter.
    let (old, other) = ("order:7", "{order:7}:rw");
    for (k, v) in [(old, 41), (other, 9)] {
        let _: () = redis::cmd("SET")
            .arg(legacy_fence_key(k))
            .arg(v)
            .query(&mut m)
            .unwrap();
    }
    let counter = slot_fence_key(old);
    assert_eq!(counter, slot_fence_key(other), "same slot");

    // READ reads the old counter without advancing; the old key is absorbed all the same.
    let r1 = cmd(
        &mut m,
        &["DLOCK.RWLOCK", other, "r", "READ", "60000", "FENCE"],
    );
    assert_eq!(r1, Reply::Arr(vec![Reply::Int(1), Reply::Int(9)]));
    assert!(!exists(&mut m, &legacy_fence_key(other)), "absorbed");
    assert_eq!(get_int(&mut m, &counter), Some(9));

    // A grant goes above the old per-lock counter, which is then deleted.
    assert_eq!(
        fenced(&mut m, old, "a"),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(42)])
    );
    assert!(!exists(&mut m, &legacy_fence_key(old)));
    assert_eq!(get_int(&mut m, &counter), Some(42));
    assert_mirrored(
        &mut m,
        &mut r,
        &[
            old,
            &counter,
            &legacy_fence_key(old),
            &legacy_fence_key(other),
        ],
    );
    assert_eq!(
        fence_keys(&mut r),
        vec![counter.clone()],
        "replica: one counter"
    );

    // And on from there, for every lock of the slot.
    assert_eq!(release(&mut m, old, "a"), Reply::Int(1));
    assert_eq!(
        fenced(&mut m, old, "b"),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(43)])
    );
    let w = cmd(&mut m, &["DLOCK.RELEASE", other, "r"]);
    assert_eq!(w, Reply::Int(1));
    let w = cmd(
        &mut m,
        &["DLOCK.RWLOCK", other, "w", "WRITE", "60000", "FENCE"],
    );
    assert_eq!(w, Reply::Arr(vec![Reply::Int(1), Reply::Int(44)]));
}

#[test]
fn corrupt_counters_refuse_and_change_nothing() {
    let srv = Server::start();
    let mut c = srv.connection();
    let _: () = redis::cmd("SET")
        .arg(legacy_fence_key("k"))
        .arg("x")
        .query(&mut c)
        .unwrap();
    let r = fenced(&mut c, "k", "a");
    assert_eq!(
        r,
        Reply::Err(format!(
            "ERR fencing counter '{}' is not an integer",
            legacy_fence_key("k")
        ))
    );
    assert!(!exists(&mut c, "k"), "the grant is undone");
    let _: () = redis::cmd("DEL")
        .arg(legacy_fence_key("k"))
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(slot_fence_key("k"))
        .arg("f")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert_err(
        &fenced(&mut c, "k", "a"),
        "ERR fencing counter 'dlock:fences:{",
    );
    assert!(!exists(&mut c, "k"));
    // A grant without FENCE never reads the counter.
    assert_eq!(acquire(&mut c, "k", "a", 1000), Reply::Int(1));
}
