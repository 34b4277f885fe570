//! A slot moved under the client on a real 2-master Redis Cluster, by the classic reshard
//! steps (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT NODE`): a waiting acquire
//! follows its key to the new owner within the caller's time, the watchdog renews holds
//! whose key moved, a wait that runs out while redirected ends as any time-out, and a
//! redirect loop ends with a clear error.

use crate::support;

use std::time::{Duration, Instant};

use dlock_client::{Backend, Client, Error, Lock};
use dlock_core::names::key_slot;
use dlock_testutil::cluster::exists_asking;
use dlock_testutil::Cluster;
use support::cluster::{holders_asking, until_queued};
use support::*;

/// The caller's wait in the tests where the holder lets go.
const WAIT: Duration = Duration::from_secs(8);

fn cluster_builder(cl: &Cluster, b: Backend) -> dlock_client::ClientBuilder {
    Client::cluster_builder(cl.urls())
        .backend(b)
        .lease(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(2))
}

async fn cluster_client(cl: &Cluster, b: Backend) -> Client {
    cluster_builder(cl, b)
        .build()
        .await
        .expect("cluster client")
}

/// Whether `owner` holds `key` on node `node` (the script backend has no `DLOCK.INFO`: its
/// hash field).
fn held_on(cl: &Cluster, node: usize, key: &str, owner: &str, b: Backend) -> bool {
    if b == Backend::Native {
        return holders_asking(cl, node, key).iter().any(|o| o == owner);
    }
    let mut c = cl.nodes[node].connection();
    let (_, n): (redis::Value, i64) = redis::pipe()
        .cmd("ASKING")
        .cmd("HEXISTS")
        .arg(key)
        .arg(owner)
        .query(&mut c)
        .unwrap();
    n == 1
}

/// Node `c`'s `DLOCK.ACQUIRE key holder 60000`: a hold by an owner no client knows.
fn hold_as_holder(c: &mut redis::Connection, key: &str) {
    let held: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg("holder")
        .arg(60_000)
        .query(c)
        .unwrap();
    assert_eq!(held, 1);
}

/// `c.lock(key).try_acquire_for(wait, None)` in a task.
fn spawn_wait(
    c: &Client,
    key: &str,
    wait: Duration,
) -> tokio::task::JoinHandle<dlock_client::Result<Option<dlock_client::LockGuard>>> {
    let lock = c.lock(key);
    tokio::spawn(async move { lock.try_acquire_for(wait, None).await })
}

/// Holder on node 0, a client waiting for `wait` of the same name; the slot moves to node
/// 1; the holder releases there; the waiting acquire returns a guard from node 1 within
/// its time, and node 0 has no key.
async fn a_waiting_acquire_follows_its_key(
    b: Backend,
    tag: &str,
    hold: fn(&Client, &str) -> Lock,
    wait: fn(&Client, &str) -> Lock,
) {
    let cl = Cluster::start(2);
    let key = cl.key_on(0, tag);
    let slot = key_slot(key.as_bytes());
    let (holder, waiter, observer) = (
        cluster_client(&cl, b).await,
        cluster_client(&cl, b).await,
        cluster_client(&cl, b).await,
    );
    let held = hold(&holder, &key).acquire().await.unwrap();
    let lock = wait(&waiter, &key);
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move {
            let t = Instant::now();
            let got = lock.try_acquire_for(WAIT, None).await;
            (got, t.elapsed(), Instant::now())
        }
    });
    if b == Backend::Native {
        until_queued(&cl, 0, &key, 1);
    } else {
        until_waiting(&raw(&cl.nodes[0]).await, b, &key).await;
    }

    cl.move_slot(slot, 0, 1);
    if b == Backend::Native {
        // Re-queued on the new owner; a client whose slot map is stale finds it there too.
        until_queued(&cl, 1, &key, 1);
        let queue = observer.waiters(&key).await.unwrap();
        assert_eq!(queue.len(), 1, "{queue:?}");
        assert_eq!(queue[0].owner, lock.owner().id());
    }
    assert!(!waiting.is_finished(), "still waiting: the lock is held");

    let releasing = Instant::now();
    held.release().await.unwrap();
    let (got, took, at) = waiting.await.unwrap();
    let got = got.unwrap().expect("granted by the new owner");
    println!(
        "{b:?} {tag}: granted on the new owner {:?} after the release was sent",
        at.saturating_duration_since(releasing)
    );
    assert!(took < WAIT, "within the caller's wait: {took:?}");
    assert!(held_on(&cl, 1, &key, got.owner_id(), b), "held on node 1");
    assert!(!exists_asking(&mut cl.nodes[0].connection(), &key));
    got.release().await.unwrap();
    assert_eq!(cl.holder(&key), None);
}

async fn exclusive(b: Backend) {
    a_waiting_acquire_follows_its_key(b, "lock", |c, k| c.lock(k), |c, k| c.lock(k)).await
}

