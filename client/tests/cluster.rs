//! A real 3-primary Redis Cluster (from `testutil`) with the module loaded on every node:
//! locks spread over the primaries, `MOVED` after a slot changed owner, and `ASK` during a
//! live slot migration.

use crate::support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use dlock_client::{Backend, Client, LostReason};
use dlock_testutil::cluster::exists_asking;
use dlock_testutil::Cluster;
use support::cluster::waiters_asking;
use support::*;

async fn cluster_client(b: Backend, seeds: Vec<String>) -> Client {
    Client::cluster_builder(seeds)
        .backend(b)
        .lease(LEASE)
        .renew_interval(INTERVAL)
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("cluster client")
}

async fn spread_wait_and_watchdog(b: Backend) {
    let cl = Cluster::start(3);
    let c = cluster_client(b, cl.urls()).await;
    assert!(c.is_cluster());
    assert_eq!(c.is_native(), b == Backend::Native);
    // 30 locks with the watchdog: they land on all three masters.
    let mut guards = Vec::new();
    for i in 0..30 {
        let lock = c.lock(format!("order:{i}"));
        let lock = if b == Backend::Native {
            lock.fenced()
        } else {
            lock
        };
        let g = lock.acquire().await.unwrap();
        if b == Backend::Native {
            assert_eq!(g.fencing_token(), Some(1));
        }
        guards.push(g);
    }
    let used: HashSet<usize> = (0..30)
        .map(|i| cl.holder(&format!("order:{i}")).expect("held somewhere"))
        .collect();
    assert_eq!(used.len(), 3, "locks on every master");
    // Read-write locks too.
    let rd = c.rwlock("cfg").read().acquire().await.unwrap();
    // And semaphores, full, on keys of every master.
    let mut permits = Vec::new();
    for i in 0..6 {
        permits.push(
            c.semaphore(format!("pool:{i}"), 2)
                .acquire(2)
                .await
                .unwrap(),
        );
    }
    let used: HashSet<usize> = (0..6)
        .map(|i| cl.holder(&format!("pool:{i}")).expect("held somewhere"))
        .collect();
    assert_eq!(used.len(), 3, "semaphores on every master");
    // The watchdog renews across nodes for three leases.
    tokio::time::sleep(LEASE * 3).await;
    for g in &guards {
        assert!(g.lost().check().is_none(), "{} lost", g.name());
    }
    assert!(rd.lost().check().is_none());
    for p in &permits {
        assert!(p.lost().check().is_none(), "{} lost", p.name());
    }
    assert_eq!(
        (0..30)
            .filter(|i| cl.holder(&format!("order:{i}")).is_some())
            .count(),
        30
    );
    // Blocking waits on keys of different nodes: each waiter is granted at release.
    let keys = ["order:0", "order:1", "order:2", "order:3"];
    let mut waiters = Vec::new();
    for k in keys {
        let c2 = c.clone();
        waiters.push(tokio::spawn(async move {
            let t = Instant::now();
            let g = c2
                .lock(k)
                .try_acquire_for(Duration::from_secs(5), None)
                .await
                .unwrap()
                .expect("granted after release");
            (t.elapsed(), g)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut rest = Vec::new();
    for g in guards {
        if keys.contains(&g.name()) {
            g.release().await.unwrap();
        } else {
            rest.push(g);
        }
    }
    for w in waiters {
        let (el, g) = w.await.unwrap();
        assert!(
            el >= Duration::from_millis(250) && el < Duration::from_secs(3),
            "{el:?}"
        );
        g.release().await.unwrap();
    }
    // Losing a lock on one node is reported (the DEL goes to the key's node).
    let lost = rest[0].lost();
    c.lock(rest[0].name()).force_unlock().await.unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(2), lost)
            .await
            .unwrap(),
        LostReason::NotHeld
    );
    let mut rest = rest.into_iter();
    let gone = rest.next().unwrap();
    assert!(matches!(
        gone.release().await,
        Err(dlock_client::Error::NotHeld(_))
    ));
    for g in rest {
        g.release().await.unwrap();
    }
    rd.release().await.unwrap();
    // A waiter on each full semaphore is granted when its permits come back.
    let mut waiters = Vec::new();
    for p in &permits {
        let sem = c.semaphore(p.name(), 2);
        waiters.push(tokio::spawn(async move {
            sem.try_acquire_for(1, Duration::from_secs(5), None).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for p in permits {
        p.release().await.unwrap();
    }
    for w in waiters {
        let g = w.await.unwrap().unwrap().expect("granted after release");
        g.release().await.unwrap();
    }
}

both_backends!(spread_wait_and_watchdog, ask_during_live_slot_migration);

/// A client seeded with one node only, whose slot map then goes stale: the slot of the
/// lock key is moved to another master (CLUSTER SETSLOT ... NODE on every node), so the
/// client's first command gets MOVED and follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_moved_from_a_non_owner_seed() {
    let cl = Cluster::start(3);
    let key = "moved:lock";
    let slot = redis::cluster_routing::get_slot(key.as_bytes());
    let from = cl.slot_owner(slot);
    let to = (from + 1) % 3;
    let seed = (from + 2) % 3; // neither owner before nor after
    let c = cluster_client(Backend::Native, vec![cl.nodes[seed].url()]).await;
    // Warm the slot map, then move the (empty) slot.
    let g = c.lock("warm").acquire().await.unwrap();
    g.release().await.unwrap();
    cl.set_slot_owner(slot, to);
    // A direct command to the old owner is now answered MOVED.
    let mut old = cl.nodes[from].connection();
    let r: redis::RedisResult<redis::Value> = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg("x")
        .arg(1000)
        .query(&mut old);
    let err = r.unwrap_err();
    assert_eq!(err.kind(), redis::ErrorKind::Moved, "{err}");
    let g = c.lock(key).fenced().acquire().await.unwrap();
    assert_eq!(cl.holder(key), Some(to));
    // The slot's fencing counter lives in the same slot (on the new owner).
    let mut newc = cl.nodes[to].connection();
    let counter = dlock_core::names::slot_fence_key(key.as_bytes());
    let f: Option<i64> = redis::cmd("GET").arg(counter).query(&mut newc).unwrap();
    assert_eq!(f, Some(1));
    // A server-side wait on the moved slot goes to the new owner too.
    let c2 = c.clone();
    let w = tokio::spawn(async move {
        c2.lock(key)
            .try_acquire_for(Duration::from_secs(5), None)
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    g.release().await.unwrap();
    let g2 = w.await.unwrap().unwrap().expect("waiter granted");
    g2.release().await.unwrap();
}

/// A live slot migration: the slot of `{mig}` is MIGRATING on its owner and IMPORTING on
/// another node, two of its keys already moved (`MIGRATE`). The source serves the keys it
/// still has and answers `ASK` for the others, which the target serves after `ASKING`. The
/// client acquires, renews (watchdog), waits for (native) and releases (native) locks on keys
/// of both kinds, and each lock is on the node that really has its key; once the slot is
/// handed over (`SETSLOT ... NODE`) the client's stale slot map is corrected by `MOVED`.
async fn ask_during_live_slot_migration(b: Backend) {
    let cl = Cluster::start(3);
    let key = |name: &str| format!("{{mig}}:{name}");
    let (moved, stay, busy, fresh) = (key("moved"), key("stay"), key("busy"), key("fresh"));
    let slot = redis::cluster_routing::get_slot(moved.as_bytes());
    let from = cl.slot_owner(slot);
    let to = (from + 1) % 3;
    let c = cluster_client(b, cl.urls()).await;
    let other = cluster_client(b, cl.urls()).await;

    // Before the migration every lock of the slot is on its owner.
    let g_moved = c.lock(&moved).acquire().await.unwrap();
    let g_stay = c.lock(&stay).acquire().await.unwrap();
    let g_busy = other.lock(&busy).acquire().await.unwrap();
    assert_eq!(cl.holder(&moved), Some(from));

    cl.begin_slot_migration(slot, from, to);
    cl.migrate_keys(from, to, &[&moved, &busy]);
    assert_eq!(cl.holder(&moved), Some(to), "moved by MIGRATE");
    assert_eq!(cl.holder(&busy), Some(to), "moved by MIGRATE");
    assert_eq!(cl.holder(&stay), Some(from), "not moved yet");
    // The source now answers ASK for a key it no longer has.
    let mut src = cl.nodes[from].connection();
    let r: redis::RedisResult<redis::Value> = redis::cmd("DLOCK.INFO").arg(&moved).query(&mut src);
    assert_eq!(r.unwrap_err().kind(), redis::ErrorKind::Ask);

    // A new lock on a key the source does not have is created on the target (ASK).
    let g_fresh = c.lock(&fresh).acquire().await.unwrap();
    assert_eq!(
        cl.holder(&fresh),
        Some(to),
        "fresh lock on the importing node"
    );
    // Reads follow the same way: held on either node, free nowhere.
    assert!(c.lock(&moved).is_locked().await.unwrap(), "moved lock held");
    assert!(
        c.lock(&stay).is_locked().await.unwrap(),
        "unmoved lock held"
    );
    assert!(!c.lock(key("none")).is_locked().await.unwrap());
    // The watchdog renews locks on both nodes for three leases: none is lost, none moves.
    tokio::time::sleep(LEASE * 3).await;
    for g in [&g_moved, &g_stay, &g_fresh] {
        assert!(g.lost().check().is_none(), "{} lost", g.name());
    }
    assert_eq!(cl.holder(&moved), Some(to));
    assert_eq!(cl.holder(&stay), Some(from));
    assert_eq!(cl.holder(&fresh), Some(to));

    // Locks released only once the migration has ended (script backend, see below).
    let mut release_after = vec![];
    if b == Backend::Native {
        // A wait on a moved key held by another owner is queued on the target, and granted
        // there when that owner releases.
        let c2 = c.clone();
        let busy2 = busy.clone();
        let waiter = tokio::spawn(async move {
            c2.lock(&busy2)
                .try_acquire_for(Duration::from_secs(10), None)
                .await
        });
        let queued = || {
            let n = waiters_asking(&cl, to, &busy);
            async move { n == 1 }
        };
        until(Duration::from_secs(5), "a waiter on the moved key", queued).await;
        g_busy.release().await.unwrap();
        let g_waiter = waiter.await.unwrap().unwrap().expect("granted on release");
        assert_eq!(cl.holder(&busy), Some(to), "granted on the importing node");

        // Releases go to the node that has each key.
        g_moved.release().await.unwrap();
        g_stay.release().await.unwrap();
        g_waiter.release().await.unwrap();
        assert_eq!(cl.holder(&moved), None);
        assert_eq!(cl.holder(&stay), None);
        assert_eq!(cl.holder(&busy), None);
    } else {
        // The script backend's release scripts name the unlock channel as a second key
        // (Redisson's layout), a key that never exists: while the slot migrates, Redis
        // answers TRYAGAIN to any command on several keys of it that are not all on one
        // node. Those locks are released once the migration has ended.
        release_after.extend([g_moved, g_stay, g_busy]);
    }
    assert!(exists_asking(&mut cl.nodes[to].connection(), &fresh));

    // The migration ends: the remaining keys move, the target owns the slot. The client still
    // maps it to the source, whose MOVED it follows, for plain and waiting commands alike.
    cl.finish_slot_migration(slot, from, to);
    let mut src = cl.nodes[from].connection();
    let r: redis::RedisResult<redis::Value> = redis::cmd("DLOCK.INFO").arg(&fresh).query(&mut src);
    assert_eq!(r.unwrap_err().kind(), redis::ErrorKind::Moved);
    let after = key("after");
    let g_after = c.lock(&after).acquire().await.unwrap();
    assert_eq!(cl.holder(&after), Some(to));
    let waited = key("waited");
    let g_waited = c
        .lock(&waited)
        .try_acquire_for(Duration::from_secs(5), None)
        .await
        .unwrap()
        .expect("free lock");
    assert_eq!(cl.holder(&waited), Some(to));
    for g in release_after
        .into_iter()
        .chain([g_fresh, g_after, g_waited])
    {
        g.release().await.unwrap();
    }
    for k in [&moved, &stay, &busy, &fresh, &after, &waited] {
        assert_eq!(cl.holder(k), None, "{k} released");
    }
}

/// A fenced acquire while the lock's slot migrates and its fencing counter has not moved:
/// the target answers `TRYAGAIN` (a counter made there would repeat old tokens), the client
/// tries again, and once the counter has moved its token follows the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_acquire_tries_again_until_the_counter_has_moved() {
    let cl = Cluster::start(3);
    let name = "{fmig}:lock";
    let slot = redis::cluster_routing::get_slot(name.as_bytes());
    let from = cl.slot_owner(slot);
    let to = (from + 1) % 3;
    let c = cluster_client(Backend::Native, cl.urls()).await;
    let g = c.lock(name).fenced().acquire().await.unwrap();
    assert_eq!(g.fencing_token(), Some(1));
    g.release().await.unwrap();

    // The lock key is gone from the source (ASK to the target); its counter stays behind.
    cl.begin_slot_migration(slot, from, to);
    let mut target = cl.nodes[to].connection();
    let tryagain = |c: &mut redis::Connection| {
        dlock_testutil::info_field(c, "errorstats", "errorstat_TRYAGAIN")
            .and_then(|v| v.strip_prefix("count=")?.parse::<i64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(tryagain(&mut target), 0);
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.lock(name).fenced().acquire().await }
    });
    // The target refused at least twice: the client is trying again, not failing.
    until(Duration::from_secs(5), "TRYAGAIN answered twice", || {
        let n = tryagain(&mut target);
        async move { n >= 2 }
    })
    .await;
    assert!(!waiting.is_finished(), "still trying");
    cl.finish_slot_migration(slot, from, to);
    let g = waiting
        .await
        .unwrap()
        .expect("granted once the counter moved");
    assert_eq!(g.fencing_token(), Some(2), "tokens never go back");
    assert_eq!(cl.holder(name), Some(to));
    g.release().await.unwrap();
}
