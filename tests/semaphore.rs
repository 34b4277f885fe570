//! DLOCK.SEMAPHORE (issue #14): replies and hash layout, strict FIFO with head-of-line
//! blocking, heads granted together, a lease per holder, every error and WRONGTYPE pairing
//! across the three kinds, replication and AOF as plain commands, waiters leaving, and
//! several processes never holding more permits than the capacity.

use crate::common;
use common::*;
use dlock_testutil::workers::{run_worker_processes, worker_spec};
use dlock_testutil::{assert_mirrored, ReplicaSet, LATENESS_BOUND};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// `DLOCK.SEMAPHORE key owner capacity lease [extra...]`.
fn sem(c: &mut Connection, key: &str, owner: &str, cap: u32, lease: u64, extra: &[&str]) -> Reply {
    let (cap, lease) = (cap.to_string(), lease.to_string());
    let mut args = vec!["DLOCK.SEMAPHORE", key, owner, &cap, &lease];
    args.extend_from_slice(extra);
    cmd(c, &args)
}

fn sem_args(key: &str, owner: &str, cap: u32, lease: u64, count: u32, wait: u64) -> Vec<String> {
    [
        "DLOCK.SEMAPHORE".to_string(),
        key.into(),
        owner.into(),
        cap.to_string(),
        lease.to_string(),
        "COUNT".into(),
        count.to_string(),
        "WAIT".into(),
        wait.to_string(),
    ]
    .to_vec()
}

/// A waiting SEMAPHORE request, confirmed queued (`n` waiters on `key` in total).
fn wait_sem(srv: &Server, c: &mut Connection, args: &[String], n: i64) -> Pending {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    enqueue(srv, c, &args[1], &words, n)
}

/// A server where `h` holds 2 of the 3 permits of semaphore `s`, and a connection to it.
fn h_holds_two_of_three() -> (Server, Connection) {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(
        sem(&mut c, "s", "h", 3, 60_000, &["COUNT", "2"]),
        Reply::Int(2)
    );
    (srv, c)
}

/// With 1 of the 3 permits of `s` free: `big` queues for 2 (waiting up to `big_wait_ms`, 0:
/// without limit), then `small` for 1, which fits but queues behind it.
fn big_then_small(srv: &Server, c: &mut Connection, big_wait_ms: u64) -> (Pending, Pending) {
    let big = wait_sem(srv, c, &sem_args("s", "big", 3, 60_000, 2, big_wait_ms), 1);
    let small = wait_sem(srv, c, &sem_args("s", "small", 3, 60_000, 1, 0), 2);
    (big, small)
}

