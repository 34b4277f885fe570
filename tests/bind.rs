//! BIND grace-ms (issue 22): a hold bound to its connection has its lease cut to the grace
//! when the connection closes (a closed socket, a `kill -9`ed process), replicated like any
//! lease change; a later BIND from another connection rebinds it; RELEASE unbinds; holds
//! without BIND keep their lease.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use dlock_testutil::workers::*;
use dlock_testutil::{assert_mirrored, leases_cut, sync_replicas, ReplicaSet};

/// Waits until the server no longer lists client `id` (its connection is closed).
fn wait_closed(c: &mut Connection, id: i64) {
    wait_for(Duration::from_secs(5), "the connection to close", || {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(c).ok()?;
        (!list.contains(&format!("id={id} "))).then_some(())
    });
}

fn client_id(c: &mut Connection) -> i64 {
    redis::cmd("CLIENT").arg("ID").query(c).unwrap()
}

#[test]
fn a_closed_connection_cuts_the_lease_to_the_grace() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut holder = srv.connection();
    let r = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "k", "a", "60000", "BIND", "300"],
    );
    assert_eq!(r, Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "60000", "WAIT", "20000"],
        1,
    );
    let id = client_id(&mut holder);
    let closed = Instant::now();
    drop(holder);
    wait_closed(&mut c, id);
    let (r, _, at) = w.wait_at(Duration::from_secs(10));
    assert_eq!(r, Reply::Int(1));
    let took = at - closed;
    assert!(
        took >= ms(250) && took < ms(3000),
        "granted {took:?} after the close (grace 300 ms, lease 60 s)"
    );
    assert_eq!(hgetall(&mut c, "k"), map(&[("w", "1")]));
    assert_eq!(leases_cut(&mut c), 1);
}

/// A bare `BIND` (what the clients send by default) takes the default grace, 2 s, or the
/// lease when shorter (no error where `BIND 2000` would be one); on RENEW too, where it
/// rebinds.
#[test]
fn a_bare_bind_takes_two_seconds_or_the_lease() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut holder = srv.connection();
    let r = cmd(&mut holder, &["DLOCK.ACQUIRE", "k", "a", "60000", "BIND"]);
    assert_eq!(r, Reply::Int(1));
    let r = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "other", "a", "60000", "BIND", "FENCE"],
    );
    assert!(matches!(r, Reply::Arr(_)), "BIND then FENCE: {r:?}");
    let r = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "short", "a", "1000", "BIND"],
    );
    assert_eq!(r, Reply::Int(1), "the grace capped at the 1 s lease");
    // `other` is rebound from another connection by a bare BIND on RENEW.
    let mut renewer = srv.connection();
    let r = cmd(
        &mut renewer,
        &["DLOCK.RENEW", "other", "a", "60000", "BIND"],
    );
    assert_eq!(r, Reply::Int(1));
    let id = client_id(&mut holder);
    drop(holder);
    wait_closed(&mut c, id);
    wait_for(Duration::from_secs(5), "the cut", || {
        (leases_cut(&mut c) >= 1).then_some(())
    });
    let left = pttl(&mut c, "k");
    // (-2: the cut lease already ran out, on a machine stalled for the whole grace.)
    assert!(
        left <= 2_000 && left != -1,
        "cut to the 2 s default grace: PTTL {left}"
    );
    assert!(pttl(&mut c, "other") > 50_000, "rebound elsewhere: not cut");
    let id = client_id(&mut renewer);
    drop(renewer);
    wait_closed(&mut c, id);
    wait_for(Duration::from_secs(5), "the second cut", || {
        (pttl(&mut c, "other") <= 2_000).then_some(())
    });
}

#[test]
fn grace_zero_frees_at_once_and_a_cut_never_lengthens() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut holder = srv.connection();
    let r = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "k", "a", "60000", "BIND", "0"],
    );
    assert_eq!(r, Reply::Int(1));
    // A lease shorter than the grace it would get: untouched.
    let r = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "short", "a", "2000", "BIND", "2000"],
    );
    assert_eq!(r, Reply::Int(1));
    let id = client_id(&mut holder);
    drop(holder);
    wait_closed(&mut c, id);
    wait_for(Duration::from_secs(2), "k to be freed", || {
        (!exists(&mut c, "k")).then_some(())
    });
    let left = pttl(&mut c, "short");
    assert!(
        left > 0 && left <= 2000,
        "the shorter lease is kept: {left}"
    );
    assert_eq!(acquire(&mut c, "k", "b", 1000), Reply::Int(1));
    // `short` was not shortened; `k` counted once.
    assert_eq!(leases_cut(&mut c), 1);
}

