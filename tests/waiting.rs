//! Server-side waiting (issue #2): FIFO hand-off on RELEASE, expiry, DEL, UNLINK, RENAME,
//! FLUSHALL/FLUSHDB; time-outs; WAIT 0; queue respected by non-waiting acquires; waiters that
//! disconnect or are unblocked; MULTI/EXEC and scripts; overwrite; waiter limits.

use crate::common;
use common::*;
use dlock_testutil::LATENESS_BOUND;
use std::io::Write;
use std::time::{Duration, Instant};

fn wait_args<'a>(key: &'a str, owner: &'a str, lease: &'a str, timeout: &'a str) -> Vec<&'a str> {
    vec!["DLOCK.ACQUIRE", key, owner, lease, "WAIT", timeout]
}

#[test]
fn fifo_order_with_five_waiters_and_handoff_on_release() {
    let srv = Server::start();
    let mut c = srv.connection();
    let before = info_dlock(&mut c);
    assert_eq!(acquire(&mut c, "k", "holder", 60_000), Reply::Int(1));
    let names: Vec<String> = (0..5).map(|i| format!("w{i}")).collect();
    let mut ws = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let lease = format!("{}", 7_000 + i as u64 * 1_000);
        let p = enqueue(
            &srv,
            &mut c,
            "k",
            &wait_args("k", n, &lease, "30000"),
            i as i64 + 1,
        );
        ws.push(p);
    }
    assert_eq!(
        info_dlock(&mut c)["dlock_waiters"],
        5,
        "INFO dlock waiters now"
    );
    for p in &ws {
        assert!(
            p.try_reply().is_none(),
            "nobody answered while the lock is held"
        );
    }
    let mut prev = "holder".to_string();
    for (i, p) in ws.iter().enumerate() {
        assert_eq!(
            release(&mut c, "k", &prev),
            Reply::Int(1),
            "release by {prev}"
        );
        let (r, _) = p.wait(5 * SEC);
        assert_eq!(r, Reply::Int(1), "waiter w{i}'s reply is its hold count");
        assert_eq!(
            hgetall(&mut c, "k"),
            map(&[(&names[i], "1")]),
            "w{i} holds the lock after the hand-off"
        );
        let lease = 7_000 + i as i64 * 1_000;
        assert_pttl_about(&mut c, "k", lease);
        assert_eq!(waiters(&mut c, "k"), 4 - i as i64);
        for (j, q) in ws.iter().enumerate().skip(i + 1) {
            assert!(
                q.try_reply().is_none(),
                "w{j} answered before its turn (w{i} was granted)"
            );
        }
        prev = names[i].clone();
    }
    assert_eq!(release(&mut c, "k", "w4"), Reply::Int(1));
    assert!(!exists(&mut c, "k"));
    let after = info_dlock(&mut c);
    assert!(after["dlock_handoffs"] - before["dlock_handoffs"] >= 5);
    assert_eq!(after["dlock_waiters"], 0);
}

#[test]
fn handoff_with_fence_returns_token() {
    let srv = Server::start();
    let mut c = srv.connection();
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "k", "h", "60000", "FENCE"]);
    assert_eq!(r, Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]));
    let p = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "60000", "WAIT", "10000", "FENCE"],
        1,
    );
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(1));
    assert_eq!(
        p.reply(),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(2)]),
        "hand-off is a fresh grant"
    );
    assert_eq!(get_int(&mut c, &slot_fence_key("k")), Some(2));
}

#[test]
fn handoff_on_lease_expiry_is_punctual() {
    let srv = Server::start();
    let mut c = srv.connection();
    let lease = 300u64;
    let t0 = Instant::now();
    assert_eq!(acquire(&mut c, "k", "h", lease), Reply::Int(1));
    let t1 = Instant::now();
    let p = enqueue(&srv, &mut c, "k", &wait_args("k", "w", "5000", "10000"), 1);
    let (r, _, at) = p.wait_at(5 * SEC);
    assert_eq!(r, Reply::Int(1), "waiter granted on expiry");
    let since_t0 = at.duration_since(t0);
    let since_t1 = at.duration_since(t1);
    assert!(
        since_t0 >= ms(lease - 5),
        "granted before the lease ran out: {since_t0:?}"
    );
    // Granted within milliseconds of the deadline on an idle machine (the figure is printed).
    assert!(
        since_t1 <= ms(lease) + LATENESS_BOUND,
        "took {since_t1:?} after ACQUIRE for a {lease} ms lease"
    );
    println!("lease expiry: granted {since_t1:?} after the ACQUIRE of a {lease} ms lease");
    assert_eq!(hgetall(&mut c, "k"), map(&[("w", "1")]));
    assert_pttl_about(&mut c, "k", 5_000); // the waiter's lease starts at its grant
    assert_eq!(
        release(&mut c, "k", "h"),
        Reply::Nil,
        "the expired holder cannot release the new grant"
    );
    assert_eq!(hgetall(&mut c, "k"), map(&[("w", "1")]));
}

