//! LOCKDELAY ms (issue 22): after a hold taken with LOCKDELAY ends without RELEASE (lease
//! lapse, BIND cut), nobody is granted the key for `ms`; waiters keep their place and are
//! served when it ends; RELEASE or DEL end it; replicated and persisted (AOF restart,
//! replica promotion); DLOCK.INFO shows `delay-ms`.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use dlock_testutil::{sync_replicas, ReplicaSet};

fn delay_ms(c: &mut Connection, key: &str) -> i64 {
    dinfo_field(c, key, "delay-ms").int()
}

/// Waits until `key` (taken with a short lease) has lapsed.
fn wait_lapsed(c: &mut Connection, key: &str) {
    wait_for(Duration::from_secs(5), "the lease to lapse", || {
        (!exists(c, key)).then_some(())
    });
}

#[test]
fn a_lapsed_hold_delays_the_next_grant_and_waiters_keep_their_place() {
    let srv = Server::start();
    let mut c = srv.connection();
    let before = info_dlock(&mut c)["dlock_lock_delays"];
    let r = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "k", "a", "100", "LOCKDELAY", "800"],
    );
    assert_eq!(r, Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "10000", "WAIT", "10000"],
        1,
    );
    let lapse = Instant::now() + ms(100);
    // The lease lapses: nobody gets the lock during the delay.
    wait_lapsed(&mut c, "k");
    assert_eq!(
        acquire(&mut c, "k", "x", 1000),
        Reply::Nil,
        "no grant during the delay"
    );
    let left = delay_ms(&mut c, "k");
    assert!(left > 0 && left <= 800, "delay-ms {left}");
    assert_eq!(waiters(&mut c, "k"), 1);
    let (r, _, at) = w.wait_at(Duration::from_secs(5));
    assert_eq!(r, Reply::Int(1), "the waiter is served when the delay ends");
    let after_lapse = at.saturating_duration_since(lapse);
    assert!(
        after_lapse >= ms(700) && after_lapse < ms(2500),
        "granted {after_lapse:?} after the lapse (delay 800 ms)"
    );
    assert_eq!(delay_ms(&mut c, "k"), 0);
    assert_eq!(info_dlock(&mut c)["dlock_lock_delays"], before + 1);
    assert!(
        !exists(&mut c, "dlock:delay:{k}"),
        "the companion is gone once granted"
    );
}

#[test]
fn release_and_del_end_it_a_renewal_moves_it() {
    let srv = Server::start();
    let mut c = srv.connection();
    // Released: no delay.
    let r = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "r", "a", "10000", "LOCKDELAY", "60000"],
    );
    assert_eq!(r, Reply::Int(1));
    assert!(exists(&mut c, "dlock:delay:{r}"));
    assert_eq!(release(&mut c, "r", "a"), Reply::Int(1));
    assert_eq!(acquire(&mut c, "r", "b", 1000), Reply::Int(1));
    assert!(!exists(&mut c, "dlock:delay:{r}"));
    // Force-unlocked with DEL: no delay.
    let r = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "d", "a", "10000", "LOCKDELAY", "60000"],
    );
    assert_eq!(r, Reply::Int(1));
    let _: i64 = redis::cmd("DEL").arg("d").query(&mut c).unwrap();
    assert_eq!(acquire(&mut c, "d", "b", 1000), Reply::Int(1));
    // A renewal moves the delay's start with the lease.
    let r = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "n", "a", "300", "LOCKDELAY", "60000"],
    );
    assert_eq!(r, Reply::Int(1));
    assert_eq!(renew(&mut c, "n", "a", 60_000), Reply::Int(1));
    let until: i64 = redis::cmd("HGET")
        .arg("dlock:delay:{n}")
        .arg("until")
        .query(&mut c)
        .unwrap();
    let pexpire: i64 = redis::cmd("PEXPIRETIME").arg("n").query(&mut c).unwrap();
    assert_eq!(until, pexpire, "until follows the renewed lease");
    // Without LOCKDELAY, a lapse delays nothing.
    assert_eq!(acquire(&mut c, "p", "a", 50), Reply::Int(1));
    wait_lapsed(&mut c, "p");
    assert_eq!(acquire(&mut c, "p", "b", 1000), Reply::Int(1));
    assert!(!exists(&mut c, "dlock:delay:{p}"));
    // WRITE takes it, READ does not.
    let r = cmd(
        &mut c,
        &[
            "DLOCK.RWLOCK",
            "rw",
            "a",
            "WRITE",
            "50",
            "LOCKDELAY",
            "60000",
        ],
    );
    assert_eq!(r, Reply::Int(1));
    wait_for(Duration::from_secs(5), "the writer to lapse", || {
        (dinfo_field(&mut c, "rw", "holders").arr().is_empty()).then_some(())
    });
    assert_eq!(rwlock(&mut c, "rw", "b", "READ", 1000), Reply::Nil);
    assert!(delay_ms(&mut c, "rw") > 50_000);
    assert_err(
        &cmd(
            &mut c,
            &["DLOCK.RWLOCK", "rw2", "a", "READ", "50", "LOCKDELAY", "10"],
        ),
        "ERR LOCKDELAY is an option of WRITE, not READ",
    );
}