#[test]
fn without_bind_or_after_release_nothing_is_cut() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut holder = srv.connection();
    assert_eq!(acquire(&mut holder, "plain", "a", 60_000), Reply::Int(1));
    let r = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "released", "a", "60000", "BIND", "0"],
    );
    assert_eq!(r, Reply::Int(1));
    assert_eq!(release(&mut holder, "released", "a"), Reply::Int(1));
    // The same owner takes it again, without BIND, from another connection.
    assert_eq!(acquire(&mut c, "released", "a", 60_000), Reply::Int(1));
    let id = client_id(&mut holder);
    drop(holder);
    wait_closed(&mut c, id);
    // The cut would run on the next event-loop turn; a waiter proves nothing was freed.
    let w = spawn_cmd(
        &srv,
        &["DLOCK.ACQUIRE", "plain", "w", "1000", "WAIT", "500"],
    );
    assert_eq!(w.wait(Duration::from_secs(5)).0, Reply::Nil);
    assert!(pttl(&mut c, "plain") > 55_000);
    assert!(pttl(&mut c, "released") > 55_000);
    assert_eq!(leases_cut(&mut c), 0);
}

#[test]
fn a_new_hold_without_bind_is_not_cut_by_an_old_binding() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut old = srv.connection();
    // Bound, then lapsed (never released): the binding is left behind.
    let r = cmd(&mut old, &["DLOCK.ACQUIRE", "k", "a", "50", "BIND", "0"]);
    assert_eq!(r, Reply::Int(1));
    wait_for(Duration::from_secs(5), "the lease to lapse", || {
        (!exists(&mut c, "k")).then_some(())
    });
    // The same owner takes it again, without BIND, elsewhere.
    assert_eq!(acquire(&mut c, "k", "a", 60_000), Reply::Int(1));
    let id = client_id(&mut old);
    drop(old);
    wait_closed(&mut c, id);
    let w = spawn_cmd(&srv, &["DLOCK.ACQUIRE", "k", "w", "1000", "WAIT", "300"]);
    assert_eq!(w.wait(Duration::from_secs(5)).0, Reply::Nil);
    assert!(pttl(&mut c, "k") > 55_000);
    assert_eq!(leases_cut(&mut c), 0);
}

#[test]
fn a_reconnected_client_that_rebinds_within_the_grace_loses_nothing() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut old = srv.connection();
    let r = cmd(
        &mut old,
        &["DLOCK.ACQUIRE", "k", "a", "10000", "BIND", "300"],
    );
    assert_eq!(r, Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "10000", "WAIT", "0"],
        1,
    );
    // The client reconnects and its watchdog renews with BIND from the new connection.
    let mut new = srv.connection();
    let r = cmd(&mut new, &["DLOCK.RENEW", "k", "a", "10000", "BIND", "300"]);
    assert_eq!(r, Reply::Int(1));
    let id = client_id(&mut old);
    drop(old);
    wait_closed(&mut c, id);
    w.assert_blocked(ms(600)); // twice the grace
    assert_eq!(hgetall(&mut c, "k"), map(&[("a", "1")]));
    assert!(pttl(&mut c, "k") > 8_000);
    assert_eq!(leases_cut(&mut c), 0);
    // Now the new connection goes too: cut.
    let id = client_id(&mut new);
    drop(new);
    wait_closed(&mut c, id);
    assert_eq!(w.wait(Duration::from_secs(5)).0, Reply::Int(1));
    assert_eq!(leases_cut(&mut c), 1);
}