fn release_n(c: &mut Connection, key: &str, owner: &str, n: u32) -> Reply {
    cmd(c, &["DLOCK.RELEASE", key, owner, "COUNT", &n.to_string()])
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The permits each owner holds, from the hash itself.
fn holders(c: &mut Connection, key: &str) -> Vec<(String, i64)> {
    hgetall(c, key)
        .into_iter()
        .filter_map(|(f, v)| Some((f.strip_prefix("permits:")?.to_string(), v.parse().ok()?)))
        .collect()
}

fn owners(c: &mut Connection, key: &str) -> Vec<String> {
    holders(c, key).into_iter().map(|(o, _)| o).collect()
}

#[test]
fn replies_layout_release_renew_and_info() {
    let srv = Server::start();
    let mut c = srv.connection();
    let t0 = now_ms();
    assert_eq!(sem(&mut c, "s", "a", 4, 60_000, &[]), Reply::Int(1));
    assert_eq!(
        sem(&mut c, "s", "b", 4, 30_000, &["COUNT", "2"]),
        Reply::Int(2)
    );
    // An owner asking again adds up (nobody waits, so it is served at once).
    assert_eq!(sem(&mut c, "s", "a", 4, 90_000, &[]), Reply::Int(2));
    assert_eq!(
        sem(&mut c, "s", "c", 4, 1000, &[]),
        Reply::Nil,
        "4 of 4 permits are held"
    );
    let h = hgetall(&mut c, "s");
    let lease_a: i64 = h["lease:a"].parse().unwrap();
    let lease_b: i64 = h["lease:b"].parse().unwrap();
    assert!(
        (t0 + 90_000..t0 + 92_000).contains(&lease_a),
        "lease:a is a's own absolute deadline ({lease_a}, t0 {t0})"
    );
    assert!((t0 + 30_000..t0 + 32_000).contains(&lease_b));
    let expected = map(&[
        ("mode", "semaphore"),
        ("capacity", "4"),
        ("permits:a", "2"),
        ("permits:b", "2"),
        ("lease:a", &h["lease:a"]),
        ("lease:b", &h["lease:b"]),
    ]);
    assert_eq!(h, expected);
    assert_pttl_about(&mut c, "s", 90_000); // the latest holder deadline

    let info = dinfo(&mut c, "s");
    let names: Vec<&str> = info.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "kind",
            "capacity",
            "available",
            "mode",
            "lease-ms",
            "holders",
            "waiters",
            "fence",
            "delay-ms"
        ]
    );
    assert_eq!(info[0].1, Reply::Bulk("semaphore".into()));
    assert_eq!(info[1].1, Reply::Int(4));
    assert_eq!(info[2].1, Reply::Int(0));
    let hs = info[5].1.arr();
    assert_eq!(hs.len(), 2);
    assert_eq!(hs[1].arr()[0], Reply::Bulk("b".into()));
    assert_eq!(hs[1].arr()[1], Reply::Bulk("permits".into()));
    assert_eq!(hs[1].arr()[2], Reply::Int(2));
    assert!((28_000..=30_000).contains(&hs[1].arr()[3].int()));

    // RENEW resets the owner's own lease only.
    assert_eq!(renew(&mut c, "s", "b", 120_000), Reply::Int(1));
    assert_eq!(renew(&mut c, "s", "c", 120_000), Reply::Int(0));
    let h2 = hgetall(&mut c, "s");
    assert_eq!(h2["lease:a"], h["lease:a"]);
    assert!(h2["lease:b"].parse::<i64>().unwrap() >= t0 + 120_000);
    assert_pttl_about(&mut c, "s", 120_000);

    // RELEASE: 0 while permits remain (lease untouched), 1 when the last goes, null when
    // none are held; COUNT beyond what is held is an error that changes nothing.
    let before = dump(&mut c, "s");
    assert_err(
        &release_n(&mut c, "s", "a", 3),
        "ERR COUNT 3 is more than the 2 permits",
    );
    assert_eq!(dump(&mut c, "s"), before);
    assert_eq!(release(&mut c, "s", "a"), Reply::Int(0));
    assert_eq!(hgetall(&mut c, "s")["lease:a"], h["lease:a"]);
    assert_eq!(dinfo_field(&mut c, "s", "available"), Reply::Int(1));
    assert_eq!(release(&mut c, "s", "a"), Reply::Int(1));
    assert!(!hgetall(&mut c, "s").contains_key("lease:a"));
    assert_eq!(release(&mut c, "s", "a"), Reply::Nil);
    assert_eq!(release(&mut c, "s", "zz"), Reply::Nil);
    assert_eq!(release_n(&mut c, "s", "b", 2), Reply::Int(1));
    assert!(
        !exists(&mut c, "s"),
        "the last holder leaving deletes the key"
    );
    assert_eq!(release_n(&mut c, "s", "b", 1), Reply::Nil);
    assert_eq!(dinfo_field(&mut c, "s", "kind"), Reply::Bulk("none".into()));

    // Capacity is fixed only while the key exists.
    assert_eq!(sem(&mut c, "s", "a", 2, 1000, &[]), Reply::Int(1));
    assert_eq!(hgetall(&mut c, "s")["capacity"], "2");
    let info = info_dlock(&mut c);
    assert!(info["dlock_grants"] >= 3 && info["dlock_reentrant_grants"] >= 1);
}

