//! Key declaration: ACL key patterns, COMMAND GETKEYS, cluster routing (MOVED), and the
//! internal fence key / unlock PUBLISH not being checked against the caller's ACL.

use crate::common;
use common::*;
use dlock_testutil::Cluster;

fn as_app(srv: &Server) -> Connection {
    let mut c = srv.connection();
    assert_eq!(
        cmd(&mut c, &["AUTH", "app", "any"]),
        Reply::Status("OK".into())
    );
    c
}

#[test]
fn acl_key_patterns_apply_to_every_command() {
    let srv = Server::start();
    let mut admin = srv.connection();
    let r = cmd(
        &mut admin,
        &["ACL", "SETUSER", "app", "on", "nopass", "~app:*", "+@all"],
    );
    assert_eq!(r, Reply::Status("OK".into()));
    assert_eq!(acquire(&mut admin, "other:x", "o", 60_000), Reply::Int(1));
    let mut app = as_app(&srv);
    // a subscriber (default user) sees the module's own PUBLISH on app's release
    let chan = channel("app:x");
    let mut sub = subscriber(&srv, &chan);

    let got = cmd(&mut app, &["DLOCK.ACQUIRE", "app:x", "o", "60000", "FENCE"]);
    assert_eq!(
        got,
        Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]),
        "fence key is internal: no NOPERM"
    );
    assert_eq!(renew(&mut app, "app:x", "o", 60_000), Reply::Int(1));
    assert!(matches!(
        cmd(&mut app, &["DLOCK.INFO", "app:x"]),
        Reply::Arr(_)
    ));
    assert_eq!(release(&mut app, "app:x", "o"), Reply::Int(1));
    let msg = sub.get_message().expect("unlock message");
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    assert_eq!(
        rwlock(&mut app, "app:rw", "o", "READ", 60_000),
        Reply::Int(1)
    );

    let before = dump(&mut admin, "other:x");
    for args in [
        vec!["DLOCK.ACQUIRE", "other:x", "o", "1000"],
        vec![
            "DLOCK.ACQUIRE",
            "other:y",
            "o",
            "1000",
            "WAIT",
            "10",
            "FENCE",
        ],
        vec!["DLOCK.RELEASE", "other:x", "o"],
        vec!["DLOCK.RENEW", "other:x", "o", "1000"],
        vec!["DLOCK.RWLOCK", "other:x", "o", "WRITE", "1000"],
        vec!["DLOCK.INFO", "other:x"],
    ] {
        assert_err(&cmd(&mut app, &args), "NOPERM");
    }
    assert_eq!(dump(&mut admin, "other:x"), before, "nothing changed");
    assert!(!exists(&mut admin, "other:y"));
    assert_eq!(hgetall(&mut admin, "other:x"), map(&[("o", "1")]));
}

#[test]
fn command_getkeys_lists_only_the_lock_key() {
    let srv = Server::start();
    let mut c = srv.connection();
    for v in [
        vec!["DLOCK.ACQUIRE", "k", "o", "100"],
        vec!["DLOCK.ACQUIRE", "k", "o", "100", "WAIT", "10", "FENCE"],
        vec!["DLOCK.RELEASE", "k", "o"],
        vec!["DLOCK.RELEASE", "k", "o", "READ"],
        vec!["DLOCK.RENEW", "k", "o", "100"],
        vec!["DLOCK.RWLOCK", "k", "o", "WRITE", "100", "FENCE"],
        vec!["DLOCK.INFO", "k"],
    ] {
        let mut args = vec!["COMMAND", "GETKEYS"];
        args.extend_from_slice(&v);
        let r = cmd(&mut c, &args);
        assert_eq!(r, Reply::Arr(vec![Reply::Bulk("k".into())]), "{v:?}");
    }
    // and the commands are known with write / read-only flags
    let info = cmd(&mut c, &["COMMAND", "INFO", "dlock.acquire", "dlock.info"]);
    let a = info.arr();
    assert_eq!(a.len(), 2, "{info:?}");
    let flags = |e: &Reply| -> Vec<String> { e.arr()[2].arr().iter().map(|f| f.str()).collect() };
    assert!(
        flags(&a[0]).contains(&"write".to_string()),
        "ACQUIRE is a write command: {:?}",
        flags(&a[0])
    );
    assert!(
        !flags(&a[1]).contains(&"write".to_string()),
        "INFO only reads: {:?}",
        flags(&a[1])
    );
}

