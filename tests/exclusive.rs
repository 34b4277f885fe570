//! Exclusive locks (issue #2): every reply of ACQUIRE / RELEASE / RENEW / INFO, the
//! Redisson hash layout, fencing tokens, DLOCK.INFO in RESP2 and RESP3, `INFO dlock`.

use crate::common;
use common::*;

#[test]
fn acquire_reentrant_release_replies_and_layout() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(
        acquire(&mut c, "k", "o1", 10_000),
        Reply::Int(1),
        "fresh grant"
    );
    assert_eq!(
        hgetall(&mut c, "k"),
        map(&[("o1", "1")]),
        "Redisson layout owner -> count"
    );
    assert_pttl_about(&mut c, "k", 10_000);

    assert_eq!(
        acquire(&mut c, "k", "o1", 20_000),
        Reply::Int(2),
        "reentrant grant"
    );
    assert_eq!(hgetall(&mut c, "k"), map(&[("o1", "2")]));
    assert_pttl_about(&mut c, "k", 20_000);

    assert_eq!(
        acquire(&mut c, "k", "o2", 5_000),
        Reply::Nil,
        "other owner without WAIT"
    );
    assert_eq!(
        hgetall(&mut c, "k"),
        map(&[("o1", "2")]),
        "a refused acquire changes nothing"
    );
    assert_pttl_about(&mut c, "k", 20_000);

    assert_eq!(
        release(&mut c, "k", "o2"),
        Reply::Nil,
        "release by a non-holder"
    );
    assert_eq!(hgetall(&mut c, "k"), map(&[("o1", "2")]));

    assert_eq!(release(&mut c, "k", "o1"), Reply::Int(0), "count 2 -> 1");
    assert_eq!(hgetall(&mut c, "k"), map(&[("o1", "1")]));
    let t = pttl(&mut c, "k");
    assert!(
        t > 15_000 && t <= 20_000,
        "RELEASE with holds left keeps the lease: PTTL {t}"
    );

    assert_eq!(
        release(&mut c, "k", "o1"),
        Reply::Int(1),
        "last hold released"
    );
    assert!(!exists(&mut c, "k"), "key deleted on last release");
    assert_eq!(
        release(&mut c, "k", "o1"),
        Reply::Nil,
        "release after the last one"
    );
    assert_eq!(
        dbsize(&mut c),
        0,
        "nothing left behind (no fence key without FENCE)"
    );

    assert_eq!(
        acquire(&mut c, "k", "o2", 5_000),
        Reply::Int(1),
        "free again for another owner"
    );
}

#[test]
fn release_and_renew_on_missing_key_change_nothing() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(release(&mut c, "nokey", "o"), Reply::Nil);
    assert_eq!(renew(&mut c, "nokey", "o", 1000), Reply::Int(0));
    assert_eq!(dbsize(&mut c), 0, "RELEASE/RENEW must not create keys");
}

#[test]
fn renew_replies_and_lease() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "o1", 2_000), Reply::Int(1));
    assert_eq!(renew(&mut c, "k", "o1", 60_000), Reply::Int(1));
    assert_pttl_about(&mut c, "k", 60_000);
    assert_eq!(
        hgetall(&mut c, "k"),
        map(&[("o1", "1")]),
        "RENEW does not change the count"
    );
    assert_eq!(
        renew(&mut c, "k", "o2", 500_000),
        Reply::Int(0),
        "non-holder"
    );
    assert_pttl_about(&mut c, "k", 60_000);
    assert_eq!(
        renew(&mut c, "k", "o1", 1_000),
        Reply::Int(1),
        "renew may shorten the lease"
    );
    assert_pttl_about(&mut c, "k", 1_000);
}

#[test]
fn lease_expiry_frees_the_lock() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "o1", 150), Reply::Int(1));
    wait_for(5 * SEC, "lease to run out", || {
        (!exists(&mut c, "k")).then_some(())
    });
    assert_eq!(
        release(&mut c, "k", "o1"),
        Reply::Nil,
        "expired holder holds nothing"
    );
    assert_eq!(
        renew(&mut c, "k", "o1", 1000),
        Reply::Int(0),
        "expired holder cannot renew"
    );
    assert_eq!(acquire(&mut c, "k", "o2", 1000), Reply::Int(1));
}