#[test]
fn fifo_with_head_of_line_blocking_and_heads_granted_together() {
    let (srv, mut c) = h_holds_two_of_three();
    // w1 needs 2 (one is free): it waits; w2 needs 1, which is free, but queues behind w1.
    let w1 = wait_sem(&srv, &mut c, &sem_args("s", "w1", 3, 60_000, 2, 0), 1);
    let w2 = wait_sem(&srv, &mut c, &sem_args("s", "w2", 3, 60_000, 1, 0), 2);
    w2.assert_blocked(ms(100));
    assert_eq!(
        sem(&mut c, "s", "x", 3, 1000, &[]),
        Reply::Nil,
        "no barging past the queue"
    );
    assert_eq!(
        sem(&mut c, "s", "h", 3, 1000, &[]),
        Reply::Nil,
        "a holder asking for more queues like anyone else"
    );
    assert_eq!(dinfo_field(&mut c, "s", "available"), Reply::Int(1));

    // One permit back: 2 free, w1 fits and is granted inside the RELEASE; w2 does not fit.
    assert_eq!(release(&mut c, "s", "h"), Reply::Int(0));
    assert_eq!(w1.reply(), Reply::Int(2));
    w2.assert_blocked(ms(50));
    assert_eq!(holders(&mut c, "s"), [("h".into(), 1), ("w1".into(), 2)]);
    // The last of h's permits: w2 fits.
    assert_eq!(release(&mut c, "s", "h"), Reply::Int(1));
    assert_eq!(w2.reply(), Reply::Int(1));
    assert_eq!(owners(&mut c, "s"), ["w1", "w2"]);
    assert_eq!(waiters(&mut c, "s"), 0);
    assert_eq!(release_n(&mut c, "s", "w1", 2), Reply::Int(1));
    assert_eq!(release(&mut c, "s", "w2"), Reply::Int(1));

    // Consecutive heads that fit are granted together, up to the first that does not.
    assert_eq!(
        sem(&mut c, "s", "h", 4, 60_000, &["COUNT", "4"]),
        Reply::Int(4)
    );
    let a = wait_sem(&srv, &mut c, &sem_args("s", "a", 4, 60_000, 1, 0), 1);
    let b = wait_sem(&srv, &mut c, &sem_args("s", "b", 4, 60_000, 2, 0), 2);
    let d = wait_sem(&srv, &mut c, &sem_args("s", "d", 4, 60_000, 2, 0), 3);
    let e = wait_sem(&srv, &mut c, &sem_args("s", "e", 4, 60_000, 1, 0), 4);
    let before = info_dlock(&mut c)["dlock_handoffs"];
    assert_eq!(release_n(&mut c, "s", "h", 4), Reply::Int(1));
    assert_eq!(a.reply(), Reply::Int(1));
    assert_eq!(b.reply(), Reply::Int(2));
    d.assert_blocked(ms(50));
    e.assert_blocked(ms(1));
    assert_eq!(owners(&mut c, "s"), ["a", "b"]);
    assert_eq!(info_dlock(&mut c)["dlock_handoffs"] - before, 2);
    assert_eq!(release_n(&mut c, "s", "b", 2), Reply::Int(1));
    assert_eq!(d.reply(), Reply::Int(2));
    assert_eq!(e.reply(), Reply::Int(1), "d and e fit together beside a");
    assert_eq!(dinfo_field(&mut c, "s", "available"), Reply::Int(0));
}

#[test]
fn a_lapsed_holder_gives_its_permits_back_while_another_renews() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(sem(&mut c, "s", "crashed", 2, 300, &[]), Reply::Int(1));
    // "alive"'s lease leaves a busy machine time to queue the waiter and start renewing.
    assert_eq!(sem(&mut c, "s", "alive", 2, 1000, &[]), Reply::Int(1));
    let deadline: i64 = hgetall(&mut c, "s")["lease:crashed"].parse().unwrap();
    let w = wait_sem(&srv, &mut c, &sem_args("s", "w", 2, 60_000, 1, 10_000), 1);
    // "alive" keeps renewing (a watchdog); "crashed" does not.
    let renewer = {
        let mut rc = srv.connection();
        std::thread::spawn(move || {
            for _ in 0..12 {
                assert_eq!(renew(&mut rc, "s", "alive", 1000), Reply::Int(1));
                std::thread::sleep(ms(50));
            }
        })
    };
    let (r, _, at) = w.wait_at(5 * SEC);
    assert_eq!(
        r,
        Reply::Int(1),
        "the waiter gets the crashed holder's permit"
    );
    let late = now_ms() - at.elapsed().as_millis() as i64 - deadline;
    // docs/COMMANDS.md: within 10 ms of the deadline on an idle machine; a loaded one only
    // delays it.
    assert!(
        (0..=LATENESS_BOUND.as_millis() as i64).contains(&late),
        "granted {late} ms after the crashed holder's deadline"
    );
    renewer.join().unwrap();
    assert_eq!(owners(&mut c, "s"), ["alive", "w"]);
    assert!(info_dlock(&mut c)["dlock_leases_expired"] >= 1);
}

