//! The module propagates nothing while Redis would drop it (no AOF, no replication: see
//! `src/ffi/targets.rs`). These tests take locks while nothing listens, then make something
//! listen (a replica attaching, a replica reconnecting, the AOF switched on, a replica
//! promoted) and check that every later write reaches it. The last ones check the shape of
//! what the hot path propagates: one plain command per acquire and per release.

use crate::common;
use common::*;
use dlock_testutil::{assert_mirrored, info_section, wait_replica_synced, ReplicaSet};

#[test]
fn replica_attached_later_gets_every_later_write() {
    let master = Server::start();
    let mut m = master.connection();
    // Nothing listens yet: these are not propagated, the replica gets them in its snapshot.
    assert_eq!(acquire(&mut m, "a", "o1", 30_000), Reply::Int(1));
    assert_eq!(acquire(&mut m, "gone", "o1", 30_000), Reply::Int(1));
    assert_eq!(release(&mut m, "gone", "o1"), Reply::Int(1));

    let replica = Server::builder()
        .without_module()
        .replica_of(&master)
        .start();
    let mut r = replica.connection();
    assert_mirrored(&mut m, &mut r, &["a", "gone"]);

    assert_eq!(acquire(&mut m, "b", "o2", 40_000), Reply::Int(1));
    assert_eq!(renew(&mut m, "a", "o1", 50_000), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["a", "b"]);
    assert!(
        pttl(&mut r, "a") > 48_000,
        "the renewal reached the replica"
    );
    assert_eq!(release(&mut m, "a", "o1"), Reply::Int(1));
    assert_mirrored(&mut m, &mut r, &["a", "b"]);

    // The link breaks; the replica comes back with a partial resync from the backlog, which
    // must hold what was written meanwhile (no replica connected then).
    let _: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "replica"])
        .query(&mut m)
        .unwrap();
    assert_eq!(acquire(&mut m, "c", "o3", 30_000), Reply::Int(1));
    assert_eq!(release(&mut m, "b", "o2"), Reply::Int(1));
    wait_replica_synced(&replica, master.port());
    assert_mirrored(&mut m, &mut r, &["b", "c"]);
    assert_eq!(hgetall(&mut r, "c"), map(&[("o3", "1")]));
    assert!(
        info_section(&mut m, "stats")["sync_partial_ok"] >= 1,
        "the replica resumed with a partial resync"
    );
}

#[test]
fn aof_switched_on_at_run_time_records_later_writes() {
    let srv = Server::builder()
        .args(["--enable-debug-command", "yes"])
        .start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "a", "o1", 30_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "b", "o1", 30_000), Reply::Int(1));

    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "appendonly", "yes"])
        .query(&mut c)
        .unwrap();
    wait_for(ms(20_000), "the AOF rewrite done", || {
        let p = info_section(&mut c, "persistence");
        (p["aof_enabled"] == 1
            && p["aof_rewrite_in_progress"] == 0
            && p["aof_rewrite_scheduled"] == 0)
            .then_some(())
    });

    assert_eq!(acquire(&mut c, "c", "o2", 40_000), Reply::Int(1));
    assert_eq!(release(&mut c, "a", "o1"), Reply::Int(1));
    assert_eq!(acquire(&mut c, "b", "o1", 30_000), Reply::Int(2));

    // Replace the data set with what the AOF holds.
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut c).unwrap();
    assert!(!exists(&mut c, "a"), "the release is in the AOF");
    assert_eq!(hgetall(&mut c, "b"), map(&[("o1", "2")]));
    assert_eq!(hgetall(&mut c, "c"), map(&[("o2", "1")]));
    assert!(pttl(&mut c, "c") > 38_000, "the lease is in the AOF");
}