#[test]
fn fencing_tokens_strictly_increase() {
    let srv = Server::start();
    let mut c = srv.connection();
    let fk = slot_fence_key("res");
    assert!(fk.starts_with("dlock:fences:{"), "{fk}");
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "res", "o1", "10000", "FENCE"]);
    assert_eq!(
        r,
        Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]),
        "first FENCE: [1, 1]"
    );
    assert_eq!(get_int(&mut c, &fk), Some(1), "counter key {fk}");
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "res", "o1", "10000", "FENCE"]);
    assert_eq!(
        r,
        Reply::Arr(vec![Reply::Int(2), Reply::Int(1)]),
        "reentrant FENCE returns the current token"
    );
    assert_eq!(
        hgetall(&mut c, "res"),
        map(&[("o1", "2"), ("", "1")]),
        "the hold's token is the lock's empty-named field"
    );
    assert_eq!(release(&mut c, "res", "o1"), Reply::Int(0));
    assert_eq!(release(&mut c, "res", "o1"), Reply::Int(1));
    assert!(!exists(&mut c, "res"));
    assert_eq!(
        get_int(&mut c, &fk),
        Some(1),
        "release does not touch the counter"
    );

    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "res", "o2", "10000", "fence"]);
    assert_eq!(
        r,
        Reply::Arr(vec![Reply::Int(1), Reply::Int(2)]),
        "after release"
    );
    assert_eq!(release(&mut c, "res", "o2"), Reply::Int(1));

    // a fresh grant without FENCE takes no token and leaves the Redisson layout alone
    assert_eq!(acquire(&mut c, "res", "o3", 100), Reply::Int(1));
    assert_eq!(hgetall(&mut c, "res"), map(&[("o3", "1")]));
    assert_eq!(get_int(&mut c, &fk), Some(2), "no counter write");
    // ... and the lease runs out (expiry)
    wait_for(5 * SEC, "lease to run out", || {
        (!exists(&mut c, "res")).then_some(())
    });
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "res", "o4", "10000", "FENCE"]);
    assert_eq!(
        r,
        Reply::Arr(vec![Reply::Int(1), Reply::Int(3)]),
        "after expiry"
    );
    assert_eq!(
        dinfo_field(&mut c, "res", "fence"),
        Reply::Int(3),
        "DLOCK.INFO fence"
    );
    // refused FENCE acquire does not advance
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "res", "o5", "10000", "FENCE"]);
    assert_eq!(r, Reply::Nil);
    assert_eq!(
        get_int(&mut c, &fk),
        Some(3),
        "a refused acquire does not advance the counter"
    );
}

#[test]
fn reentrant_fence_draws_a_token_for_a_hold_taken_without() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert!(
        !exists(&mut c, &slot_fence_key("k")),
        "no counter before the first FENCE"
    );
    assert_eq!(
        dinfo_field(&mut c, "k", "fence"),
        Reply::Nil,
        "INFO fence null while the hold has no token"
    );
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "k", "o", "10000", "FENCE"]);
    assert_eq!(r, Reply::Arr(vec![Reply::Int(2), Reply::Int(1)]));
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "k", "o", "10000", "FENCE"]);
    assert_eq!(r, Reply::Arr(vec![Reply::Int(3), Reply::Int(1)]), "kept");
    assert_eq!(get_int(&mut c, &slot_fence_key("k")), Some(1));
    for _ in 0..3 {
        release(&mut c, "k", "o");
    }
    assert!(!exists(&mut c, "k"));
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(dinfo_field(&mut c, "k", "fence"), Reply::Nil);
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "k", "o", "10000", "FENCE"]);
    assert_eq!(r, Reply::Arr(vec![Reply::Int(2), Reply::Int(2)]), "above");
}

