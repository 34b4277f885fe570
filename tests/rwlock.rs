//! Read-write locks (issue #3): sharing, exclusion, reentrancy, no upgrade, fair FIFO with
//! batch grants, no writer starvation, per-holder leases, RELEASE modes, WRONGTYPE, replication.

use crate::common;
use common::*;
use dlock_testutil::{assert_mirrored, ReplicaSet, LATENESS_BOUND};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn rw_wait<'a>(k: &'a str, o: &'a str, mode: &'a str, lease: &'a str, t: &'a str) -> Vec<&'a str> {
    vec!["DLOCK.RWLOCK", k, o, mode, lease, "WAIT", t]
}

fn server_ms(c: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(c).unwrap();
    s * 1000 + us / 1000
}

#[test]
fn concurrent_readers_and_layout() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "k", "r1", "READ", 10_000), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "k", "r2", "read", 60_000), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "k", "r1", "READ", 10_000), Reply::Int(2));
    let now = server_ms(&mut c);
    let h = hgetall(&mut c, "k");
    assert_eq!(h.get("mode").map(String::as_str), Some("read"), "{h:?}");
    assert_eq!(h.get("read:r1").map(String::as_str), Some("2"), "{h:?}");
    assert_eq!(h.get("read:r2").map(String::as_str), Some("1"), "{h:?}");
    assert_eq!(h.len(), 5, "mode, 2 read counts, 2 leases: {h:?}");
    let l1: i64 = h["lease:r1"].parse().unwrap();
    let l2: i64 = h["lease:r2"].parse().unwrap();
    assert!(
        (l1 - (now + 10_000)).abs() < 1000,
        "lease:r1 {l1} vs now {now}"
    );
    assert!(
        (l2 - (now + 60_000)).abs() < 1000,
        "lease:r2 {l2} vs now {now}"
    );
    assert_pttl_about(&mut c, "k", 60_000);

    let info = dinfo(&mut c, "k");
    assert_eq!(info[0].1, Reply::Bulk("rwlock".into()));
    assert_eq!(info[1].1, Reply::Bulk("read".into()));
    let mut holders: Vec<Vec<Reply>> = info[3].1.arr().iter().map(|h| h.arr()).collect();
    holders.sort_by_key(|h| h[0].str());
    assert_eq!(holders.len(), 2);
    assert_eq!(
        holders[0][..3],
        [
            Reply::Bulk("r1".into()),
            Reply::Bulk("read".into()),
            Reply::Int(2)
        ]
    );
    assert_eq!(
        holders[1][..3],
        [
            Reply::Bulk("r2".into()),
            Reply::Bulk("read".into()),
            Reply::Int(1)
        ]
    );
    assert!(
        holders[0][3].int() <= 10_000 && holders[0][3].int() > 8_000,
        "per-holder lease"
    );
    assert!(holders[1][3].int() > 58_000);

    // RENEW updates only that holder's lease; key TTL is the latest deadline
    assert_eq!(renew(&mut c, "k", "r1", 120_000), Reply::Int(1));
    let h = hgetall(&mut c, "k");
    let l1b: i64 = h["lease:r1"].parse().unwrap();
    assert!(l1b > l1 + 100_000, "lease:r1 renewed: {l1} -> {l1b}");
    assert_eq!(
        h["lease:r2"].parse::<i64>().unwrap(),
        l2,
        "lease:r2 untouched"
    );
    assert_pttl_about(&mut c, "k", 120_000);
    assert_eq!(renew(&mut c, "k", "x", 1000), Reply::Int(0));

    assert_eq!(release(&mut c, "k", "r1"), Reply::Int(0));
    assert_eq!(release(&mut c, "k", "r1"), Reply::Int(1));
    assert!(!hgetall(&mut c, "k").contains_key("read:r1"));
    assert_eq!(release(&mut c, "k", "r2"), Reply::Int(1));
    assert!(!exists(&mut c, "k"), "deleted when the last holder leaves");
}