#[test]
fn a_bind_cut_starts_the_delay() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut holder = srv.connection();
    let r = cmd(
        &mut holder,
        &[
            "DLOCK.ACQUIRE",
            "k",
            "a",
            "60000",
            "BIND",
            "0",
            "LOCKDELAY",
            "60000",
        ],
    );
    assert_eq!(r, Reply::Int(1));
    drop(holder);
    wait_lapsed(&mut c, "k");
    assert_eq!(acquire(&mut c, "k", "b", 1000), Reply::Nil);
    assert!(delay_ms(&mut c, "k") > 55_000);
}

#[test]
fn the_delay_survives_an_aof_restart() {
    let dir = tempfile::tempdir().unwrap();
    let start = || Server::builder().dir(dir.path()).aof().start();
    let srv = start();
    let mut c = srv.connection();
    let r = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "k", "a", "50", "LOCKDELAY", "60000"],
    );
    assert_eq!(r, Reply::Int(1));
    wait_lapsed(&mut c, "k");
    assert_eq!(acquire(&mut c, "k", "b", 1000), Reply::Nil);
    drop(c);
    drop(srv);
    let srv = start();
    let mut c = srv.connection();
    assert_eq!(
        acquire(&mut c, "k", "b", 1000),
        Reply::Nil,
        "still delayed after the restart"
    );
    let left = delay_ms(&mut c, "k");
    assert!(left > 50_000 && left <= 60_000, "delay-ms {left}");
}

#[test]
fn a_promoted_replica_honours_the_delay() {
    let set = ReplicaSet::with_module(1);
    let (mut m, mut r) = set.connections();
    let got = cmd(
        &mut m,
        &["DLOCK.ACQUIRE", "k", "a", "50", "LOCKDELAY", "60000"],
    );
    assert_eq!(got, Reply::Int(1));
    wait_lapsed(&mut m, "k");
    sync_replicas(&mut m);
    drop(set.primary);
    assert_eq!(
        cmd(&mut r, &["REPLICAOF", "NO", "ONE"]),
        Reply::Status("OK".into())
    );
    assert_eq!(
        acquire(&mut r, "k", "b", 1000),
        Reply::Nil,
        "still delayed on the new master"
    );
    assert!(delay_ms(&mut r, "k") > 50_000);
}

/// A server whose walk found no lock-delay key (so it stops looking) learns of those that
/// arrive by replication: it turns replica of a master with a running delay, then master.
#[test]
fn a_master_turned_replica_then_master_honours_its_old_masters_delay() {
    let a = Server::start();
    let b = Server::start();
    let mut ca = a.connection();
    let mut cb = b.connection();
    // b has looked at its (empty) data set and found no delay anywhere.
    assert_eq!(acquire(&mut cb, "k", "x", 1000), Reply::Int(1));
    assert_eq!(release(&mut cb, "k", "x"), Reply::Int(1));
    let got = cmd(
        &mut ca,
        &["DLOCK.ACQUIRE", "k", "a", "50", "LOCKDELAY", "60000"],
    );
    assert_eq!(got, Reply::Int(1));
    wait_lapsed(&mut ca, "k");
    let port = a.port().to_string();
    cmd(&mut cb, &["REPLICAOF", "127.0.0.1", &port]);
    wait_for(Duration::from_secs(10), "b in sync with a", || {
        (dlock_testutil::info_field(&mut cb, "replication", "master_link_status").as_deref()
            == Some("up"))
        .then_some(())
    });
    sync_replicas(&mut ca);
    cmd(&mut cb, &["REPLICAOF", "NO", "ONE"]);
    assert_eq!(
        acquire(&mut cb, "k", "b", 1000),
        Reply::Nil,
        "the delay came with the data set"
    );
    assert!(delay_ms(&mut cb, "k") > 50_000);
}

/// SWAPDB moves a running delay to another database with its lock.
#[test]
fn swapdb_moves_the_delay_with_the_lock() {
    let srv = Server::start();
    let mut c = srv.connection();
    cmd(&mut c, &["SELECT", "1"]);
    let got = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "k", "a", "50", "LOCKDELAY", "60000"],
    );
    assert_eq!(got, Reply::Int(1));
    wait_lapsed(&mut c, "k");
    cmd(&mut c, &["SWAPDB", "0", "1"]);
    cmd(&mut c, &["SELECT", "0"]);
    assert_eq!(
        acquire(&mut c, "k", "b", 1000),
        Reply::Nil,
        "delayed in db 0"
    );
    cmd(&mut c, &["SELECT", "1"]);
    assert_eq!(
        acquire(&mut c, "k", "b", 1000),
        Reply::Int(1),
        "db 1 has none"
    );
}