both_backends!(exclusive);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_reader_follows_its_key() {
    a_waiting_acquire_follows_its_key(
        Backend::Native,
        "rw",
        |c, k| c.rwlock(k).write(),
        |c, k| c.rwlock(k).read(),
    )
    .await
}

/// The blocking API, with a semaphore: a thread waiting for a permit is granted by the new
/// owner of the key.
#[test]
fn a_blocking_semaphore_waiter_follows_its_key() {
    use dlock_client::blocking;
    let cl = Cluster::start(2);
    let key = cl.key_on(0, "sem");
    let slot = key_slot(key.as_bytes());
    let client = || blocking::Client::build(cluster_builder(&cl, Backend::Native)).unwrap();
    let (holder, waiter) = (client(), client());
    let held = holder.semaphore(&key, 1).acquire(1).unwrap();
    let waiting = std::thread::spawn({
        let key = key.clone();
        move || {
            let t = Instant::now();
            let got = waiter.semaphore(&key, 1).try_acquire_for(1, WAIT, None);
            (got, t.elapsed())
        }
    });
    until_queued(&cl, 0, &key, 1);
    cl.move_slot(slot, 0, 1);
    until_queued(&cl, 1, &key, 1);
    held.release().unwrap();
    let (got, took) = waiting.join().unwrap();
    let got = got.unwrap().expect("a permit from the new owner");
    assert!(took < WAIT, "{took:?}");
    assert_eq!(holders_asking(&cl, 1, &key), [got.owner_id()]);
    assert!(!exists_asking(&mut cl.nodes[0].connection(), &key));
    got.release().unwrap();
    assert_eq!(cl.holder(&key), None);
}

/// Holds of every kind on one slot, leases of 1 s renewed by the watchdog; the slot moves;
/// three leases later every hold is still there, on the new owner, and no guard reports a
/// loss (without renewals on the new node the keys would have expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_holds_whose_key_moved() {
    let cl = Cluster::start(2);
    let tag = cl.key_on(0, "watched");
    let slot = key_slot(tag.as_bytes());
    let key = |kind: &str| format!("{{{tag}}}:{kind}");
    let c = cluster_client(&cl, Backend::Native).await;
    let lock = c.lock(key("lock")).acquire().await.unwrap();
    let write = c.rwlock(key("rw")).write().acquire().await.unwrap();
    let permits = c.semaphore(key("sem"), 3).acquire(2).await.unwrap();
    for k in ["lock", "rw", "sem"] {
        assert_eq!(cl.holder(&key(k)), Some(0));
    }
    cl.move_slot(slot, 0, 1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(lock.lost().check(), None);
    assert_eq!(write.lost().check(), None);
    assert_eq!(permits.lost().check(), None);
    for (k, owner) in [
        ("lock", lock.owner_id()),
        ("rw", write.owner_id()),
        ("sem", permits.owner_id()),
    ] {
        assert_eq!(cl.holder(&key(k)), Some(1), "{k} on the new owner");
        assert_eq!(holders_asking(&cl, 1, &key(k)), [owner], "{k}");
    }
    lock.release().await.unwrap();
    write.release().await.unwrap();
    permits.release().await.unwrap();
    for k in ["lock", "rw", "sem"] {
        assert_eq!(cl.holder(&key(k)), None, "{k} released");
    }
}

/// A wait of 2 s whose key moves after 0.8 s while the holder keeps it: the request is sent
/// to the new owner with what is left of the wait (not the whole wait again), and the
/// acquire ends as any time-out (`Ok(None)`) with nothing held or queued anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_while_redirected_ends_as_a_time_out() {
    let cl = Cluster::start(2);
    let key = cl.key_on(0, "timeout");
    let slot = key_slot(key.as_bytes());
    let mut src = cl.nodes[0].connection();
    hold_as_holder(&mut src, &key);
    let c = cluster_client(&cl, Backend::Native).await;
    let wait = Duration::from_secs(2);
    let started = Instant::now();
    let waiting = spawn_wait(&c, &key, wait);
    until_queued(&cl, 0, &key, 1);
    tokio::time::sleep(Duration::from_millis(800).saturating_sub(started.elapsed())).await;
    cl.move_slot(slot, 0, 1);
    let got = waiting.await.unwrap();
    let took = started.elapsed();
    println!("a wait of {wait:?}, redirected after 0.8 s, ended after {took:?}");
    assert!(got.unwrap().is_none(), "not granted: the holder kept it");
    // The whole wait again after the move would end at 2.8 s or later.
    assert!(
        took >= wait - Duration::from_millis(50) && took < Duration::from_millis(2600),
        "{took:?}"
    );
    assert_eq!(holders_asking(&cl, 1, &key), ["holder"]);
    until_queued(&cl, 1, &key, 0);
    assert!(!exists_asking(&mut src, &key));
}