#[test]
fn readers_and_writers_exclude_each_other() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "k", "r1", "READ", 10_000), Reply::Int(1));
    assert_eq!(
        rwlock(&mut c, "k", "w", "WRITE", 10_000),
        Reply::Nil,
        "reader blocks writer"
    );
    assert_eq!(release(&mut c, "k", "w"), Reply::Nil);
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "k", "r1", "READ"]),
        Reply::Int(1)
    );
    assert!(!exists(&mut c, "k"));
    assert_eq!(rwlock(&mut c, "k", "w", "WRITE", 10_000), Reply::Int(1));
    let h = hgetall(&mut c, "k");
    assert_eq!(h.get("mode").map(String::as_str), Some("write"));
    assert_eq!(h.get("write:w").map(String::as_str), Some("1"));
    assert_eq!(
        rwlock(&mut c, "k", "r2", "READ", 10_000),
        Reply::Nil,
        "writer blocks readers"
    );
    assert_eq!(
        rwlock(&mut c, "k", "w2", "WRITE", 10_000),
        Reply::Nil,
        "writer blocks writers"
    );
    assert_eq!(
        rwlock(&mut c, "k", "w", "WRITE", 10_000),
        Reply::Int(2),
        "reentrant writer"
    );
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "k", "w", "READ"]),
        Reply::Nil,
        "mode not held"
    );
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "k", "w", "WRITE"]),
        Reply::Int(0)
    );
    assert_eq!(release(&mut c, "k", "w"), Reply::Int(1));
    assert!(!exists(&mut c, "k"));
}

#[test]
fn writer_may_also_read_and_must_name_the_mode() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "k", "w", "WRITE", 10_000), Reply::Int(1));
    assert_eq!(
        rwlock(&mut c, "k", "w", "READ", 10_000),
        Reply::Int(1),
        "writer takes a read hold"
    );
    let h = hgetall(&mut c, "k");
    assert_eq!(h.get("write:w").map(String::as_str), Some("1"), "{h:?}");
    assert_eq!(h.get("read:w").map(String::as_str), Some("1"), "{h:?}");
    assert_eq!(h.get("mode").map(String::as_str), Some("write"));
    let r = release(&mut c, "k", "w");
    assert_eq!(
        r,
        Reply::Err("ERR owner holds READ and WRITE: name the mode to release".into())
    );
    assert_eq!(hgetall(&mut c, "k"), h, "the error changes nothing");
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "k", "w", "WRITE"]),
        Reply::Int(1)
    );
    let h = hgetall(&mut c, "k");
    assert_eq!(
        h.get("mode").map(String::as_str),
        Some("read"),
        "turns to read mode: {h:?}"
    );
    assert!(!h.contains_key("write:w"));
    assert_eq!(
        rwlock(&mut c, "k", "r", "READ", 10_000),
        Reply::Int(1),
        "now shared"
    );
    assert_eq!(
        release(&mut c, "k", "w"),
        Reply::Int(1),
        "only READ left: no mode needed"
    );
    assert_eq!(release(&mut c, "k", "r"), Reply::Int(1));
    assert!(!exists(&mut c, "k"));
}

#[test]
fn no_upgrade_from_read_to_write() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "k", "r", "READ", 10_000), Reply::Int(1));
    let before = hgetall(&mut c, "k");
    let up = "ERR cannot upgrade a READ hold to WRITE (it would deadlock)";
    assert_eq!(
        rwlock(&mut c, "k", "r", "WRITE", 10_000),
        Reply::Err(up.into())
    );
    let t = Instant::now();
    assert_eq!(
        cmd(&mut c, &rw_wait("k", "r", "WRITE", "10000", "0")),
        Reply::Err(up.into())
    );
    assert!(t.elapsed() < SEC, "the upgrade error comes at once");
    assert_eq!(hgetall(&mut c, "k"), before, "read hold untouched");
    assert_eq!(waiters(&mut c, "k"), 0);
}

