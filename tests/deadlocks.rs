//! Deadlock detection (issue 22): a WAIT request that would close a cycle of owners waiting
//! for each other is answered `DEADLOCK ...` at once and changes nothing; the others keep
//! waiting. Cycles of 2, 3 and 10 owners, mixed lock kinds; no false positive on chains, on
//! readers sharing a lock, or on a semaphore that an outside holder can still free.

use crate::common;
use common::*;

fn deadlocks(c: &mut Connection) -> i64 {
    info_dlock(c)["dlock_deadlocks"]
}

#[test]
fn two_owners_holding_what_the_other_wants() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k1", "a", 60_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "k2", "b", 60_000), Reply::Int(1));
    let b = enqueue(
        &srv,
        &mut c,
        "k1",
        &["DLOCK.ACQUIRE", "k1", "b", "60000", "WAIT", "0"],
        1,
    );
    let before = deadlocks(&mut c);
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "k2", "a", "60000", "WAIT", "0"]);
    assert_eq!(
        r,
        Reply::Err("DEADLOCK a waits for k2 held by b, b waits for k1 held by a".into())
    );
    assert_eq!(deadlocks(&mut c), before + 1);
    // Nothing changed: a did not queue, b still waits, both locks as they were.
    assert_eq!(waiters(&mut c, "k2"), 0);
    assert_eq!(waiters(&mut c, "k1"), 1);
    assert_eq!(hgetall(&mut c, "k2"), map(&[("b", "1")]));
    b.assert_blocked(ms(50));
    // Without WAIT there is nothing to detect: plain null.
    assert_eq!(acquire(&mut c, "k2", "a", 60_000), Reply::Nil);
    // Breaking the cycle lets b in.
    assert_eq!(release(&mut c, "k1", "a"), Reply::Int(1));
    assert_eq!(b.reply(), Reply::Int(1));
}

#[test]
fn three_owners_through_a_lock_a_rwlock_and_a_semaphore() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "lock", "a", 60_000), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "rw", "b", "WRITE", 60_000), Reply::Int(1));
    assert_eq!(
        cmd(&mut c, &["DLOCK.SEMAPHORE", "sem", "c", "1", "60000"]),
        Reply::Int(1)
    );
    let _a = enqueue(
        &srv,
        &mut c,
        "rw",
        &["DLOCK.RWLOCK", "rw", "a", "READ", "60000", "WAIT", "0"],
        1,
    );
    let _b = enqueue(
        &srv,
        &mut c,
        "sem",
        &["DLOCK.SEMAPHORE", "sem", "b", "1", "60000", "WAIT", "0"],
        1,
    );
    let r = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "lock", "c", "60000", "WAIT", "0"],
    );
    assert_eq!(
        r,
        Reply::Err(
            "DEADLOCK c waits for lock held by a, a waits for rw held by b, \
             b waits for sem held by c"
                .into()
        )
    );
    assert_eq!(waiters(&mut c, "lock"), 0);
}

#[test]
fn ten_owners_in_a_ring() {
    let srv = Server::start();
    let mut c = srv.connection();
    let n = 10;
    for i in 0..n {
        assert_eq!(
            acquire(&mut c, &format!("k{i}"), &format!("o{i}"), 60_000),
            Reply::Int(1)
        );
    }
    let mut pending = vec![];
    for i in 0..n - 1 {
        let key = format!("k{}", i + 1);
        let owner = format!("o{i}");
        let args = ["DLOCK.ACQUIRE", &key, &owner, "60000", "WAIT", "0"];
        pending.push(enqueue(&srv, &mut c, &key, &args, 1));
    }
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "k0", "o9", "60000", "WAIT", "0"]);
    let expected: Vec<String> = (0..n)
        .map(|s| {
            let w = (n - 1 + s) % n; // o9 first, then o0, o1, ...
            let k = (w + 1) % n;
            format!("o{w} waits for k{k} held by o{k}")
        })
        .collect();
    assert_eq!(r, Reply::Err(format!("DEADLOCK {}", expected.join(", "))));
}