#[test]
fn fence_counters_stay_in_the_lock_slot_one_per_slot() {
    let srv = Server::start();
    let mut c = srv.connection();
    let cases = [
        ("plain", "dlock:fence:{plain}"),
        ("user:{42}:cart", "dlock:fence:user:{42}:cart"),
        ("{tag}rest", "dlock:fence:{tag}rest"),
    ];
    for (k, expect) in cases {
        assert_eq!(legacy_fence_key(k), expect);
    }
    let odd = ["a{b", "x}y", "{}z", "}{", "a{}b}c", "user:{42}:other"];
    let mut all: Vec<String> = cases.iter().map(|c| c.0.to_string()).collect();
    all.extend(odd.iter().map(|s| s.to_string()));
    // Longer than the module's stack buffer for names (plain, and with a slot tag).
    all.push("L".repeat(300));
    all.push(format!("{}{{", "q".repeat(300)));
    let mut tokens = std::collections::BTreeMap::new();
    for k in &all {
        let fk = slot_fence_key(k);
        let next = tokens.get(&fk).copied().unwrap_or(0) + 1;
        let r = cmd(&mut c, &["DLOCK.ACQUIRE", k, "o", "10000", "FENCE"]);
        assert_eq!(
            r,
            Reply::Arr(vec![Reply::Int(1), Reply::Int(next)]),
            "key {k:?}"
        );
        tokens.insert(fk.clone(), next);
        assert_eq!(
            key_slot(fk.as_bytes()),
            key_slot(k.as_bytes()),
            "test's own name for {k:?} is same-slot"
        );
        assert_eq!(get_int(&mut c, &fk), Some(next), "{fk} for {k:?}");
        assert_eq!(release(&mut c, k, "o"), Reply::Int(1));
    }
    assert_eq!(tokens[&slot_fence_key("user:{42}:other")], 2, "shared slot");
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("dlock:fence*")
        .query(&mut c)
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        tokens.into_keys().collect::<Vec<_>>(),
        "one key per slot"
    );
}

#[test]
fn options_case_insensitive_any_order() {
    let srv = Server::start();
    let mut c = srv.connection();
    let r = cmd(
        &mut c,
        &["dlock.acquire", "k", "o", "10000", "fence", "wait", "100"],
    );
    assert_eq!(r, Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]));
    let r = cmd(
        &mut c,
        &["DLOCK.ACQUIRE", "k", "o", "10000", "WaIt", "0", "FeNcE"],
    );
    assert_eq!(r, Reply::Arr(vec![Reply::Int(2), Reply::Int(1)]));
    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "k", "o", "10000", "WAIT", "50"]);
    assert_eq!(
        r,
        Reply::Int(3),
        "WAIT on a lock held by the same owner is a reentrant grant at once"
    );
}

#[test]
fn dlock_info_resp2_layout() {
    let srv = Server::start();
    let mut c = srv.connection();
    let none = dinfo(&mut c, "nokey");
    let names: Vec<&str> = none.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["kind", "mode", "lease-ms", "holders", "waiters", "fence", "delay-ms"],
        "field order"
    );
    assert_eq!(none[0].1, Reply::Bulk("none".into()));
    assert_eq!(none[1].1, Reply::Nil, "mode null for none");
    assert_eq!(none[2].1, Reply::Int(-2));
    assert_eq!(none[3].1, Reply::Arr(vec![]));
    assert_eq!(none[4].1, Reply::Int(0));
    assert_eq!(none[5].1, Reply::Nil);
    assert_eq!(dbsize(&mut c), 0, "INFO creates nothing");

    let r = cmd(&mut c, &["DLOCK.ACQUIRE", "k", "owner-a", "30000", "FENCE"]);
    assert_eq!(r, Reply::Arr(vec![Reply::Int(1), Reply::Int(1)]));
    assert_eq!(acquire(&mut c, "k", "owner-a", 30_000), Reply::Int(2));
    let info = dinfo(&mut c, "k");
    assert_eq!(info[0], ("kind".into(), Reply::Bulk("lock".into())));
    assert_eq!(info[1], ("mode".into(), Reply::Bulk("exclusive".into())));
    let lease = info[2].1.int();
    assert!(lease > 28_000 && lease <= 30_000, "lease-ms {lease}");
    let holders = info[3].1.arr();
    assert_eq!(holders.len(), 1, "{holders:?}");
    let h = holders[0].arr();
    assert_eq!(
        h.len(),
        4,
        "holder entry [owner, mode, count, lease]: {h:?}"
    );
    assert_eq!(h[0], Reply::Bulk("owner-a".into()));
    assert_eq!(h[1], Reply::Bulk("exclusive".into()));
    assert_eq!(h[2], Reply::Int(2));
    let hl = h[3].int();
    assert!(hl > 28_000 && hl <= 30_000, "holder lease {hl}");
    assert_eq!(info[4].1, Reply::Int(0));
    assert_eq!(info[5].1, Reply::Int(1));
}