#[test]
fn every_error_and_wrongtype_pairing_changes_nothing() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(sem(&mut c, "S", "o", 3, 60_000, &[]), Reply::Int(1));
    assert_eq!(acquire(&mut c, "L", "o", 60_000), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "R", "o", "READ", 60_000), Reply::Int(1));
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut c).unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("list")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("badsem")
        .arg("mode")
        .arg("semaphore")
        .arg("permits:x")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let keys = ["S", "L", "R", "str", "list", "h", "badsem"];
    let snapshot =
        |c: &mut Connection| -> Vec<Option<Vec<u8>>> { keys.iter().map(|k| dump(c, k)).collect() };
    let before = snapshot(&mut c);

    let wrongtype: Vec<Vec<&str>> = vec![
        vec!["DLOCK.ACQUIRE", "S", "o", "1000"],
        vec!["DLOCK.ACQUIRE", "S", "o", "1000", "WAIT", "100"],
        vec!["DLOCK.RWLOCK", "S", "o", "READ", "1000"],
        vec!["DLOCK.RWLOCK", "S", "o", "WRITE", "1000"],
        vec!["DLOCK.SEMAPHORE", "L", "o", "3", "1000"],
        vec!["DLOCK.SEMAPHORE", "L", "x", "3", "1000", "WAIT", "100"],
        vec!["DLOCK.SEMAPHORE", "R", "o", "3", "1000"],
        vec!["DLOCK.SEMAPHORE", "R", "x", "3", "1000"],
        vec!["DLOCK.SEMAPHORE", "str", "o", "3", "1000"],
        vec!["DLOCK.SEMAPHORE", "list", "o", "3", "1000"],
        vec!["DLOCK.SEMAPHORE", "h", "o", "3", "1000"],
        vec!["DLOCK.SEMAPHORE", "badsem", "o", "3", "1000"],
        vec!["DLOCK.RELEASE", "S", "o", "READ"],
        vec!["DLOCK.RELEASE", "S", "o", "WRITE"],
        vec!["DLOCK.RELEASE", "L", "o", "COUNT", "1"],
        vec!["DLOCK.RELEASE", "R", "o", "COUNT", "1"],
        vec!["DLOCK.RELEASE", "badsem", "o", "COUNT", "1"],
        vec!["DLOCK.RENEW", "badsem", "o", "1000"],
        vec!["DLOCK.INFO", "badsem"],
        vec!["DLOCK.WAITERS", "str"],
        vec!["DLOCK.WAITERS", "list"],
        vec!["DLOCK.WAITERS", "h"],
        vec!["DLOCK.WAITERS", "badsem", "COUNT", "1"],
    ];
    for args in &wrongtype {
        assert_eq!(cmd(&mut c, args), Reply::Err(WRONGTYPE.into()), "{args:?}");
    }
    // One command a row (its words split at spaces), and the error it answers.
    #[rustfmt::skip]
    let errors = [
        ("DLOCK.SEMAPHORE S x 5 1000", "ERR semaphore capacity is 3, not 5"),
        ("DLOCK.SEMAPHORE S o 2 1000 WAIT 100", "ERR semaphore capacity is 3, not 2"),
        ("DLOCK.SEMAPHORE S o 3 1000 COUNT 4", "ERR COUNT 4 is more than the capacity 3"),
        ("DLOCK.SEMAPHORE S o 0 1000", "ERR capacity must be a positive integer up to 1000000"),
        ("DLOCK.SEMAPHORE S o 1000001 1000", "ERR capacity must be a positive integer up to 1000000"),
        ("DLOCK.SEMAPHORE S o 3 1000 COUNT -1", "ERR COUNT must be a positive integer up to 1000000"),
        ("DLOCK.SEMAPHORE S o 3 0", "ERR lease-ms must be a positive integer"),
        ("DLOCK.SEMAPHORE S o 3 1000 WAIT -1", "ERR timeout-ms must be a non-negative integer"),
        ("DLOCK.SEMAPHORE S mode 3 1000", "ERR owner name 'mode' is reserved"),
        // Arguments are checked before the key: no WRONGTYPE for these.
        ("DLOCK.SEMAPHORE str o 3 x", "ERR lease-ms must be a positive integer"),
        ("DLOCK.SEMAPHORE L o 3 1000 COUNT 9", "ERR COUNT 9 is more than the capacity 3"),
        ("DLOCK.RELEASE L o COUNT 0", "ERR COUNT must be a positive integer up to 1000000"),
        ("DLOCK.RELEASE S o COUNT 2", "ERR COUNT 2 is more than the 1 permits the owner holds"),
        ("DLOCK.SEMAPHORE S o 3 1000 FENCE", "ERR syntax error"),
        ("DLOCK.SEMAPHORE S o 3 1000 READ", "ERR syntax error"),
        ("DLOCK.SEMAPHORE S o 3 1000 WRITE", "ERR syntax error"),
        ("DLOCK.SEMAPHORE S o 3 1000 WAIT", "ERR syntax error"),
        ("DLOCK.SEMAPHORE S o 3 1000 COUNT 1 COUNT 1", "ERR syntax error"),
        ("DLOCK.RELEASE S o COUNT", "ERR syntax error"),
        ("DLOCK.RELEASE S o READ 1", "ERR syntax error"),
        ("DLOCK.WAITERS S LIMIT 1", "ERR syntax error"),
        ("DLOCK.WAITERS S COUNT 0", "ERR COUNT must be a positive integer up to 1000000"),
        ("DLOCK.SEMAPHORE S o 3", "ERR wrong number of arguments for 'dlock.semaphore' command"),
        ("DLOCK.WAITERS", "ERR wrong number of arguments for 'dlock.waiters' command"),
        ("DLOCK.WAITERS S COUNT 1 x", "ERR syntax error"),
    ];
    for (line, text) in errors {
        let args: Vec<&str> = line.split(' ').collect();
        assert_eq!(cmd(&mut c, &args), Reply::Err(text.to_string()), "{line}");
    }
    assert_eq!(
        cmd(&mut c, &["DLOCK.SEMAPHORE", "S", "", "3", "1000"]),
        Reply::Err("ERR owner must be 1 to 512 bytes".into()),
        "an empty owner"
    );
    assert_eq!(snapshot(&mut c), before, "errors changed nothing");
    assert_eq!(waiters(&mut c, "S"), 0, "errors queued nobody");
    // RENEW and INFO work on every kind.
    for k in ["S", "L", "R"] {
        assert_eq!(renew(&mut c, k, "o", 60_000), Reply::Int(1), "RENEW {k}");
    }
    assert_eq!(
        dinfo_field(&mut c, "R", "kind"),
        Reply::Bulk("rwlock".into())
    );
}