/// The cluster goes down under a waiting acquire (node 0 stops serving another of its
/// slots, `CLUSTER DELSLOTS`, so it sees the cluster down) and comes back: the waiter,
/// answered `CLUSTERDOWN`, tries again after short pauses, waits again once the cluster is
/// up, and is granted when the holder releases, all within its one acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_outlasts_a_cluster_down() {
    let cl = Cluster::builder(2).node_timeout_ms(500).start();
    let key = cl.key_on(0, "down");
    let other = if key_slot(key.as_bytes()) == 0 { 1 } else { 0 };
    let mut src = cl.nodes[0].connection();
    hold_as_holder(&mut src, &key);
    let c = cluster_client(&cl, Backend::Native).await;
    let waiting = spawn_wait(&c, &key, WAIT);
    until_queued(&cl, 0, &key, 1);
    let slots = |what: &str, src: &mut redis::Connection| {
        let _: () = redis::cmd("CLUSTER")
            .arg(what)
            .arg(other)
            .query(src)
            .unwrap();
    };
    slots("DELSLOTS", &mut src);
    let clusterdown = |c: &mut redis::Connection| {
        dlock_testutil::info_field(c, "errorstats", "errorstat_CLUSTERDOWN")
            .and_then(|v| v.strip_prefix("count=")?.parse::<i64>().ok())
            .unwrap_or(0)
    };
    // The waiter was answered, and has asked again at least once since.
    until(Duration::from_secs(5), "CLUSTERDOWN answered twice", || {
        let n = clusterdown(&mut src);
        async move { n >= 2 }
    })
    .await;
    assert!(!waiting.is_finished(), "still trying");
    slots("ADDSLOTS", &mut src);
    cl.wait_ok();
    until_queued(&cl, 0, &key, 1);
    let released: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&key)
        .arg("holder")
        .query(&mut src)
        .unwrap();
    assert_eq!(released, 1);
    let got = waiting.await.unwrap().unwrap().expect("granted once back");
    assert_eq!(holders_asking(&cl, 0, &key), [got.owner_id()]);
    got.release().await.unwrap();
}

/// A failover under a waiting acquire: node 0's replica takes over (`CLUSTER FAILOVER
/// TAKEOVER`), once the hold has reached it. The
/// demoted node answers its waiter `UNBLOCKED` and closes the connection (as for `BLPOP`);
/// the client asks it again, is redirected (`MOVED`) to the new master, waits there and is
/// granted when the holder releases, all within its one acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_follows_a_failover() {
    let cl = Cluster::builder(2).replicas(1).start();
    let key = cl.key_on(0, "failover");
    let replica = 2; // node 2 replicates node 0
    let mut src = cl.nodes[0].connection();
    hold_as_holder(&mut src, &key);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut src).unwrap();
    assert_eq!(acked, 1, "the hold reached the replica");
    let c = cluster_client(&cl, Backend::Native).await;
    let waiting = spawn_wait(&c, &key, WAIT);
    until_queued(&cl, 0, &key, 1);
    // TAKEOVER: no handshake with the master, which a manual failover right after the
    // cluster formed sometimes waits out (the master has not yet heard of its replica).
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut cl.nodes[replica].connection())
        .unwrap();
    dlock_testutil::wait_for(Duration::from_secs(10), "the replica promoted", || {
        let slot = key_slot(key.as_bytes());
        (cl.slot_owner_seen_by(0, slot) == replica).then_some(())
    });
    until_queued(&cl, replica, &key, 1);
    let released: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&key)
        .arg("holder")
        .query(&mut cl.nodes[replica].connection())
        .unwrap();
    assert_eq!(released, 1);
    let got = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("granted by the new master");
    assert_eq!(holders_asking(&cl, replica, &key), [got.owner_id()]);
    got.release().await.unwrap();
}

/// Two nodes that each say the other serves a slot: a waiting acquire follows `MOVED` 16
/// times, then fails with [`Error::Redirected`] instead of bouncing for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_loop_ends_with_a_clear_error() {
    let cl = Cluster::start(2);
    let key = cl.key_on(0, "loop");
    let slot = key_slot(key.as_bytes());
    let c = cluster_client(&cl, Backend::Native).await;
    let (id0, id1) = (cl.node_id(0), cl.node_id(1));
    for (node, to) in [(0, &id1), (1, &id0)] {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(to)
            .query(&mut cl.nodes[node].connection())
            .unwrap();
    }
    let r = c.lock(&key).try_acquire_for(WAIT, None).await;
    match r {
        Err(Error::Redirected {
            key: k, redirects, ..
        }) => {
            assert_eq!((k.as_str(), redirects), (key.as_str(), 16));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(cl.holder(&key), None, "nothing granted anywhere");
}
