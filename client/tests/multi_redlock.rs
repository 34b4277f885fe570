//! Multi-locks over two servers and RedLock over five.

use crate::support;

use std::time::Duration;

use dlock_client::{Backend, Client, LostReason, MultiLock, RedLock};
use dlock_testutil::servers_holding;
use support::*;

async fn multilock_rolls_back(b: Backend) {
    let s1 = server(b);
    let s2 = server(b);
    let c1 = client(&s1, b).await;
    let c2 = client(&s2, b).await;
    let mut r1 = raw(&s1).await;
    let mut r2 = raw(&s2).await;
    // Someone else holds "b" on server 2.
    let other = c2.lock("b").acquire().await.unwrap();
    // Given in a scrambled order; acquired in the canonical one.
    let m = MultiLock::new([c1.lock("c"), c2.lock("b"), c1.lock("a")]);
    assert_eq!(m.len(), 3);
    let got = m
        .try_acquire_for(Duration::from_millis(300), None)
        .await
        .unwrap();
    assert!(got.is_none());
    assert!(!exists(&mut r1, "a").await, "partial hold left on server 1");
    assert!(!exists(&mut r1, "c").await, "partial hold left on server 1");
    assert!(exists(&mut r2, "b").await);
    assert_eq!(c1.watched_locks(), 0);
    assert!(m.try_acquire().await.unwrap().is_none());
    assert!(!exists(&mut r1, "a").await && !exists(&mut r1, "c").await);
    // Once "b" is free, a waiting acquire gets all three.
    let waiter = {
        let m = m.clone();
        tokio::spawn(async move { m.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    other.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(g.guards().len(), 3);
    // The watchdogs renew every member beyond the lease (300 ms).
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(g.lost().check().is_none());
    assert!(exists(&mut r1, "a").await && exists(&mut r1, "c").await && exists(&mut r2, "b").await);
    // One member lost → the group signal fires.
    let lost = g.lost();
    c2.lock("b").force_unlock().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), lost)
        .await
        .unwrap();
    assert_eq!(reason, LostReason::NotHeld);
    assert!(
        matches!(g.release().await, Err(dlock_client::Error::NotHeld(_))),
        "b was not held any more"
    );
    assert!(!exists(&mut r1, "a").await && !exists(&mut r1, "c").await);
}

both_backends!(multilock_rolls_back);

/// Opposite orders of the same two locks do not deadlock (canonical order).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multilock_canonical_order_no_deadlock() {
    let s1 = server(Backend::Native);
    let s2 = server(Backend::Native);
    let c1 = client(&s1, Backend::Native).await;
    let c2 = client(&s2, Backend::Native).await;
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (c1, c2) = (c1.clone(), c2.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let m = if i % 2 == 0 {
                    MultiLock::new([c1.lock("x"), c2.lock("y")])
                } else {
                    MultiLock::new([c2.lock("y"), c1.lock("x")])
                };
                let g = m.acquire().await.unwrap();
                tokio::task::yield_now().await;
                g.release().await.unwrap();
            }
        }));
    }
    let all = futures_join(tasks);
    tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("deadlock");
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        t.await.unwrap();
    }
}

async fn five() -> (Vec<Server>, Vec<Client>) {
    let servers: Vec<Server> = (0..5).map(|_| server(Backend::Native)).collect();
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(client(s, Backend::Native).await);
    }
    (servers, clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_quorum_of_five() {
    let (mut servers, clients) = five().await;
    let lease = Duration::from_secs(5);
    let red = RedLock::on(&clients, "job").node_timeout(Duration::from_millis(200));
    assert_eq!(red.quorum(), 3);
    // All up: granted everywhere; a second contender fails and leaves nothing of its own.
    let g = red.try_acquire(lease).await.unwrap().expect("5/5");
    assert_eq!(g.granted(), 5);
    assert!(g.validity() < lease && g.validity() > lease - Duration::from_millis(400));
    let rival = RedLock::on(&clients, "job").node_timeout(Duration::from_millis(200));
    assert!(rival
        .try_acquire_for(Duration::from_millis(300), lease)
        .await
        .unwrap()
        .is_none());
    g.release().await.unwrap();
    assert_eq!(servers_holding(&mut servers, "job"), 0);

    // Two servers stopped: 3 of 5 still make a quorum.
    servers[0].kill();
    servers[1].kill();
    let g = red
        .try_acquire(lease)
        .await
        .unwrap()
        .expect("3/5 is a quorum");
    assert_eq!(g.granted(), 3);
    assert!(g.is_valid());
    assert_eq!(servers_holding(&mut servers, "job"), 3);
    g.release().await.unwrap();
    assert_eq!(servers_holding(&mut servers, "job"), 0);

    // Three stopped: no quorum, and nothing left behind on the two that granted.
    servers[2].kill();
    assert!(red
        .try_acquire_for(Duration::from_millis(500), lease)
        .await
        .unwrap()
        .is_none());
    assert_eq!(servers_holding(&mut servers, "job"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_validity_lost_signal() {
    let (_servers, clients) = five().await;
    let red = RedLock::on(&clients, "short");
    let g = red
        .try_acquire(Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        red.drift(Duration::from_millis(300)),
        Duration::from_millis(5)
    );
    let t = tokio::time::Instant::now();
    assert_eq!(g.lost().await, LostReason::LeaseExpired);
    let el = t.elapsed();
    assert!(
        el < Duration::from_millis(300) + dlock_testutil::LATENESS_BOUND,
        "validity of 300 ms lost after {el:?}"
    );
    assert!(!g.is_valid());
}