/// Hold `k`, queue a waiter, run `action`, expect the waiter to be granted.
fn handoff_after(action: &[&str], check_renamed: Option<&str>) {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    redis::cmd("SET")
        .arg("other")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap();
    let p = enqueue(&srv, &mut c, "k", &wait_args("k", "w", "20000", "10000"), 1);
    let r = cmd(&mut c, action);
    assert!(!r.is_err(), "{action:?} -> {r:?}");
    let (r, _) = p.wait(5 * SEC);
    assert_eq!(r, Reply::Int(1), "waiter granted after {action:?}");
    assert_eq!(hgetall(&mut c, "k"), map(&[("w", "1")]), "after {action:?}");
    assert_pttl_about(&mut c, "k", 20_000);
    assert_eq!(waiters(&mut c, "k"), 0);
    if let Some(dst) = check_renamed {
        assert_eq!(
            hgetall(&mut c, dst),
            map(&[("h", "1")]),
            "RENAME destination untouched"
        );
    }
}

#[test]
fn handoff_on_del() {
    handoff_after(&["DEL", "k"], None);
}

#[test]
fn handoff_on_unlink() {
    handoff_after(&["UNLINK", "k"], None);
}

#[test]
fn handoff_on_rename_away() {
    handoff_after(&["RENAME", "k", "k-moved"], Some("k-moved"));
}

#[test]
fn handoff_on_flushdb() {
    handoff_after(&["FLUSHDB"], None);
}

#[test]
fn handoff_on_flushall() {
    handoff_after(&["FLUSHALL"], None);
}

#[test]
fn wait_timeout_answers_nil_on_time() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    for _ in 0..3 {
        let p = spawn_cmd(&srv, &wait_args("k", "w", "1000", "200"));
        let (r, took) = p.wait(5 * SEC);
        assert_eq!(r, Reply::Nil, "WAIT time-out answers null");
        assert!(
            took >= ms(190) && took <= ms(200) + LATENESS_BOUND,
            "WAIT 200 answered after {took:?}"
        );
    }
    assert_eq!(hgetall(&mut c, "k"), map(&[("h", "1")]));
    assert_eq!(waiters(&mut c, "k"), 0);
}

#[test]
fn timed_out_head_waiter_is_skipped() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    let a = enqueue(&srv, &mut c, "k", &wait_args("k", "a", "10000", "150"), 1);
    let b = enqueue(&srv, &mut c, "k", &wait_args("k", "b", "10000", "20000"), 2);
    assert_eq!(a.reply(), Reply::Nil);
    wait_waiters(&mut c, "k", 1);
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(1));
    assert_eq!(b.reply(), Reply::Int(1));
    assert_eq!(hgetall(&mut c, "k"), map(&[("b", "1")]));
}

#[test]
fn wait_zero_waits_until_released() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    let p = enqueue(&srv, &mut c, "k", &wait_args("k", "w", "10000", "0"), 1);
    p.assert_blocked(ms(700));
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(1));
    assert_eq!(p.reply(), Reply::Int(1));
}

#[test]
fn non_waiting_acquire_respects_the_queue() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    let p = enqueue(&srv, &mut c, "k", &wait_args("k", "w", "10000", "10000"), 1);
    assert_eq!(acquire(&mut c, "k", "x", 1000), Reply::Nil);
    assert_eq!(
        acquire(&mut c, "k", "h", 60_000),
        Reply::Int(2),
        "the holder's reentrant acquire succeeds with a queue"
    );
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(0));
    // DEL then, in the same read of the same connection, another owner's ACQUIRE: the lock
    // is free but the waiter has not been served yet; the queue must win.
    let (del, acq): (Value, Value) = redis::pipe()
        .cmd("DEL")
        .arg("k")
        .cmd("DLOCK.ACQUIRE")
        .arg("k")
        .arg("x")
        .arg("1000")
        .query(&mut c)
        .unwrap();
    assert_eq!(to_reply(del), Reply::Int(1));
    assert_eq!(
        to_reply(acq),
        Reply::Nil,
        "a non-waiting ACQUIRE must not jump the queue"
    );
    assert_eq!(p.reply(), Reply::Int(1));
    assert_eq!(hgetall(&mut c, "k"), map(&[("w", "1")]));
}

