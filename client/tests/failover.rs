//! Sentinel failover: master + replica + redis-sentinel, `kill -9` of the master after a
//! grant. With `min_replicas(1, ..)` a lock acknowledged before the kill survives the
//! failover (zero double grants). Without it the figures are printed, not asserted.
//!
//! Repetitions: 3 per scenario; 20 with `DLOCK_LONG=1` (`make test-long`).

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock_client::{Client, Error};
use support::*;

fn reps() -> usize {
    if std::env::var("DLOCK_LONG").is_ok_and(|v| v == "1") {
        20
    } else {
        3
    }
}

struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sentinel_binary() -> String {
    std::env::var("REDIS_SENTINEL").unwrap_or_else(|_| "redis-sentinel".into())
}

fn start_sentinel(master_port: u16) -> Sentinel {
    let dir = tempfile::tempdir().unwrap();
    let port = dlock_testutil::free_port();
    let conf = dir.path().join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {d}\nlogfile {d}/sentinel.log\n\
             sentinel monitor m 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds m 500\n\
             sentinel failover-timeout m 2000\n",
            d = dir.path().display()
        ),
    )
    .unwrap();
    let child = Command::new(sentinel_binary())
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-sentinel (Debian package redis-sentinel)");
    Sentinel {
        child,
        port,
        _dir: dir,
    }
}

fn sentinel_url(s: &Sentinel) -> String {
    format!("redis://127.0.0.1:{}/", s.port)
}

/// The master's port once the sentinel has no failover in progress.
fn master_port_of(s: &Sentinel) -> Option<u16> {
    let c = redis::Client::open(sentinel_url(s)).ok()?;
    let mut c = c
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    let v: Vec<String> = redis::cmd("SENTINEL")
        .arg("master")
        .arg("m")
        .query(&mut c)
        .ok()?;
    let get = |k: &str| v.chunks(2).find(|p| p[0] == k).map(|p| p[1].clone());
    let flags = get("flags")?;
    if flags.contains("failover_in_progress") || flags.contains("down") {
        return None;
    }
    get("port")?.parse().ok()
}

fn known_replicas(s: &Sentinel) -> usize {
    let Ok(c) = redis::Client::open(sentinel_url(s)) else {
        return 0;
    };
    let Ok(mut c) = c.get_connection_with_timeout(Duration::from_millis(500)) else {
        return 0;
    };
    let v: redis::RedisResult<Vec<redis::Value>> = redis::cmd("SENTINEL")
        .arg("replicas")
        .arg("m")
        .query(&mut c);
    v.map(|v| v.len()).unwrap_or(0)
}

/// After a diskless sync the master counts the replica (for WAIT) only once its first
/// REPLCONF ACK arrived.
fn wait_online(master: &Server) {
    let mut mc = master.connection();
    wait_for(
        Duration::from_secs(10),
        "replica online on the master",
        || {
            let info: String = redis::cmd("INFO").arg("replication").query(&mut mc).ok()?;
            info.contains("state=online").then_some(())
        },
    );
}

struct Set {
    master: Server,
    replica: Server,
    sentinel: Sentinel,
}

fn setup() -> Set {
    let master = Server::start();
    let replica = Server::builder()
        .args([
            "--replicaof".to_string(),
            "127.0.0.1".to_string(),
            master.port().to_string(),
            "--replica-announce-ip".to_string(),
            "127.0.0.1".to_string(),
        ])
        .start();
    let mut rc = replica.connection();
    wait_for(Duration::from_secs(10), "replica link up", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut rc).ok()?;
        info.contains("master_link_status:up").then_some(())
    });
    wait_online(&master);
    let sentinel = start_sentinel(master.port());
    wait_for(Duration::from_secs(15), "sentinel sees the replica", || {
        (known_replicas(&sentinel) >= 1).then_some(())
    });
    Set {
        master,
        replica,
        sentinel,
    }
}

async fn sentinel_client(set: &Set, guard: bool) -> Client {
    let mut b = Client::sentinel_builder([sentinel_url(&set.sentinel)], "m")
        .lease(Duration::from_secs(10))
        .response_timeout(Duration::from_secs(1));
    if guard {
        b = b.min_replicas(1, Duration::from_millis(500));
    }
    match b.build().await {
        Ok(c) => c,
        Err(e) => {
            let c = redis::Client::open(sentinel_url(&set.sentinel)).unwrap();
            let mut c = c.get_connection().unwrap();
            let v: redis::Value = redis::cmd("SENTINEL").arg("MASTERS").query(&mut c).unwrap();
            panic!(
                "sentinel client: {e}; masters: {v:?}\nMASTER LOG:\n{}",
                set.master.log()
            )
        }
    }
}

/// What happened in one repetition.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// A's grant was refused by the guard (not replicated): nothing to lose.
    Refused,
    /// A held it before the kill and still holds it on the new master.
    Survived,
    /// A held it before the kill; after the failover B was granted it too.
    DoubleGrant,
}