#[test]
fn read_write_and_semaphore_holders_are_cut_alone() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut holder = srv.connection();
    let r = cmd(
        &mut holder,
        &["DLOCK.RWLOCK", "rw", "a", "READ", "60000", "BIND", "0"],
    );
    assert_eq!(r, Reply::Int(1));
    assert_eq!(rwlock(&mut c, "rw", "b", "READ", 60_000), Reply::Int(1));
    let r = cmd(
        &mut holder,
        &["DLOCK.SEMAPHORE", "s", "a", "1", "60000", "BIND", "100"],
    );
    assert_eq!(r, Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        "s",
        &["DLOCK.SEMAPHORE", "s", "w", "1", "60000", "WAIT", "0"],
        1,
    );
    let id = client_id(&mut holder);
    drop(holder);
    wait_closed(&mut c, id);
    assert_eq!(
        w.wait(Duration::from_secs(5)).0,
        Reply::Int(1),
        "the permit came back"
    );
    wait_for(Duration::from_secs(2), "a's read hold to lapse", || {
        (dinfo_field(&mut c, "rw", "holders").arr().len() == 1).then_some(())
    });
    let holders = dinfo_field(&mut c, "rw", "holders").arr();
    assert_eq!(
        holders[0].arr()[0],
        Reply::Bulk("b".into()),
        "b keeps its hold"
    );
    assert!(pttl(&mut c, "rw") > 55_000, "the key follows b's lease");
    assert_eq!(leases_cut(&mut c), 2);
}

#[test]
fn a_waiter_granted_with_bind_is_bound() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "a", 60_000), Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "60000", "WAIT", "0", "BIND", "0"],
        1,
    );
    assert_eq!(release(&mut c, "k", "a"), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(1));
    // The waiter's connection closes (its thread ends after the reply).
    drop(w);
    wait_for(Duration::from_secs(5), "w's hold to be cut", || {
        (!exists(&mut c, "k")).then_some(())
    });
    assert_eq!(leases_cut(&mut c), 1);
}

#[test]
fn the_cut_is_replicated_as_a_lease_change() {
    let set = ReplicaSet::plain_replicas(1);
    let (mut m, mut r) = set.connections();
    let mut holder = set.primary.connection();
    let got = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "k", "a", "60000", "BIND", "1500"],
    );
    assert_eq!(got, Reply::Int(1));
    let got = cmd(
        &mut holder,
        &["DLOCK.RWLOCK", "rw", "a", "WRITE", "60000", "BIND", "1500"],
    );
    assert_eq!(got, Reply::Int(1));
    let id = client_id(&mut holder);
    drop(holder);
    wait_closed(&mut m, id);
    wait_for(Duration::from_secs(2), "the cut", || {
        (leases_cut(&mut m) == 2).then_some(())
    });
    sync_replicas(&mut m);
    assert_mirrored(&mut m, &mut r, &["k", "rw"]);
    for key in ["k", "rw"] {
        let left = pttl(&mut r, key);
        assert!(left > 0 && left <= 1500, "{key} on the replica: {left}");
    }
}

/// Worker: takes `BIND_KEY` for `BIND_OWNER` with a 60 s lease bound with a `BIND_GRACE` ms
/// grace, reports, then idles until killed.
#[test]
fn worker_bound_holder() {
    if !is_worker("bound-holder") {
        return;
    }
    let mut con = redis::Client::open(param("BIND_URL").as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let grace = param("BIND_GRACE");
    let r = cmd(
        &mut con,
        &[
            "DLOCK.ACQUIRE",
            &param("BIND_KEY"),
            "crashed",
            "60000",
            "BIND",
            &grace,
        ],
    );
    assert_eq!(r, Reply::Int(1));
    report("granted", 1);
    loop {
        std::thread::sleep(Duration::from_secs(1)); // killed by the parent
    }
}

#[test]
fn kill9_of_a_holder_process_frees_its_lock_after_the_grace() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut holder = spawn_worker(
        "worker_bound_holder",
        "bound-holder",
        &[
            ("BIND_URL", srv.url()),
            ("BIND_KEY", "k".into()),
            ("BIND_GRACE", "200".into()),
        ],
    );
    holder.expect_report("granted", Duration::from_secs(20));
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "60000", "WAIT", "30000"],
        1,
    );
    let killed = Instant::now();
    holder.kill9();
    let (r, _, at) = w.wait_at(Duration::from_secs(10));
    assert_eq!(r, Reply::Int(1));
    let took = at - killed;
    assert!(
        took >= ms(150) && took < ms(5000),
        "granted {took:?} after kill -9 (grace 200 ms, lease 60 s)"
    );
    println!("kill -9 of a BIND 200 holder (lease 60 s): next grant {took:?} after the kill");
    assert_eq!(leases_cut(&mut c), 1);
}