/// Waiter "gone" on key `k`, on a raw socket the test simply closes (drops).
fn gone_waiter(srv: &Server) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
    let words: [&[u8]; 6] = [b"DLOCK.ACQUIRE", b"k", b"gone", b"10000", b"WAIT", b"0"];
    s.write_all(&resp_encode(&words)).unwrap();
    s
}

#[test]
fn disconnected_waiter_leaves_the_queue() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    // waiter "gone" on a raw socket that we simply close
    let s = gone_waiter(&srv);
    wait_waiters(&mut c, "k", 1);
    let b = enqueue(&srv, &mut c, "k", &wait_args("k", "b", "10000", "10000"), 2);
    drop(s);
    wait_waiters(&mut c, "k", 1);
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(1));
    assert_eq!(b.reply(), Reply::Int(1), "the next waiter gets the lock");
    assert_eq!(hgetall(&mut c, "k"), map(&[("b", "1")]));

    // the only waiter disconnects: nobody is granted on release
    let s = gone_waiter(&srv);
    wait_waiters(&mut c, "k", 1);
    drop(s);
    wait_waiters(&mut c, "k", 0);
    assert_eq!(release(&mut c, "k", "b"), Reply::Int(1));
    assert!(!exists(&mut c, "k"), "nothing granted to a gone waiter");
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], 0);
}

#[test]
fn client_unblock_of_a_waiter() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    for how in ["TIMEOUT", "ERROR"] {
        let p = enqueue(&srv, &mut c, "k", &wait_args("k", "w", "10000", "0"), 1);
        let r = cmd(
            &mut c,
            &["CLIENT", "UNBLOCK", &p.client_id.to_string(), how],
        );
        assert_eq!(
            r,
            Reply::Int(1),
            "CLIENT UNBLOCK {how} finds the waiter blocked"
        );
        let r = p.reply();
        assert!(
            r.is_nil() || r.is_err(),
            "unblocked waiter ({how}) gets null or an error, got {r:?}"
        );
        wait_waiters(&mut c, "k", 0);
    }
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(1));
    assert!(
        !exists(&mut c, "k"),
        "nothing granted to an unblocked waiter"
    );
}

#[test]
fn wait_does_not_block_inside_multi() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    let t = Instant::now();
    let v: Value = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("k")
        .arg("x")
        .arg("1000")
        .arg("WAIT")
        .arg("0")
        .cmd("DLOCK.ACQUIRE")
        .arg("free")
        .arg("x")
        .arg("1000")
        .arg("WAIT")
        .arg("0")
        .query(&mut c)
        .unwrap();
    assert!(
        t.elapsed() < 2 * SEC,
        "MULTI/EXEC blocked {:?}",
        t.elapsed()
    );
    assert_eq!(
        to_reply(v),
        Reply::Arr(vec![Reply::Nil, Reply::Int(1)]),
        "inside MULTI WAIT behaves as if absent"
    );
    assert_eq!(waiters(&mut c, "k"), 0);
    assert_eq!(hgetall(&mut c, "free"), map(&[("x", "1")]));
}

#[test]
fn wait_does_not_block_inside_eval() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    let script = "return redis.call('DLOCK.ACQUIRE', KEYS[1], ARGV[1], '1000', 'WAIT', '0')";
    let t = Instant::now();
    let r = cmd(&mut c, &["EVAL", script, "1", "k", "x"]);
    assert!(t.elapsed() < 2 * SEC, "EVAL blocked {:?}", t.elapsed());
    assert_eq!(r, Reply::Nil, "held: null at once");
    let r = cmd(&mut c, &["EVAL", script, "1", "free", "x"]);
    assert_eq!(r, Reply::Int(1), "free: granted");
    assert_eq!(waiters(&mut c, "k"), 0);
    ping(&mut c);
}