#[test]
fn a_queue_step_is_named_behind() {
    let srv = Server::start();
    let mut c = srv.connection();
    // x holds k; a queues first on k; b holds j and queues on k behind a; a then asks for j.
    assert_eq!(acquire(&mut c, "k", "x", 60_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "j", "b", 60_000), Reply::Int(1));
    let _a = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "a", "60000", "WAIT", "0"],
        1,
    );
    // Not a cycle yet: b waits behind a, a waits for x.
    let _b = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "b", "60000", "WAIT", "0"],
        2,
    );
    // a waits for j held by b, b waits behind a: a cycle through the queue.
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "j", "a", "60000", "WAIT", "0"]);
    assert_eq!(
        r,
        Reply::Err("DEADLOCK a waits for j held by b, b waits for k behind a".into())
    );
}

#[test]
fn no_false_positive_on_chains_readers_and_semaphores() {
    let srv = Server::start();
    let mut c = srv.connection();
    let before = deadlocks(&mut c);

    // A chain: b waits for a, c waits for b; a waits for nothing.
    assert_eq!(acquire(&mut c, "c1", "a", 60_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "c2", "b", 60_000), Reply::Int(1));
    let _b = enqueue(
        &srv,
        &mut c,
        "c1",
        &["DLOCK.ACQUIRE", "c1", "b", "60000", "WAIT", "0"],
        1,
    );
    let _c = enqueue(
        &srv,
        &mut c,
        "c2",
        &["DLOCK.ACQUIRE", "c2", "c", "60000", "WAIT", "0"],
        1,
    );

    // Readers sharing: x writes r; r1 and r2 queue READ on r (r2 behind r1: no conflict);
    // r2 holds WRITE on j; r1 waits for j (r2). r2 waits for x, not for r1: no cycle.
    assert_eq!(rwlock(&mut c, "r", "x", "WRITE", 60_000), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "j", "r2", "WRITE", 60_000), Reply::Int(1));
    let _r1 = enqueue(
        &srv,
        &mut c,
        "r",
        &["DLOCK.RWLOCK", "r", "r1", "READ", "60000", "WAIT", "0"],
        1,
    );
    let _r2 = enqueue(
        &srv,
        &mut c,
        "r",
        &["DLOCK.RWLOCK", "r", "r2", "READ", "60000", "WAIT", "0"],
        2,
    );
    let _r1j = enqueue(
        &srv,
        &mut c,
        "j",
        &["DLOCK.RWLOCK", "j", "r1", "WRITE", "60000", "WAIT", "0"],
        1,
    );

    // Readers holding together: s1 and s2 read s; w waits WRITE on s; s1 waits for t held by
    // w2 (not w): no cycle.
    assert_eq!(rwlock(&mut c, "s", "s1", "READ", 60_000), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "s", "s2", "READ", 60_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "t", "w2", 60_000), Reply::Int(1));
    let _w = enqueue(
        &srv,
        &mut c,
        "s",
        &["DLOCK.RWLOCK", "s", "w", "WRITE", "60000", "WAIT", "0"],
        1,
    );
    let _s1 = enqueue(
        &srv,
        &mut c,
        "t",
        &["DLOCK.ACQUIRE", "t", "s1", "60000", "WAIT", "0"],
        1,
    );

    // A full semaphore with an outside holder: p and outsider hold its 2 permits; q holds m
    // and waits for a permit; p waits for m. q waits for p OR the outsider: no deadlock.
    for owner in ["p", "outsider"] {
        assert_eq!(
            cmd(&mut c, &["DLOCK.SEMAPHORE", "sem", owner, "2", "60000"]),
            Reply::Int(1)
        );
    }
    assert_eq!(acquire(&mut c, "m", "q", 60_000), Reply::Int(1));
    let _q = enqueue(
        &srv,
        &mut c,
        "sem",
        &["DLOCK.SEMAPHORE", "sem", "q", "2", "60000", "WAIT", "0"],
        1,
    );
    let _p = enqueue(
        &srv,
        &mut c,
        "m",
        &["DLOCK.ACQUIRE", "m", "p", "60000", "WAIT", "0"],
        1,
    );

    assert_eq!(deadlocks(&mut c), before, "nothing above is a deadlock");
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], 9);

    // Once the outsider waits on the cycle too, every way out is closed.
    let r = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "m", "outsider", "60000", "WAIT", "0"],
    );
    assert_eq!(
        r,
        Reply::Err(
            "DEADLOCK outsider waits for m held by q, q waits for sem held by outsider".into()
        ),
        "q waits for p (who waits for m, held by q) and for the outsider"
    );
}