#[test]
fn promoted_replica_keeps_its_backlog_for_the_old_master() {
    // No pings from the old master: its stream must stop where the new one's ends.
    let old = Server::builder()
        .args(["--repl-ping-replica-period", "3600"])
        .start();
    let new = Server::builder().replica_of(&old).start();
    let mut o = old.connection();
    let mut n = new.connection();
    // The replica has all of the old master's stream (WAIT's GETACK included), so that the
    // old master can resume from the new one's backlog.
    wait_for(ms(20_000), "the replica at the master's offset", || {
        let at = info_section(&mut o, "replication")["master_repl_offset"];
        (info_section(&mut n, "replication")["slave_repl_offset"] == at).then_some(())
    });
    let _: () = redis::cmd("REPLICAOF")
        .arg(&["NO", "ONE"])
        .query(&mut n)
        .unwrap();
    // No replica is connected, but the backlog a partial resync will read must hold this.
    assert_eq!(acquire(&mut n, "x", "o1", 30_000), Reply::Int(1));
    assert_eq!(acquire(&mut n, "y", "o1", 30_000), Reply::Int(1));
    assert_eq!(release(&mut n, "y", "o1"), Reply::Int(1));

    let port = new.port().to_string();
    let _: () = redis::cmd("REPLICAOF")
        .arg(&["127.0.0.1", port.as_str()])
        .query(&mut o)
        .unwrap();
    wait_replica_synced(&old, new.port());
    assert_mirrored(&mut n, &mut o, &["x", "y"]);
    assert_eq!(hgetall(&mut o, "x"), map(&[("o1", "1")]));
    assert!(
        info_section(&mut n, "stats")["sync_partial_ok"] >= 1,
        "the old master resumed with a partial resync: {}\n{}",
        new.log(),
        old.log()
    );
}

#[test]
fn unlock_message_reaches_subscribers_of_a_replica_attached_later() {
    let master = Server::start();
    let mut m = master.connection();
    assert_eq!(acquire(&mut m, "k", "o1", 30_000), Reply::Int(1));
    assert_eq!(release(&mut m, "k", "o1"), Reply::Int(1)); // nobody to propagate to yet
    let replica = Server::builder()
        .without_module()
        .replica_of(&master)
        .start();
    let mut sub = subscriber(&replica, &channel("k"));
    assert_eq!(acquire(&mut m, "k", "o1", 30_000), Reply::Int(1));
    assert_eq!(release(&mut m, "k", "o1"), Reply::Int(1));
    let msg = sub
        .get_message()
        .expect("the unlock message on the replica");
    assert_eq!(msg.get_channel_name(), channel("k"));
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    // The PUBLISH comes with the release's DEL, never before it.
    let mut r = replica.connection();
    assert_eq!(
        cmd(&mut r, &["EXISTS", "k"]),
        Reply::Int(0),
        "DEL before PUBLISH"
    );
}

/// A release pipelined with a CLIENT PAUSE (as a failover does): Redis asserts that nothing
/// is propagated while clients are paused, so the release must propagate everything, its
/// PUBLISH included, within its own command. The server stays up and the replica's
/// subscriber gets the message.
#[test]
fn release_pipelined_with_a_client_pause_reaches_replicas() {
    let ReplicaSet {
        primary: master,
        replicas,
    } = ReplicaSet::plain_replicas(1);
    let replica = &replicas[0];
    let mut sub = subscriber(replica, &channel("k"));
    let mut m = master.connection();
    assert_eq!(acquire(&mut m, "k", "o1", 30_000), Reply::Int(1));
    // One pipeline: the pause starts in the same event-loop turn as the release.
    let (released, _): (i64, ()) = redis::pipe()
        .cmd("DLOCK.RELEASE")
        .arg(&["k", "o1"])
        .cmd("CLIENT")
        .arg(&["PAUSE", "300", "WRITE"])
        .query(&mut m)
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!(
        cmd(&mut m, &["PING"]),
        Reply::Status("PONG".into()),
        "{}",
        master.log()
    );
    let msg = sub
        .get_message()
        .expect("the unlock message on the replica");
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    assert_eq!(
        cmd(&mut m, &["PING"]),
        Reply::Status("PONG".into()),
        "{}",
        master.log()
    );
}

/// A holder's own lease lapsing during CLIENT PAUSE (a failover pauses writes too) must not
/// make the module propagate the grant then: Redis 7.0 asserts that nothing is propagated
/// while clients are paused. The waiter is granted once the pause is over.
#[test]
fn a_grant_due_during_a_client_pause_waits_for_its_end() {
    let ReplicaSet {
        primary: master,
        replicas: _replicas,
    } = ReplicaSet::plain_replicas(1);
    let mut m = master.connection();
    // A reader with a short lease of its own, a writer waiting behind it. The lease must
    // outlast queueing the writer and starting the pause (800 ms, for a busy machine).
    assert_eq!(rwlock(&mut m, "k", "r", "READ", 800), Reply::Int(1));
    let w = enqueue(
        &master,
        &mut m,
        "k",
        &["DLOCK.RWLOCK", "k", "w", "WRITE", "30000", "WAIT", "0"],
        1,
    );
    let paused_at = std::time::Instant::now();
    assert_eq!(
        cmd(&mut m, &["CLIENT", "PAUSE", "1000", "WRITE"]),
        Reply::Status("OK".into())
    );
    // The reader's lease ends at ~800 ms, inside the pause: no grant until the pause ends.
    let (r, _, at) = w.wait_at(std::time::Duration::from_secs(10));
    assert_eq!(r, Reply::Int(1), "{}", master.log());
    let after = at.duration_since(paused_at);
    assert!(
        after >= std::time::Duration::from_millis(900),
        "granted {after:?} after the pause began (it lasts 1 s)"
    );
    assert_eq!(
        cmd(&mut m, &["PING"]),
        Reply::Status("PONG".into()),
        "{}",
        master.log()
    );
}