#[test]
fn overwriting_the_key_gives_waiters_wrongtype() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    let a = enqueue(&srv, &mut c, "k", &wait_args("k", "a", "10000", "0"), 1);
    let b = enqueue(&srv, &mut c, "k", &wait_args("k", "b", "10000", "0"), 2);
    let r = cmd(&mut c, &["SET", "k", "user-value"]);
    assert_eq!(r, Reply::Status("OK".into()));
    for (n, p) in [("a", &a), ("b", &b)] {
        let r = p.reply();
        assert_eq!(
            r,
            Reply::Err(WRONGTYPE.into()),
            "waiter {n} after the key became a string"
        );
    }
    let v: String = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v, "user-value", "the user's value is never touched");
    assert_eq!(pttl(&mut c, "k"), -1);
    wait_for(5 * SEC, "dlock_waiters to be 0", || {
        (info_dlock(&mut c)["dlock_waiters"] == 0).then_some(())
    });
    // and nothing happens later to the string
    assert_eq!(release(&mut c, "k", "h"), Reply::Err(WRONGTYPE.into()));
    let v: String = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v, "user-value");
}

#[test]
fn waiter_limits_per_key_and_total() {
    let srv = Server::builder()
        .module_args(["max-waiters-per-key", "2", "max-waiters", "3"])
        .start();
    let mut c = srv.connection();
    for k in ["a", "b", "c"] {
        assert_eq!(acquire(&mut c, k, "h", 60_000), Reply::Int(1));
    }
    let _a1 = enqueue(&srv, &mut c, "a", &wait_args("a", "w1", "1000", "0"), 1);
    let _a2 = enqueue(&srv, &mut c, "a", &wait_args("a", "w2", "1000", "0"), 2);
    let t = Instant::now();
    let r = cmd(&mut c, &wait_args("a", "w3", "1000", "0"));
    assert!(t.elapsed() < SEC, "limit error must come at once");
    assert_eq!(
        r,
        Reply::Err("ERR too many waiters on this key (max-waiters-per-key 2)".into())
    );
    assert_eq!(waiters(&mut c, "a"), 2, "nothing changes");
    assert_eq!(hgetall(&mut c, "a"), map(&[("h", "1")]));
    assert_eq!(
        acquire(&mut c, "a", "w3", 1000),
        Reply::Nil,
        "non-waiting acquire is no waiter"
    );
    assert_eq!(
        cmd(&mut c, &wait_args("a", "h", "60000", "0")),
        Reply::Int(2),
        "holder's reentrant WAIT acquire does not queue"
    );

    let _b1 = enqueue(&srv, &mut c, "b", &wait_args("b", "w1", "1000", "0"), 1);
    let r = cmd(&mut c, &wait_args("c", "w1", "1000", "0"));
    assert_eq!(r, Reply::Err("ERR too many waiters (max-waiters 3)".into()));
    assert_eq!(waiters(&mut c, "c"), 0);
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], 3);
    ping(&mut c);
}

/// Runs `action` (a change of the waited key) and returns the reply of waiter `p` and how
/// long after the action it arrived: only the module noticing the change can answer it this
/// early (the lease and the WAIT are far longer).
fn answer_after(c: &mut redis::Connection, p: &Pending, action: &[&str]) -> (Reply, Duration) {
    let t = Instant::now();
    let r = cmd(c, action);
    assert!(!r.is_err(), "{action:?} -> {r:?}");
    let (r, _, at) = p.wait_at(10 * SEC);
    (r, at.saturating_duration_since(t))
}

/// The module re-examines waited keys every few ms; 500 ms leaves room for a loaded machine
/// while staying far from the 20 s lease.
const PROMPT: Duration = Duration::from_millis(500);

#[test]
fn del_and_overwrite_of_a_waited_key_are_seen_promptly() {
    let srv = Server::start();
    let mut c = srv.connection();
    for (k, action, want) in [
        ("a", vec!["DEL", "a"], Reply::Int(1)),
        (
            "b",
            vec!["SET", "b", "user-value"],
            Reply::Err(WRONGTYPE.into()),
        ),
        ("c", vec!["RENAME", "c", "c-moved"], Reply::Int(1)),
    ] {
        assert_eq!(acquire(&mut c, k, "h", 60_000), Reply::Int(1));
        let p = enqueue(&srv, &mut c, k, &wait_args(k, "w", "20000", "30000"), 1);
        let (r, after) = answer_after(&mut c, &p, &action);
        assert_eq!(r, want, "waiter after {action:?}");
        assert!(after < PROMPT, "{action:?} seen after {after:?}");
    }
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], 0);
    assert!(
        !srv.log().contains("listening to every keyspace event"),
        "a few waited keys are polled"
    );
}