#[test]
fn cluster_routing_moved_and_fence_in_slot() {
    // Node 0 serves slots 0-8191, node 1 slots 8192-16383.
    let cl = Cluster::start(2);
    let (a, b) = (&cl.nodes[0], &cl.nodes[1]);
    let mut ca = a.connection();
    let mut cb = b.connection();
    assert_eq!(cl.slot_owner(8191), 0);
    assert_eq!(cl.slot_owner(8192), 1);
    // a key served by b, asked on a
    let key = (0..)
        .map(|i| format!("lock{i}"))
        .find(|k| key_slot(k.as_bytes()) >= 8192)
        .unwrap();
    let slot = key_slot(key.as_bytes());
    let r: Vec<i64> = vec![redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query(&mut ca)
        .unwrap()];
    assert_eq!(r[0], slot as i64, "test's slot function agrees with Redis");
    for args in [
        vec!["DLOCK.ACQUIRE", key.as_str(), "o", "1000"],
        vec!["DLOCK.RELEASE", key.as_str(), "o"],
        vec!["DLOCK.RENEW", key.as_str(), "o", "1000"],
        vec!["DLOCK.RWLOCK", key.as_str(), "o", "READ", "1000"],
        vec!["DLOCK.INFO", key.as_str()],
    ] {
        let r = cmd(&mut ca, &args);
        assert_eq!(
            r,
            Reply::Err(format!("MOVED {slot} 127.0.0.1:{}", b.port())),
            "{args:?}"
        );
    }
    // on its own node, with FENCE: the counter lives in the same slot, one for the slot
    let mut tokens = std::collections::BTreeMap::new();
    for k in [key.clone(), format!("{{{key}}}:x"), format!("{key}{{")] {
        let node = if key_slot(k.as_bytes()) >= 8192 {
            &mut cb
        } else {
            &mut ca
        };
        let fk = slot_fence_key(&k);
        let next = *tokens
            .entry(fk.clone())
            .and_modify(|t| *t += 1)
            .or_insert(1);
        let r = cmd(node, &["DLOCK.ACQUIRE", &k, "o", "10000", "FENCE"]);
        assert_eq!(r, Reply::Arr(vec![Reply::Int(1), Reply::Int(next)]), "{k}");
        let n: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&fk)
            .query(node)
            .unwrap();
        let m: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&k)
            .query(node)
            .unwrap();
        assert_eq!(n, m, "fence key {fk} in the slot of {k}");
        assert_eq!(get_int(node, &fk), Some(next), "fence key {fk} present");
    }
}

/// `ASKING` then one command on the same connection (as a client following `ASK` does).
fn asking(c: &mut Connection, args: &[&str]) -> Reply {
    assert_eq!(cmd(c, &["ASKING"]), Reply::Status("OK".into()));
    cmd(c, args)
}

#[test]
fn fencing_tokens_never_go_back_during_a_slot_migration() {
    let cl = Cluster::start(2);
    let key = "{fenced}";
    let held = "{fenced}:held";
    let slot = key_slot(key.as_bytes());
    let from = cl.slot_owner(slot);
    let to = 1 - from;
    let mut src = cl.nodes[from].connection();
    let mut dst = cl.nodes[to].connection();
    let acquire_fenced = |c: &mut Connection, k: &str, owner: &str| {
        cmd(c, &["DLOCK.ACQUIRE", k, owner, "100000", "FENCE"])
    };
    let pair = |count: i64, token: i64| Reply::Arr(vec![Reply::Int(count), Reply::Int(token)]);

    // Tokens 1 and 2 on the source; the lock is free again, the slot's counter stays at 2.
    for (owner, token) in [("a", 1), ("b", 2)] {
        assert_eq!(acquire_fenced(&mut src, key, owner), pair(1, token));
        assert_eq!(release(&mut src, key, owner), Reply::Int(1));
    }
    // `held` (same slot) is held on the source without a token yet.
    assert_eq!(acquire(&mut src, held, "h", 100_000), Reply::Int(1));

    cl.begin_slot_migration(slot, from, to);
    // The free lock is not on the source any more: ASK to the target, which has no
    // counter yet. A new counter there would hand out token 1 again.
    let r = acquire_fenced(&mut src, key, "c");
    assert!(
        matches!(&r, Reply::Err(e) if e.starts_with("ASK ")),
        "{r:?}"
    );
    let r = asking(&mut dst, &["DLOCK.ACQUIRE", key, "c", "100000", "FENCE"]);
    assert!(
        matches!(&r, Reply::Err(e) if e.starts_with("TRYAGAIN ")),
        "{r:?}"
    );
    assert_eq!(
        cl.holder(&slot_fence_key(key)),
        Some(from),
        "the counter stayed on the source"
    );

    // The slot's counter moves first: `held`'s holder, still on the source, must not start a
    // new one when it asks for its first token.
    cl.migrate_keys(from, to, &[&slot_fence_key(held)]);
    let r = acquire_fenced(&mut src, held, "h");
    assert!(
        matches!(&r, Reply::Err(e) if e.starts_with("TRYAGAIN ")),
        "{r:?}"
    );

    // Once the counter is on the target, the target goes on from it.
    assert_eq!(
        asking(&mut dst, &["DLOCK.ACQUIRE", key, "c", "100000", "FENCE"]),
        pair(1, 3)
    );
    cl.finish_slot_migration(slot, from, to);
    assert_eq!(release(&mut dst, key, "c"), Reply::Int(1));
    assert_eq!(acquire_fenced(&mut dst, key, "d"), pair(1, 4));
    assert_eq!(
        acquire_fenced(&mut dst, held, "h"),
        pair(2, 5),
        "reentrant: its first token, above every earlier one of the slot"
    );
    assert_eq!(
        acquire_fenced(&mut dst, held, "h"),
        pair(3, 5),
        "reentrant: current token"
    );
}