#[test]
fn fifo_mixed_queue_with_batch_grants() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "k", "w0", "WRITE", 60_000), Reply::Int(1));
    let r1 = enqueue(
        &srv,
        &mut c,
        "k",
        &rw_wait("k", "r1", "READ", "60000", "20000"),
        1,
    );
    let r2 = enqueue(
        &srv,
        &mut c,
        "k",
        &rw_wait("k", "r2", "READ", "60000", "20000"),
        2,
    );
    let w1 = enqueue(
        &srv,
        &mut c,
        "k",
        &rw_wait("k", "w1", "WRITE", "60000", "20000"),
        3,
    );
    let r3 = enqueue(
        &srv,
        &mut c,
        "k",
        &rw_wait("k", "r3", "READ", "60000", "20000"),
        4,
    );
    let r4 = enqueue(
        &srv,
        &mut c,
        "k",
        &rw_wait("k", "r4", "READ", "60000", "20000"),
        5,
    );
    assert_eq!(
        rwlock(&mut c, "k", "w0", "READ", 60_000),
        Reply::Int(1),
        "holder's reentrant READ with a queue"
    );
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "k", "w0", "READ"]),
        Reply::Int(1)
    );

    assert_eq!(release(&mut c, "k", "w0"), Reply::Int(1));
    assert_eq!(r1.reply(), Reply::Int(1), "head reader");
    assert_eq!(
        r2.reply(),
        Reply::Int(1),
        "consecutive head readers granted together"
    );
    let h = hgetall(&mut c, "k");
    assert_eq!(h.get("mode").map(String::as_str), Some("read"));
    assert!(
        h.contains_key("read:r1") && h.contains_key("read:r2"),
        "{h:?}"
    );
    assert_eq!(waiters(&mut c, "k"), 3);
    assert!(w1.try_reply().is_none() && r3.try_reply().is_none() && r4.try_reply().is_none());
    assert_eq!(
        rwlock(&mut c, "k", "r5", "READ", 1000),
        Reply::Nil,
        "a waiting writer blocks later readers even in read mode"
    );
    assert_eq!(
        rwlock(&mut c, "k", "r1", "READ", 60_000),
        Reply::Int(2),
        "reentrant reader passes the queue"
    );
    assert_eq!(release(&mut c, "k", "r1"), Reply::Int(0));

    assert_eq!(release(&mut c, "k", "r1"), Reply::Int(1));
    w1.assert_blocked(ms(100));
    assert_eq!(release(&mut c, "k", "r2"), Reply::Int(1));
    assert_eq!(w1.reply(), Reply::Int(1), "writer after the readers");
    let h = hgetall(&mut c, "k");
    assert_eq!(h.get("mode").map(String::as_str), Some("write"), "{h:?}");
    assert!(r3.try_reply().is_none() && r4.try_reply().is_none());

    assert_eq!(release(&mut c, "k", "w1"), Reply::Int(1));
    assert_eq!(r3.reply(), Reply::Int(1));
    assert_eq!(r4.reply(), Reply::Int(1));
    assert_eq!(waiters(&mut c, "k"), 0);
}

#[test]
fn del_hands_over_to_waiting_readers() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "k", "w", "WRITE", 60_000), Reply::Int(1));
    let a = enqueue(
        &srv,
        &mut c,
        "k",
        &rw_wait("k", "a", "READ", "30000", "10000"),
        1,
    );
    let b = enqueue(
        &srv,
        &mut c,
        "k",
        &rw_wait("k", "b", "READ", "30000", "10000"),
        2,
    );
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut c).unwrap();
    assert_eq!(a.reply(), Reply::Int(1));
    assert_eq!(b.reply(), Reply::Int(1));
    let h = hgetall(&mut c, "k");
    assert_eq!(h.get("mode").map(String::as_str), Some("read"));
    assert!(
        h.contains_key("read:a") && h.contains_key("read:b"),
        "{h:?}"
    );
}