#[test]
fn waiters_leaving_from_the_head_let_the_next_in() {
    let (srv, mut c) = h_holds_two_of_three();
    // Time-out of the head.
    let (big, small) = big_then_small(&srv, &mut c, 200);
    assert!(big.reply().is_nil(), "the head timed out");
    assert_eq!(
        small.reply(),
        Reply::Int(1),
        "the next one fits and is served"
    );
    assert_eq!(release(&mut c, "s", "small"), Reply::Int(1));

    // Disconnect of the head.
    let (big, small) = big_then_small(&srv, &mut c, 0);
    let id = big.client_id.to_string();
    assert_eq!(cmd(&mut c, &["CLIENT", "KILL", "ID", &id]), Reply::Int(1));
    assert_eq!(small.reply(), Reply::Int(1));
    assert_eq!(
        owners(&mut c, "s"),
        ["h", "small"],
        "the gone client got nothing"
    );
    assert_eq!(release(&mut c, "s", "small"), Reply::Int(1));

    // CLIENT UNBLOCK of the head.
    let (big, small) = big_then_small(&srv, &mut c, 0);
    let id = big.client_id.to_string();
    assert_eq!(cmd(&mut c, &["CLIENT", "UNBLOCK", &id]), Reply::Int(1));
    assert!(big.reply().is_nil());
    assert_eq!(small.reply(), Reply::Int(1));
    assert_eq!(owners(&mut c, "s"), ["h", "small"]);

    // Overwritten with a non-lock value: waiters answered WRONGTYPE, the value untouched.
    let w = wait_sem(&srv, &mut c, &sem_args("s", "w", 3, 60_000, 3, 0), 1);
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("mine")
        .query(&mut c)
        .unwrap();
    assert_eq!(w.reply(), Reply::Err(WRONGTYPE.into()));
    let v: String = redis::cmd("GET").arg("s").query(&mut c).unwrap();
    assert_eq!(v, "mine");

    // DEL hands the permits to the waiters.
    let _: () = redis::cmd("DEL").arg("s").query(&mut c).unwrap();
    assert_eq!(
        sem(&mut c, "s", "h", 2, 60_000, &["COUNT", "2"]),
        Reply::Int(2)
    );
    let a = wait_sem(&srv, &mut c, &sem_args("s", "a", 2, 60_000, 1, 0), 1);
    let b = wait_sem(&srv, &mut c, &sem_args("s", "b", 2, 60_000, 1, 0), 2);
    let _: () = redis::cmd("DEL").arg("s").query(&mut c).unwrap();
    assert_eq!(a.reply(), Reply::Int(1));
    assert_eq!(b.reply(), Reply::Int(1));
    assert_eq!(owners(&mut c, "s"), ["a", "b"]);
}