/// The commands of a server's AOF increments (Redis 7+ multi-part AOF), as RESP text.
fn aof_increments(dir: &std::path::Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(dir.join("appendonlydir")).expect("the AOF directory") {
        let path = e.unwrap().path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            text.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    text
}

fn pexpiretime(c: &mut redis::Connection, key: &str) -> i64 {
    cmd(c, &["PEXPIRETIME", key]).int()
}

/// With the AOF on, a first hold goes to the AOF as one command carrying the absolute expiry
/// (no MULTI/EXEC), a release as one DEL and no PUBLISH; a server without the module loading
/// that AOF has the hold with the same expiry to the millisecond.
#[test]
fn aof_gets_one_command_per_acquire_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = Server::builder().dir(dir.path()).aof().start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "held", "o1", 600_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "freed", "o1", 600_000), Reply::Int(1));
    assert_eq!(release(&mut c, "freed", "o1"), Reply::Int(1));
    let at = pexpiretime(&mut c, "held");
    let text = aof_increments(dir.path());
    assert_eq!(
        text.matches("EVAL").count(),
        2,
        "one EVAL per hold:\n{text}"
    );
    assert!(
        text.contains(&at.to_string()),
        "the absolute expiry:\n{text}"
    );
    for absent in ["MULTI", "HSET", "PEXPIREAT", "PUBLISH"] {
        assert!(!text.contains(absent), "no {absent} in the AOF:\n{text}");
    }
    assert!(text.contains("DEL"), "the release's DEL:\n{text}");
    srv.shutdown();

    let plain = Server::builder()
        .without_module()
        .dir(dir.path())
        .aof()
        .start();
    let mut p = plain.connection();
    assert_eq!(hgetall(&mut p, "held"), map(&[("o1", "1")]));
    assert_eq!(pexpiretime(&mut p, "held"), at);
    assert!(!exists(&mut p, "freed"));
}

/// A replica without the module gets a first hold with the master's absolute expiry, and a
/// release its DEL and the unlock message; with the AOF on as well, the message still stays
/// out of the AOF (as Redis's own PUBLISH does). With `rename-command EVAL ""` on the master
/// (a hardened configuration) the same arrives as separate commands instead of one EVAL.
#[test]
fn replica_and_aof_get_hold_release_and_message() {
    for (with_aof, eval_renamed) in [(false, false), (true, false), (false, true)] {
        let dir = tempfile::tempdir().unwrap();
        let aof = if with_aof { "yes" } else { "no" };
        let mut args = vec!["--appendonly", aof, "--appendfsync", "always"];
        if eval_renamed {
            args.extend(["--rename-command", "EVAL", ""]);
        }
        let master = Server::builder().dir(dir.path()).args(args).start();
        let replica = Server::builder()
            .without_module()
            .replica_of(&master)
            .start();
        let mut m = master.connection();
        let mut r = replica.connection();
        let mut sub = subscriber(&replica, &channel("k"));
        let case = format!("AOF {aof}, EVAL renamed {eval_renamed}");
        assert_eq!(acquire(&mut m, "k", "o1", 600_000), Reply::Int(1));
        assert_mirrored(&mut m, &mut r, &["k"]);
        assert_eq!(pexpiretime(&mut r, "k"), pexpiretime(&mut m, "k"), "{case}");
        assert_eq!(release(&mut m, "k", "o1"), Reply::Int(1));
        let msg = sub
            .get_message()
            .expect("the unlock message on the replica");
        assert_eq!(msg.get_payload::<String>().unwrap(), "0");
        assert!(!exists(&mut r, "k"), "DEL before PUBLISH ({case})");
        if with_aof {
            let text = aof_increments(dir.path());
            assert!(text.contains("DEL"), "the release in the AOF:\n{text}");
            assert!(!text.contains("PUBLISH"), "no message in the AOF:\n{text}");
        }
    }
}
