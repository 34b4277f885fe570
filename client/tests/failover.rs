//! Sentinel failover: master + replica + redis-sentinel, `kill -9` of the master after a
//! grant. With `min_replicas(1, ..)` a lock acknowledged before the kill survives the
//! failover (zero double grants). Without it the figures are printed, not asserted.
//!
//! Repetitions: 3 per scenario; 20 with `DLOCK_LONG=1` (`make test-long`).

use crate::support;

use std::time::{Duration, Instant};

use dlock_client::{Client, Error};
use dlock_testutil::replication::wait_promoted;
use dlock_testutil::workers::scale;
use dlock_testutil::{ReplicaSet, Sentinels};
use support::*;

fn reps() -> usize {
    scale(3, 20)
}

/// A primary with one replica (module loaded on both) and one Sentinel watching them.
struct Set {
    servers: ReplicaSet,
    sentinels: Sentinels,
}

fn setup() -> Set {
    let servers = ReplicaSet::with_module(1);
    let sentinels = Sentinels::start(&servers, 1);
    Set { servers, sentinels }
}

async fn sentinel_client(set: &Set, guard: bool) -> Client {
    let mut b = Client::sentinel_builder(set.sentinels.urls(), Sentinels::NAME)
        .lease(Duration::from_secs(10))
        .response_timeout(Duration::from_secs(1));
    if guard {
        b = b.min_replicas(1, Duration::from_millis(500));
    }
    match b.build().await {
        Ok(c) => c,
        Err(e) => panic!(
            "sentinel client: {e}; {}\nMASTER LOG:\n{}",
            set.sentinels.describe(),
            set.servers.primary.log()
        ),
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
        let mut m = set.servers.primary.connection();
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
            let mut m = set.servers.primary.connection();
            let info: String = redis::cmd("INFO").arg("replication").query(&mut m).unwrap();
            eprintln!("refused: {e}\n{info}");
            None
        }
        x => panic!("acquire: {x:?}"),
    };
    let granted_at = Instant::now();
    set.servers.primary.kill();
    let replica = &set.servers.replicas[0];
    set.sentinels
        .wait_failover_to(replica, Duration::from_secs(20));
    wait_promoted(replica, Duration::from_secs(10));
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
    let ReplicaSet {
        primary: master,
        mut replicas,
    } = ReplicaSet::with_module(1);
    let mut replica = replicas.pop().unwrap();
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
