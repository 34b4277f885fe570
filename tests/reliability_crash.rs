//! Reliability (issue #7), promise 2: a lock holder that is `kill -9`ed.
//!
//! The holder is a real child process (this test binary re-executed) that takes the lock with
//! a short lease and renews it like a watchdog; waiters block server-side. After SIGKILL the
//! head waiter must be granted when the lease runs out (within lease + 200 ms of the last
//! renewal the server saw, never before), and the rest keep their FIFO order.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use dlock_testutil::workers::*;
use dlock_testutil::LATENESS_BOUND;

const LEASE: u64 = 500;

fn cmd_s(con: &mut Connection, words: &[String]) -> Reply {
    cmd(con, &words.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Worker: takes `REL_KEY` (`REL_KIND` = exclusive | read | write) for `REL_OWNER` with a
/// `REL_LEASE` ms lease and renews it every lease/4 until killed; with `REL_BIND` set, the
/// grant and the renewals carry `BIND <REL_BIND>`.
#[test]
fn worker_holder() {
    if !is_worker("holder") {
        return;
    }
    let url = param("REL_URL");
    let key = param("REL_KEY");
    let owner = param("REL_OWNER");
    let lease = param("REL_LEASE");
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(&owner)
        .query(&mut con)
        .unwrap();
    let grace = std::env::var("REL_BIND").ok();
    let bind: Vec<&str> = grace.iter().flat_map(|g| ["BIND", g.as_str()]).collect();
    let with_bind = |words: &[&str]| -> Vec<String> {
        words.iter().chain(&bind).map(|w| w.to_string()).collect()
    };
    let r = match param("REL_KIND").as_str() {
        "exclusive" => cmd_s(
            &mut con,
            &with_bind(&["DLOCK.ACQUIRE", &key, &owner, &lease]),
        ),
        "read" => cmd_s(
            &mut con,
            &with_bind(&["DLOCK.RWLOCK", &key, &owner, "READ", &lease]),
        ),
        _ => cmd_s(
            &mut con,
            &with_bind(&["DLOCK.RWLOCK", &key, &owner, "WRITE", &lease]),
        ),
    };
    assert_eq!(r, Reply::Int(1), "holder grant");
    report("granted", unix_ms());
    let every = Duration::from_millis(lease.parse::<u64>().unwrap() / 4);
    loop {
        std::thread::sleep(every); // the watchdog's period, not a synchronisation
        assert_eq!(
            cmd_s(&mut con, &with_bind(&["DLOCK.RENEW", &key, &owner, &lease])),
            Reply::Int(1)
        );
        report("renewed", unix_ms());
    }
}

/// Worker: one blocked waiter (killed by the parent while it waits).
#[test]
fn worker_waiter() {
    if !is_worker("waiter") {
        return;
    }
    let mut con = redis::Client::open(param("REL_URL").as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    report("connected", 1);
    let r = cmd(
        &mut con,
        &[
            "DLOCK.ACQUIRE",
            &param("REL_KEY"),
            &param("REL_OWNER"),
            "30000",
            "WAIT",
            "0",
        ],
    );
    report("reply", format!("{r:?}"));
}

fn spawn_holder(srv: &Server, key: &str, owner: &str, kind: &str) -> Worker {
    let mut w = spawn_worker(
        "worker_holder",
        "holder",
        &[
            ("REL_URL", srv.url()),
            ("REL_KEY", key.into()),
            ("REL_OWNER", owner.into()),
            ("REL_KIND", kind.into()),
            ("REL_LEASE", LEASE.to_string()),
        ],
    );
    w.expect_report("granted", Duration::from_secs(20));
    // Let the watchdog renew twice: the lease now lives on renewals only.
    w.expect_report("renewed", Duration::from_secs(5));
    w.expect_report("renewed", Duration::from_secs(5));
    w
}

/// SIGKILLs the holder, waits until the server has dropped its connection (so no renewal is
/// still in flight), and returns when its lease ends (as an `Instant` of this process).
fn crash(srv: &Server, c: &mut Connection, holder: &mut Worker, key: &str, owner: &str) -> Instant {
    holder.kill9();
    wait_for(
        Duration::from_secs(5),
        "server to drop the holder's connection",
        || {
            let list: String = redis::cmd("CLIENT").arg("LIST").query(c).ok()?;
            (!list.contains(&format!(" name={owner} "))).then_some(())
        },
    );
    let _ = srv;
    // The lease deadline: for an exclusive lock the key's PTTL, for a read-write holder its own
    // remaining lease from DLOCK.INFO.
    // The server read its clock after `t0`, so the lease ends no earlier than `t0 + remaining`:
    // a grant before that is early whatever the round trip took.
    let t0 = Instant::now();
    let holders = dinfo_field(c, key, "holders").arr();
    let mine = holders
        .iter()
        .map(|h| h.arr())
        .find(|h| h[0] == Reply::Bulk(owner.into()))
        .unwrap_or_else(|| {
            panic!("{owner} no longer holds {key} right after the kill: {holders:?}")
        });
    let remaining = mine[3].int();
    assert!(
        remaining > 0 && remaining <= LEASE as i64,
        "remaining lease {remaining}"
    );
    t0 + Duration::from_millis(remaining as u64)
}

/// Signed ms from `deadline` to `at`.
fn after(at: Instant, deadline: Instant) -> f64 {
    if at >= deadline {
        (at - deadline).as_secs_f64() * 1000.0
    } else {
        -((deadline - at).as_secs_f64() * 1000.0)
    }
}

#[track_caller]
fn assert_punctual(what: &str, late: f64) {
    // Never before the lease ends (1 ms rounding, two clocks); late only as a busy machine is.
    assert!(
        late >= -3.0,
        "{what} granted {:.1} ms BEFORE the lease ended",
        -late
    );
    assert!(
        late <= LATENESS_BOUND.as_secs_f64() * 1000.0,
        "{what} granted {late:.1} ms after the lease ended"
    );
}

/// Exclusive lock: holder process killed with 5 waiters queued (one of them a process that is
/// killed too, so it must be skipped): head granted on time, FIFO for the rest.
#[test]
fn holder_kill9_hands_on_to_head_waiter_in_fifo_order() {
    let rounds = scale(3, 20);
    let mut lates = vec![];
    for round in 0..rounds {
        let srv = Server::start();
        let mut c = srv.connection();
        let key = format!("crash:{round}");
        let mut holder = spawn_holder(&srv, &key, "holder", "exclusive");
        let mut waiters = vec![];
        let mut dead_waiter = None;
        for i in 0..5 {
            let owner = format!("w{i}");
            if i == 1 {
                let mut w = spawn_worker(
                    "worker_waiter",
                    "waiter",
                    &[
                        ("REL_URL", srv.url()),
                        ("REL_KEY", key.clone()),
                        ("REL_OWNER", owner.clone()),
                    ],
                );
                w.expect_report("connected", Duration::from_secs(20));
                wait_waiters(&mut c, &key, i + 1);
                dead_waiter = Some(w);
                continue;
            }
            let args = ["DLOCK.ACQUIRE", &key, &owner, "30000", "WAIT", "0"];
            waiters.push((owner.clone(), enqueue(&srv, &mut c, &key, &args, i + 1)));
        }
        // A waiter crashes too: it must leave the queue and never be granted.
        dead_waiter.unwrap().kill9();
        wait_waiters(&mut c, &key, 4);

        let deadline = crash(&srv, &mut c, &mut holder, &key, "holder");
        let (r, _, at) = waiters[0].1.wait_at(Duration::from_secs(5));
        assert_eq!(r, Reply::Int(1), "head waiter w0 granted");
        let late = after(at, deadline);
        assert_punctual("w0", late);
        lates.push(late);
        for (i, (owner, p)) in waiters.iter().enumerate() {
            if i > 0 {
                let (r, _) = p.wait(Duration::from_secs(5));
                assert_eq!(r, Reply::Int(1), "{owner} granted in turn");
            }
            // Nobody behind the current holder has been answered.
            for (o2, p2) in &waiters[i + 1..] {
                assert!(
                    p2.try_reply().is_none(),
                    "{o2} answered before {owner} released"
                );
            }
            let h = hgetall(&mut c, &key);
            assert_eq!(h, map(&[(owner.as_str(), "1")]), "only {owner} holds {key}");
            assert_eq!(release(&mut c, &key, owner), Reply::Int(1));
        }
        assert!(!exists(&mut c, &key));
        assert_eq!(info_dlock(&mut c)["dlock_waiters"], 0);
    }
    let s = stats(&lates);
    println!(
        "kill -9 of an exclusive holder (lease {LEASE} ms), {rounds} rounds: head waiter granted \
         {s} after the lease end (i.e. within lease + {:.1} ms of the last renewal)",
        s.max
    );
}

/// Read-write lock: the writer process is killed while two readers, a writer and a reader
/// wait: the two head readers are granted together on time, then the writer, then the reader.
#[test]
fn writer_kill9_hands_on_to_readers_then_writer() {
    let srv = Server::start();
    let mut c = srv.connection();
    let key = "crash:rw";
    let mut holder = spawn_holder(&srv, key, "writer0", "write");
    let wants = [
        ("r1", "READ"),
        ("r2", "READ"),
        ("w3", "WRITE"),
        ("r4", "READ"),
    ];
    let mut ps = vec![];
    for (i, (owner, mode)) in wants.iter().enumerate() {
        let args = ["DLOCK.RWLOCK", key, owner, mode, "30000", "WAIT", "0"];
        ps.push(enqueue(&srv, &mut c, key, &args, i as i64 + 1));
    }
    let deadline = crash(&srv, &mut c, &mut holder, key, "writer0");
    for p in &ps[..2] {
        let (r, _, at) = p.wait_at(Duration::from_secs(5));
        assert_eq!(r, Reply::Int(1));
        let late = after(at, deadline);
        assert_punctual("head readers", late);
        println!("kill -9 of a writer: reader granted {late:.1} ms after the lease end");
    }
    ps[2].assert_blocked(ms(100));
    assert!(ps[3].try_reply().is_none(), "r4 must stay behind w3");
    assert_eq!(dinfo_field(&mut c, key, "mode"), Reply::Bulk("read".into()));
    assert_eq!(cmd(&mut c, &["DLOCK.RELEASE", key, "r1"]), Reply::Int(1));
    ps[2].assert_blocked(ms(50));
    assert_eq!(cmd(&mut c, &["DLOCK.RELEASE", key, "r2"]), Reply::Int(1));
    assert_eq!(ps[2].reply(), Reply::Int(1), "w3 after both readers");
    assert!(ps[3].try_reply().is_none());
    assert_eq!(cmd(&mut c, &["DLOCK.RELEASE", key, "w3"]), Reply::Int(1));
    assert_eq!(ps[3].reply(), Reply::Int(1), "r4 last");
    assert_eq!(cmd(&mut c, &["DLOCK.RELEASE", key, "r4"]), Reply::Int(1));
    assert!(!exists(&mut c, key));
}

/// A reader process is killed while another reader (long lease) keeps its hold and a writer
/// waits: the dead reader lapses after its own lease, the live one still holds, the writer
/// keeps waiting until the live reader releases.
#[test]
fn reader_kill9_lapses_alone_while_other_reader_holds() {
    let srv = Server::start();
    let mut c = srv.connection();
    let key = "crash:readers";
    let mut holder = spawn_holder(&srv, key, "reader0", "read");
    assert_eq!(rwlock(&mut c, key, "live", "READ", 30_000), Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        key,
        &["DLOCK.RWLOCK", key, "writer", "WRITE", "30000", "WAIT", "0"],
        1,
    );
    let deadline = crash(&srv, &mut c, &mut holder, key, "reader0");
    // After the dead reader's lease: only `live` is listed, the writer still waits.
    let left = deadline.saturating_duration_since(Instant::now());
    w.assert_blocked(left + ms(200));
    let holders = dinfo_field(&mut c, key, "holders").arr();
    assert_eq!(holders.len(), 1, "only the live reader: {holders:?}");
    assert_eq!(holders[0].arr()[0], Reply::Bulk("live".into()));
    let h = hgetall(&mut c, key);
    assert!(
        !h.contains_key("read:reader0"),
        "lapsed reader removed: {h:?}"
    );
    assert!(
        pttl(&mut c, key) > 20_000,
        "key lease follows the live reader"
    );
    assert_eq!(cmd(&mut c, &["DLOCK.RELEASE", key, "live"]), Reply::Int(1));
    assert_eq!(
        w.reply(),
        Reply::Int(1),
        "writer granted once the live reader left"
    );
}

/// The "crash" variant with BIND: holders take the lock with a 2 s lease, renewed by a
/// watchdog, bound with a 100 ms grace. After `kill -9` the next waiter is granted about the
/// grace after the kill instead of the rest of the lease (both measured and printed), and
/// exclusion and fencing still hold: one holder at a time, tokens strictly increasing.
#[test]
fn holder_kill9_with_bind_hands_on_after_the_grace_not_the_lease() {
    const LONG_LEASE: &str = "2000";
    let rounds = scale(2, 10);
    let mut took = [vec![], vec![]]; // without BIND, with BIND
    for round in 0..rounds {
        for (variant, grace) in [None, Some("100")].into_iter().enumerate() {
            let srv = Server::start();
            let mut c = srv.connection();
            let key = format!("crash:bind:{round}:{variant}");
            // A fencing counter from the start: every fresh grant advances it.
            let first = cmd(&mut c, &["DLOCK.ACQUIRE", &key, "init", "1000", "FENCE"]);
            assert_eq!(first, Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]));
            assert_eq!(release(&mut c, &key, "init"), Reply::Int(1));
            let mut env = vec![
                ("REL_URL", srv.url()),
                ("REL_KEY", key.clone()),
                ("REL_OWNER", "holder".to_string()),
                ("REL_KIND", "exclusive".to_string()),
                ("REL_LEASE", LONG_LEASE.to_string()),
            ];
            if let Some(g) = grace {
                env.push(("REL_BIND", g.to_string()));
            }
            let mut holder = spawn_worker("worker_holder", "holder", &env);
            holder.expect_report("granted", Duration::from_secs(20));
            holder.expect_report("renewed", Duration::from_secs(5));
            let mut waiters = vec![];
            for i in 0..3 {
                let owner = format!("w{i}");
                let args = ["DLOCK.ACQUIRE", &key, &owner, "30000", "WAIT", "0", "FENCE"];
                waiters.push((owner.clone(), enqueue(&srv, &mut c, &key, &args, i + 1)));
            }
            let killed = Instant::now();
            holder.kill9();
            // init's grant took 1; the holder's grant, without FENCE, takes no token.
            let mut last_token = 1;
            for (i, (owner, p)) in waiters.iter().enumerate() {
                let (r, _, at) = p.wait_at(Duration::from_secs(10));
                if i == 0 {
                    took[variant].push((at - killed).as_secs_f64() * 1000.0);
                }
                let token = match r.arr().as_slice() {
                    [Reply::Int(1), Reply::Int(t)] => *t,
                    other => panic!("{owner}: {other:?}"),
                };
                assert!(
                    token > last_token,
                    "{owner}'s token {token} after {last_token}"
                );
                last_token = token;
                let token_field = token.to_string();
                assert_eq!(
                    hgetall(&mut c, &key),
                    map(&[(owner.as_str(), "1"), ("", token_field.as_str())]),
                    "only {owner}, with its token"
                );
                for (o2, p2) in &waiters[i + 1..] {
                    assert!(
                        p2.try_reply().is_none(),
                        "{o2} answered before {owner} released"
                    );
                }
                assert_eq!(release(&mut c, &key, owner), Reply::Int(1));
            }
        }
    }
    let (without, with) = (stats(&took[0]), stats(&took[1]));
    println!(
        "kill -9 of a holder (lease {LONG_LEASE} ms, watchdog every lease/4), {rounds} rounds: \
         next grant after the kill without BIND {without}; with BIND 100 {with}"
    );
    let fastest_without = took[0].iter().copied().fold(f64::MAX, f64::min);
    assert!(
        fastest_without >= 1000.0,
        "without BIND the lease bounds it: {without}"
    );
    assert!(with.max < 1000.0, "with BIND the grace bounds it: {with}");
}