#[test]
fn writer_is_not_starved_by_a_stream_of_readers() {
    let srv = Server::start();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = vec![];
    for i in 0..3 {
        let stop = stop.clone();
        let mut con = srv.connection();
        threads.push(std::thread::spawn(move || {
            let owner = format!("reader{i}");
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = cmd(&mut con, &rw_wait("k", &owner, "READ", "5000", "20000"));
                assert_eq!(r, Reply::Int(1), "{owner}");
                std::thread::sleep(ms(30)); // work while holding, overlapping the others
                assert_eq!(release(&mut con, "k", &owner), Reply::Int(1));
                n += 1;
            }
            n
        }));
    }
    let mut c = srv.connection();
    wait_for(5 * SEC, "readers running", || {
        exists(&mut c, "k").then_some(())
    });
    std::thread::sleep(ms(300));
    let t = Instant::now();
    let r = cmd(&mut c, &rw_wait("k", "writer", "WRITE", "5000", "10000"));
    let took = t.elapsed();
    assert_eq!(r, Reply::Int(1), "writer granted");
    let h = hgetall(&mut c, "k");
    assert_eq!(h.get("mode").map(String::as_str), Some("write"), "{h:?}");
    assert!(
        !h.keys().any(|f| f.starts_with("read:")),
        "no reader while writing: {h:?}"
    );
    assert!(
        took < ms(1500),
        "writer waited {took:?} behind 30 ms readers"
    );
    assert_eq!(release(&mut c, "k", "writer"), Reply::Int(1));
    std::thread::sleep(ms(200));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let n = t.join().unwrap();
        assert!(n >= 3, "each reader made progress ({n} rounds)");
    }
}

#[test]
fn crashed_reader_lapses_while_another_renews() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "k", "crashed", "READ", 300), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "k", "alive", "READ", 600), Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &rw_wait("k", "w", "WRITE", "10000", "20000"),
        1,
    );
    let t0 = Instant::now();
    let mut last_renew = Instant::now();
    while t0.elapsed() < ms(1200) {
        assert_eq!(renew(&mut c, "k", "alive", 600), Reply::Int(1));
        last_renew = Instant::now();
        assert!(
            w.try_reply().is_none(),
            "writer granted while 'alive' holds READ"
        );
        std::thread::sleep(ms(100));
    }
    // the crashed reader's own lease ran out although the key stayed alive
    wait_for(2 * SEC, "crashed reader to be removed", || {
        let h = hgetall(&mut c, "k");
        (!h.contains_key("read:crashed") && !h.contains_key("lease:crashed")).then_some(())
    });
    let holders = dinfo_field(&mut c, "k", "holders").arr();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].arr()[0], Reply::Bulk("alive".into()));
    assert_eq!(renew(&mut c, "k", "crashed", 1000), Reply::Int(0));
    assert_eq!(release(&mut c, "k", "crashed"), Reply::Nil);
    // now 'alive' crashes too: the writer gets the lock when its lease ends
    let (r, _, at) = w.wait_at(5 * SEC);
    assert_eq!(r, Reply::Int(1));
    let after = at.duration_since(last_renew);
    assert!(
        after >= ms(580),
        "writer granted before the reader's lease ended: {after:?}"
    );
    assert!(
        after <= ms(600) + LATENESS_BOUND,
        "writer granted {after:?} after the last renew of a 600 ms lease"
    );
    let h = hgetall(&mut c, "k");
    assert_eq!(h.get("mode").map(String::as_str), Some("write"), "{h:?}");
    assert!(!h.contains_key("read:alive"), "{h:?}");
}

