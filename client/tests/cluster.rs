//! A real 3-master Redis Cluster with the module loaded on every node.

mod support;

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use dlock_client::{Backend, Client, LostReason};
use support::*;

struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                Server::builder()
                    .args([
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                    ])
                    .start()
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .arg("--cluster-yes")
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for n in &nodes {
            let mut c = n.connection();
            wait_for(Duration::from_secs(20), "cluster_state:ok", || {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).ok()?;
                info.contains("cluster_state:ok").then_some(())
            });
        }
        Cluster { nodes }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// The node (index) whose keyspace holds `key` now.
    fn holder(&self, key: &str) -> Option<usize> {
        self.nodes.iter().position(|n| {
            let mut c = n.connection();
            // Ask each node directly; a non-owner answers MOVED (an error), not 1.
            redis::cmd("EXISTS").arg(key).query::<i64>(&mut c) == Ok(1)
        })
    }

    fn node_id(&self, i: usize) -> String {
        let mut c = self.nodes[i].connection();
        redis::cmd("CLUSTER").arg("MYID").query(&mut c).unwrap()
    }

    fn owner_of_slot(&self, slot: u16) -> usize {
        let mut c = self.nodes[0].connection();
        let v: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).unwrap();
        for r in v {
            let redis::Value::Array(r) = r else { continue };
            let (redis::Value::Int(lo), redis::Value::Int(hi), redis::Value::Array(node)) =
                (&r[0], &r[1], &r[2])
            else {
                continue;
            };
            if *lo <= slot as i64 && slot as i64 <= *hi {
                let redis::Value::Int(port) = node[1] else {
                    panic!()
                };
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port() as i64 == port)
                    .unwrap();
            }
        }
        panic!("slot {slot} unassigned")
    }
}

async fn cluster_client(cl: &Cluster, b: Backend, seeds: Vec<String>) -> Client {
    let _ = cl;
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
    let cl = Cluster::start();
    let c = cluster_client(&cl, b, cl.urls()).await;
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
    // The watchdog renews across nodes for three leases.
    tokio::time::sleep(LEASE * 3).await;
    for g in &guards {
        assert!(g.lost().check().is_none(), "{} lost", g.name());
    }
    assert!(rd.lost().check().is_none());
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
}

both_backends!(spread_wait_and_watchdog);

/// A client seeded with one node only, whose slot map then goes stale: the slot of the
/// lock key is moved to another master (CLUSTER SETSLOT ... NODE on every node), so the
/// client's first command gets MOVED and follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_moved_from_a_non_owner_seed() {
    let cl = Cluster::start();
    let key = "moved:lock";
    let slot = redis::cluster_routing::get_slot(key.as_bytes());
    let from = cl.owner_of_slot(slot);
    let to = (from + 1) % 3;
    let seed = (from + 2) % 3; // neither owner before nor after
    let c = cluster_client(&cl, Backend::Native, vec![cl.nodes[seed].url()]).await;
    // Warm the slot map, then move the (empty) slot.
    let g = c.lock("warm").acquire().await.unwrap();
    g.release().await.unwrap();
    let to_id = cl.node_id(to);
    for n in &cl.nodes {
        let mut x = n.connection();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&to_id)
            .query(&mut x)
            .unwrap();
    }
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
    // The fence companion key lives in the same slot (on the new owner).
    let mut newc = cl.nodes[to].connection();
    let f: Option<i64> = redis::cmd("GET")
        .arg(format!("dlock:fence:{{{key}}}"))
        .query(&mut newc)
        .unwrap();
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