#[test]
fn waiter_limits_apply_to_semaphores() {
    let srv = Server::builder()
        .module_args(["max-waiters-per-key", "1"])
        .start();
    let mut c = srv.connection();
    assert_eq!(sem(&mut c, "s", "h", 1, 60_000, &[]), Reply::Int(1));
    let _w = wait_sem(&srv, &mut c, &sem_args("s", "w", 1, 60_000, 1, 0), 1);
    let r = sem(&mut c, "s", "x", 1, 1000, &["WAIT", "0"]);
    assert_err(&r, "ERR too many waiters");
    assert!(r.err_text().contains("waiters"));
    assert_eq!(waiters(&mut c, "s"), 1);
}

#[test]
fn multi_and_scripts_do_not_block() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(sem(&mut c, "s", "h", 1, 60_000, &[]), Reply::Int(1));
    let r: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.SEMAPHORE")
        .arg(&["s", "x", "1", "1000", "WAIT", "0"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        r,
        vec![Value::Nil],
        "inside MULTI, WAIT behaves as if absent"
    );
    let r = cmd(
        &mut c,
        &[
            "EVAL",
            "return redis.call('DLOCK.SEMAPHORE', KEYS[1], 'x', '1', '1000', 'WAIT', '0')",
            "1",
            "s",
        ],
    );
    assert_eq!(r, Reply::Nil);
    assert_eq!(waiters(&mut c, "s"), 0);
}