#[test]
fn rwlock_fencing() {
    let srv = Server::start();
    let mut c = srv.connection();
    let f = |v: i64, t: i64| Reply::Arr(vec![Reply::Int(v), Reply::Int(t)]);
    assert_eq!(
        cmd(
            &mut c,
            &["DLOCK.RWLOCK", "k", "r", "READ", "10000", "FENCE"]
        ),
        f(1, 0),
        "READ FENCE creating the counter"
    );
    assert_eq!(release(&mut c, "k", "r"), Reply::Int(1));
    assert_eq!(
        cmd(
            &mut c,
            &["DLOCK.RWLOCK", "k", "w", "WRITE", "10000", "FENCE"]
        ),
        f(1, 1)
    );
    assert_eq!(
        cmd(
            &mut c,
            &["DLOCK.RWLOCK", "k", "w", "READ", "10000", "FENCE"]
        ),
        f(1, 1),
        "READ does not advance"
    );
    assert_eq!(
        cmd(
            &mut c,
            &["DLOCK.RWLOCK", "k", "w", "WRITE", "10000", "FENCE"]
        ),
        f(2, 1),
        "reentrant WRITE"
    );
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "k", "w", "READ"]),
        Reply::Int(1)
    );
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "k", "w", "WRITE"]),
        Reply::Int(0)
    );
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "k", "w", "WRITE"]),
        Reply::Int(1)
    );
    assert_eq!(rwlock(&mut c, "k", "w2", "WRITE", 10_000), Reply::Int(1));
    assert_eq!(
        get_int(&mut c, &slot_fence_key("k")),
        Some(1),
        "WRITE without FENCE takes no token"
    );
    assert_eq!(
        cmd(
            &mut c,
            &["DLOCK.RWLOCK", "k", "w2", "WRITE", "10000", "FENCE"]
        ),
        f(2, 2),
        "its first token on re-entry is above the earlier ones"
    );
}

#[test]
fn lock_kinds_do_not_mix() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "rw", "o", "READ", 10_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "ex", "o", 10_000), Reply::Int(1));
    let rw = dump(&mut c, "rw");
    let ex = dump(&mut c, "ex");
    assert_err(&acquire(&mut c, "rw", "o", 10_000), WRONGTYPE);
    assert_err(&acquire(&mut c, "rw", "x", 10_000), WRONGTYPE);
    assert_err(&rwlock(&mut c, "ex", "o", "READ", 10_000), WRONGTYPE);
    assert_err(&rwlock(&mut c, "ex", "x", "WRITE", 10_000), WRONGTYPE);
    assert_err(
        &cmd(&mut c, &["DLOCK.RELEASE", "ex", "o", "WRITE"]),
        WRONGTYPE,
    );
    assert_eq!(dump(&mut c, "rw"), rw);
    assert_eq!(dump(&mut c, "ex"), ex);
    assert_eq!(renew(&mut c, "rw", "o", 20_000), Reply::Int(1));
    assert_eq!(renew(&mut c, "ex", "o", 20_000), Reply::Int(1));
    assert_eq!(
        dinfo_field(&mut c, "rw", "kind"),
        Reply::Bulk("rwlock".into())
    );
    assert_eq!(
        dinfo_field(&mut c, "ex", "kind"),
        Reply::Bulk("lock".into())
    );
}

#[test]
fn replica_without_module_mirrors_rwlock() {
    let set = ReplicaSet::plain_replicas(1);
    let (mut m, mut r) = set.connections();
    assert_eq!(rwlock(&mut m, "k", "r1", "READ", 30_000), Reply::Int(1));
    assert_eq!(rwlock(&mut m, "k", "r2", "READ", 50_000), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k"]);
    assert_eq!(renew(&mut m, "k", "r1", 90_000), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k"]);
    let w = enqueue(
        &set.primary,
        &mut m,
        "k",
        &rw_wait("k", "w", "WRITE", "40000", "10000"),
        1,
    );
    assert_eq!(release(&mut m, "k", "r1"), Reply::Int(1));
    assert_eq!(release(&mut m, "k", "r2"), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k"]);
    let h = hgetall(&mut r, "k");
    assert_eq!(
        h.get("mode").map(String::as_str),
        Some("write"),
        "replica: {h:?}"
    );
    assert!(pttl(&mut r, "k") > 38_000);
    assert_eq!(release(&mut m, "k", "w"), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["k"]);
}