#[test]
fn dlock_info_resp3_is_a_map() {
    let srv = Server::start();
    let client = redis::Client::open(srv.url_resp3()).unwrap();
    let mut c3 = client.get_connection().unwrap();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "o", 30_000), Reply::Int(1));
    let r = cmd(&mut c3, &["DLOCK.INFO", "k"]);
    let m = match r {
        Reply::Map(m) => m,
        other => panic!("RESP3 DLOCK.INFO must be a map, got {other:?}"),
    };
    let get = |name: &str| {
        m.iter()
            .find(|(k, _)| *k == Reply::Bulk(name.into()) || *k == Reply::Status(name.into()))
            .unwrap_or_else(|| panic!("no {name} in {m:?}"))
            .1
            .clone()
    };
    assert_eq!(get("kind").str(), "lock");
    assert_eq!(get("mode").str(), "exclusive");
    assert!(get("lease-ms").int() > 28_000);
    assert_eq!(get("waiters"), Reply::Int(0));
    assert_eq!(get("fence"), Reply::Nil);
    let holders = get("holders").arr();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].arr()[0].str(), "o");
    // and ordinary replies are unchanged under RESP3
    assert_eq!(acquire(&mut c3, "k", "o", 30_000), Reply::Int(2));
    assert_eq!(acquire(&mut c3, "k", "x", 30_000), Reply::Nil);
    assert_eq!(release(&mut c3, "k", "x"), Reply::Nil);
}

#[test]
fn info_dlock_counters_move() {
    let srv = Server::start();
    let mut c = srv.connection();
    let before = info_dlock(&mut c);
    for f in [
        "dlock_grants",
        "dlock_reentrant_grants",
        "dlock_releases",
        "dlock_renewals",
        "dlock_handoffs",
        "dlock_waiters",
        "dlock_wait_timeouts",
        "dlock_leases_expired",
        "dlock_errors",
    ] {
        assert!(before.contains_key(f), "INFO dlock lacks {f}: {before:?}");
    }
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(2));
    assert_eq!(renew(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(0));
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(1));
    assert_err(&cmd(&mut c, &["DLOCK.ACQUIRE", "k", "o", "-1"]), "ERR");
    // a WAIT that times out
    assert_eq!(acquire(&mut c, "k2", "a", 10_000), Reply::Int(1));
    assert_eq!(
        cmd(&mut c, &["DLOCK.ACQUIRE", "k2", "b", "1000", "WAIT", "20"]),
        Reply::Nil
    );
    // a lease that expires while held
    assert_eq!(acquire(&mut c, "k3", "a", 50), Reply::Int(1));
    wait_for(5 * SEC, "k3 to expire", || {
        (!exists(&mut c, "k3")).then_some(())
    });
    let after = info_dlock(&mut c);
    let d = |f: &str| after[f] - before[f];
    assert!(d("dlock_grants") >= 3, "grants {}", d("dlock_grants"));
    assert!(d("dlock_reentrant_grants") >= 1);
    assert!(d("dlock_releases") >= 1);
    assert!(d("dlock_renewals") >= 1);
    assert!(d("dlock_wait_timeouts") >= 1);
    assert!(d("dlock_errors") >= 1);
    // docs/COMMANDS.md (INFO dlock): a counter of "leases expired while held" (k3 expired while held, no waiter)
    wait_for(
        3 * SEC,
        "dlock_leases_expired to count k3's expired lease",
        || {
            (info_dlock(&mut c)["dlock_leases_expired"] > before["dlock_leases_expired"])
                .then_some(())
        },
    );
    assert_eq!(after["dlock_waiters"], 0, "no waiter left");
}