/// One repetition: A acquires (watchdog, lease 10 s), the master is killed, the sentinel
/// promotes the replica, B tries the same lock on the new master.
async fn one_failover(guard: bool, cut_link: bool) -> Outcome {
    let mut set = setup();
    let a = sentinel_client(&set, guard).await;
    if cut_link {
        // Drop the replication link: the replica reconnects on its next cron tick (≤ 1 s),
        // so the grant below is most likely not replicated when the master dies.
        let mut m = set.master.connection();
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut m)
            .unwrap();
    }
    let lock = a.lock("L");
    if !cut_link {
        // A refusal is the guard working (the replica had not acknowledged in time); for
        // this scenario we want a grant, so try again a few times.
        for _ in 0..5 {
            match lock.try_acquire().await {
                Err(Error::NotReplicated { .. }) => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Ok(Some(g)) => {
                    g.release().await.unwrap();
                    break;
                }
                x => panic!("acquire: {x:?}"),
            }
        }
    }
    let g = match lock.try_acquire().await {
        Ok(Some(g)) => Some(g),
        Err(e @ Error::NotReplicated { .. }) => {
            let mut m = set.master.connection();
            let info: String = redis::cmd("INFO").arg("replication").query(&mut m).unwrap();
            eprintln!("refused: {e}\n{info}");
            None
        }
        x => panic!("acquire: {x:?}"),
    };
    let granted_at = Instant::now();
    set.master.kill();
    let replica_port = set.replica.port();
    let s = &set.sentinel;
    wait_for(Duration::from_secs(20), "sentinel failover", || {
        (master_port_of(s) == Some(replica_port)).then_some(())
    });
    let mut rc = set.replica.connection();
    wait_for(Duration::from_secs(10), "replica promoted", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut rc).ok()?;
        info.contains("role:master").then_some(())
    });
    let b = sentinel_client(&set, false).await;
    let mut got_b = None;
    for _ in 0..20 {
        match b.lock("L").try_acquire().await {
            Ok(x) => {
                got_b = Some(x);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let got_b = got_b.expect("B reached the new master").is_some();
    assert!(
        granted_at.elapsed() < Duration::from_secs(10),
        "the failover outlasted A's lease: the figures would be meaningless"
    );
    // The sentinel client follows the failover: a fresh lock works through it.
    let mut followed = false;
    for _ in 0..20 {
        if let Ok(Some(x)) = b.lock("after").try_acquire().await {
            x.release().await.unwrap();
            followed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(followed, "sentinel client did not follow the failover");
    match (g, got_b) {
        (None, _) => Outcome::Refused,
        (Some(_), false) => Outcome::Survived,
        (Some(_), true) => Outcome::DoubleGrant,
    }
}

async fn run(guard: bool, cut_link: bool) -> Vec<Outcome> {
    let mut out = Vec::new();
    for _ in 0..reps() {
        out.push(one_failover(guard, cut_link).await);
    }
    let count = |o: Outcome| out.iter().filter(|x| **x == o).count();
    eprintln!(
        "FAILOVER guard={guard} cut_link={cut_link}: reps={} survived={} refused={} double_grants={}",
        out.len(),
        count(Outcome::Survived),
        count(Outcome::Refused),
        count(Outcome::DoubleGrant)
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_lock_survives_failover() {
    let out = run(true, false).await;
    assert!(!out.contains(&Outcome::DoubleGrant), "{out:?}");
    assert!(out.contains(&Outcome::Survived), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_lock_never_double_granted_with_replica_link_cut() {
    let out = run(true, true).await;
    assert!(!out.contains(&Outcome::DoubleGrant), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unguarded_figures() {
    // Not asserted: asynchronous replication usually wins the race on loopback.
    run(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unguarded_with_replica_link_cut_figures() {
    // Expected: double grants (the hole min_replicas closes); printed, not asserted.
    run(false, true).await;
}

/// The guard on a plain master without replicas: the grant is released and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_replica_no_grant() {
    let s = Server::start();
    let c = builder(&s, dlock_client::Backend::Native)
        .min_replicas(1, Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    match c.lock("k").try_acquire().await {
        Err(Error::NotReplicated { acked, wanted, .. }) => assert_eq!((acked, wanted), (0, 1)),
        x => panic!("{x:?}"),
    }
    let mut r = raw(&s).await;
    assert!(
        !exists(&mut r, "k").await,
        "the unreplicated grant was released"
    );
    // Script backend too.
    let c = builder(&s, dlock_client::Backend::Script)
        .min_replicas(1, Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    assert!(matches!(
        c.rwlock("rw").write().try_acquire().await,
        Err(Error::NotReplicated { .. })
    ));
    assert!(!exists(&mut r, "rw").await);
}

/// A renewal that reaches too few replicas reports the lock lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_without_replica_is_lost() {
    let master = Server::start();
    let mut replica = Server::builder()
        .args([
            "--replicaof".to_string(),
            "127.0.0.1".to_string(),
            master.port().to_string(),
        ])
        .start();
    let mut rc = replica.connection();
    wait_for(Duration::from_secs(10), "replica link up", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut rc).ok()?;
        info.contains("master_link_status:up").then_some(())
    });
    wait_online(&master);
    // The WAIT time-out stays well below the lease, so a missing replica is reported as
    // NotReplicated before the lease could run out.
    let c = builder(&master, dlock_client::Backend::Native)
        .lease(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(200))
        .min_replicas(1, Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let mut g = None;
    for _ in 0..5 {
        match c.lock("k").acquire().await {
            Ok(x) => {
                g = Some(x);
                break;
            }
            // A loaded machine may miss the WAIT time-out: the guard working, try again.
            Err(Error::NotReplicated { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let g = g.expect("a replicated grant");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        g.lost().check().is_none(),
        "renewals acknowledged: {:?}",
        g.lost().check()
    );
    replica.kill();
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .unwrap();
    assert_eq!(reason, dlock_client::LostReason::NotReplicated);
}