#[test]
fn replica_without_module_and_aof_replay_mirror_semaphores() {
    let ReplicaSet {
        primary: master,
        replicas,
    } = ReplicaSet::start(
        Server::builder().aof(),
        1,
        Server::builder().without_module(),
    );
    let replica = &replicas[0];
    let mut m = master.connection();
    let mut r = replica.connection();
    assert_eq!(
        sem(&mut m, "s", "a", 3, 600_000, &["COUNT", "2"]),
        Reply::Int(2)
    );
    assert_eq!(sem(&mut m, "s", "b", 3, 500_000, &[]), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["s"]);
    assert_eq!(renew(&mut m, "s", "b", 700_000), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["s"]);
    // A hand-off inside RELEASE ... COUNT.
    let w = wait_sem(
        &master,
        &mut m,
        &sem_args("s", "w", 3, 650_000, 2, 10_000),
        1,
    );
    assert_eq!(release_n(&mut m, "s", "a", 2), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(2));
    assert_mirrored(&mut m, &mut r, &["s"]);
    // A lapse handed on by the module's timer.
    assert_eq!(sem(&mut m, "t", "gone", 1, 150, &[]), Reply::Int(1));
    let w2 = wait_sem(
        &master,
        &mut m,
        &sem_args("t", "w2", 1, 600_000, 1, 10_000),
        1,
    );
    assert_eq!(w2.reply(), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["s", "t"]);
    assert_eq!(owners(&mut r, "t"), ["w2"]);
    // The last holder leaving deletes the key on the replica too.
    assert_eq!(release(&mut m, "s", "b"), Reply::Int(1));
    assert_eq!(release_n(&mut m, "s", "w", 2), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["s"]);
    assert!(!exists(&mut r, "s"));
    assert_eq!(
        sem(&mut m, "s", "z", 3, 600_000, &["COUNT", "3"]),
        Reply::Int(3)
    );
    let before_s = hgetall(&mut m, "s");
    let before_t = hgetall(&mut m, "t");
    drop(m);
    let dir = master.dir().to_path_buf();
    let mut master = master;
    master.shutdown();

    let plain = Server::builder()
        .without_module()
        .dir(&dir)
        .args(["--appendonly", "yes"])
        .start();
    let mut p = plain.connection();
    assert_eq!(
        hgetall(&mut p, "s"),
        before_s,
        "AOF replayed without the module"
    );
    assert_eq!(hgetall(&mut p, "t"), before_t);
    let t = pttl(&mut p, "s");
    assert!(t > 500_000 && t <= 600_000, "lease kept: PTTL {t}");
}

#[test]
fn sem_worker() {
    let Some(spec) = worker_spec("semaphore") else {
        return; // not a worker run
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (port, id, iters): (u16, &str, u64) = (
        parts[0].parse().unwrap(),
        parts[1],
        parts[2].parse().unwrap(),
    );
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    let owner = format!("p{id}-{}", std::process::id());
    for i in 0..iters {
        let r = sem(&mut c, "s", &owner, 3, 10_000, &["WAIT", "60000"]);
        assert_eq!(r, Reply::Int(1), "{owner} iteration {i}");
        let inside: i64 = redis::cmd("INCR").arg("inside").query(&mut c).unwrap();
        assert!(inside <= 3, "{inside} holders inside a semaphore of 3");
        let mut max: i64 = redis::cmd("GET").arg("max").query(&mut c).unwrap_or(0);
        if inside > max {
            max = inside;
            let _: () = redis::cmd("SET").arg("max").arg(max).query(&mut c).unwrap();
        }
        ping(&mut c); // stay inside a little
        let _: i64 = redis::cmd("DECR").arg("inside").query(&mut c).unwrap();
        assert_eq!(
            release(&mut c, "s", &owner),
            Reply::Int(1),
            "{owner} release {i}"
        );
    }
}

#[test]
fn eight_processes_never_exceed_the_capacity() {
    let srv = Server::start();
    let t0 = Instant::now();
    let specs: Vec<String> = (0..8).map(|i| format!("{},{i},100", srv.port())).collect();
    run_worker_processes("sem_worker", "semaphore", &specs);
    let mut c = srv.connection();
    assert_eq!(get_int(&mut c, "inside"), Some(0));
    let max = get_int(&mut c, "max").unwrap();
    assert!((1..=3).contains(&max), "max holders seen {max}");
    assert!(!exists(&mut c, "s"), "every permit came back");
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], 0);
    eprintln!("8 x 100 loops in {:?}, at most {max} inside", t0.elapsed());
}