/// More keys with queues than one poll tick looks at (32): DEL/UNLINK of a waited key still
/// wake its waiters at once (events), an overwrite by another type within the poll's bound
/// (100 ms × ⌈71 / 32⌉ = 300 ms, docs/COMMANDS.md).
#[test]
fn wakeups_with_more_queued_keys_than_are_polled() {
    const KEYS: usize = 70;
    let srv = Server::start();
    let mut c = srv.connection();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("many:{i}")).collect();
    let mut waiting = vec![];
    for k in &keys {
        assert_eq!(acquire(&mut c, k, "h", 60_000), Reply::Int(1));
        waiting.push(spawn_cmd(&srv, &wait_args(k, "w", "20000", "30000")));
    }
    wait_for(10 * SEC, "a waiter on every key", || {
        (info_dlock(&mut c)["dlock_waiters"] == KEYS as i64).then_some(())
    });
    // A key queued after the others, and some of the first ones (more keys than one poll
    // tick looks at: an overwrite is found within a few ticks).
    assert_eq!(acquire(&mut c, "late", "h", 60_000), Reply::Int(1));
    let late = enqueue(
        &srv,
        &mut c,
        "late",
        &wait_args("late", "w", "20000", "30000"),
        1,
    );
    for (p, action, want) in [
        (&late, vec!["DEL", "late"], Reply::Int(1)),
        (&waiting[0], vec!["DEL", "many:0"], Reply::Int(1)),
        (
            &waiting[1],
            vec!["SET", "many:1", "v"],
            Reply::Err(WRONGTYPE.into()),
        ),
        (&waiting[2], vec!["UNLINK", "many:2"], Reply::Int(1)),
    ] {
        let (r, after) = answer_after(&mut c, p, &action);
        assert_eq!(r, want, "waiter after {action:?}");
        // The overwrite waits for the poll's three ticks, the others for an event.
        let bound = if action[0] == "SET" {
            PROMPT + Duration::from_millis(300)
        } else {
            PROMPT
        };
        assert!(after < bound, "{action:?} seen after {after:?}");
    }
    // The others still wait.
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], KEYS as i64 - 3);
    waiting[3].assert_blocked(Duration::from_millis(100));
}

/// The poll runs in Redis's cron tick (`hz` times a second, 10 by default); where the cron is
/// slower (`hz` below 10, at start or set while clients wait) a timer polls in between, and
/// where it is faster the poll still runs every 100 ms: an overwrite by another type is seen
/// within the same bound at any `hz`. At `hz 1` the cron alone would see it up to 1 s late.
#[test]
fn an_overwrite_is_seen_on_time_whatever_the_cron_pace() {
    let srv = Server::builder().args(["--hz", "1"]).start();
    let mut c = srv.connection();
    // A waiter for the whole test: the set of waited keys never empties, so each `hz` below
    // is taken up while clients wait.
    assert_eq!(acquire(&mut c, "anchor", "h", 60_000), Reply::Int(1));
    let _anchor = enqueue(
        &srv,
        &mut c,
        "anchor",
        &wait_args("anchor", "w", "60000", "0"),
        1,
    );
    for (round, hz) in ["1", "100", "1"].into_iter().enumerate() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("hz")
            .arg(hz)
            .query(&mut c)
            .unwrap();
        for i in 0..4 {
            let k = format!("hz:{round}:{i}");
            assert_eq!(acquire(&mut c, &k, "h", 60_000), Reply::Int(1));
            let p = enqueue(&srv, &mut c, &k, &wait_args(&k, "w", "20000", "30000"), 1);
            let (r, after) = answer_after(&mut c, &p, &["SET", &k, "v"]);
            assert_eq!(r, Reply::Err(WRONGTYPE.into()), "hz {hz}, {k}");
            assert!(
                after < PROMPT,
                "hz {hz}: overwrite of {k} seen after {after:?}"
            );
        }
    }
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], 1);
}
