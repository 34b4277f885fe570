//! Native and script clients on one key (a server with the module): they exclude each other
//! and wake each other's waiters.

use crate::support;

use std::time::{Duration, Instant};

use dlock_client::{Backend, Client};
use support::*;

async fn pair(s: &Server) -> (Client, Client) {
    // Long lease: only a wake-up (not an expiry) can let a waiter in quickly.
    let n = Client::builder(s.url())
        .backend(Backend::Native)
        .build()
        .await
        .unwrap();
    let sc = Client::builder(s.url())
        .backend(Backend::Script)
        .build()
        .await
        .unwrap();
    assert!(n.is_native() && !sc.is_native());
    (n, sc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_detects_backend() {
    let s = Server::start();
    assert!(Client::open(s.url()).await.unwrap().is_native());
    let p = Server::builder().without_module().start();
    assert!(!Client::open(p.url()).await.unwrap().is_native());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_and_script_exclude_each_other() {
    let s = Server::start();
    let (n, sc) = pair(&s).await;
    let g = n.lock("x").acquire().await.unwrap();
    assert!(sc.lock("x").try_acquire().await.unwrap().is_none());
    g.release().await.unwrap();
    let g = sc.lock("x").acquire().await.unwrap();
    assert!(n.lock("x").try_acquire().await.unwrap().is_none());
    // The script client's watchdog renews with its own script; the module accepts the layout.
    g.release().await.unwrap();
    assert!(n.lock("x").try_acquire().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_waiter_woken_by_native_release() {
    let s = Server::start();
    let (n, sc) = pair(&s).await;
    let g = n.lock("wake").acquire().await.unwrap(); // 30 s lease
    let waiter = tokio::spawn(async move {
        let t = Instant::now();
        let g = sc
            .lock("wake")
            .try_acquire_for(Duration::from_secs(20), None)
            .await
            .unwrap();
        (g.is_some(), t.elapsed())
    });
    // Wait until the script waiter is subscribed to the unlock channel.
    until_numsub(&raw(&s).await, "redisson_lock__channel:{wake}", 1).await;
    let t = Instant::now();
    g.release().await.unwrap();
    let (got, _) = waiter.await.unwrap();
    assert!(got);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "woken after {:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_waiter_woken_by_script_release() {
    let s = Server::start();
    let (n, sc) = pair(&s).await;
    let g = sc.lock("wake2").acquire().await.unwrap(); // 30 s lease
    let waiter = tokio::spawn(async move {
        let g = n
            .lock("wake2")
            .try_acquire_for(Duration::from_secs(20), None)
            .await
            .unwrap();
        g.is_some()
    });
    wait_for(Duration::from_secs(5), "native waiter blocked", || {
        let mut c = s.connection();
        let info: String = redis::cmd("INFO").arg("clients").query(&mut c).unwrap();
        info.lines()
            .any(|l| l.trim() == "blocked_clients:1")
            .then_some(())
    });
    let t = Instant::now();
    g.release().await.unwrap();
    assert!(waiter.await.unwrap());
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "woken after {:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_waiter_woken_by_script_release_on_plain_redis() {
    let s = Server::builder().without_module().start();
    let a = Client::builder(s.url())
        .backend(Backend::Script)
        .build()
        .await
        .unwrap();
    let b = a.clone();
    let g = a.lock("p").acquire().await.unwrap();
    let waiter = tokio::spawn(async move { b.lock("p").acquire().await.unwrap().hold_count() });
    until_numsub(&raw(&s).await, "redisson_lock__channel:{p}", 1).await;
    let t = Instant::now();
    g.release().await.unwrap();
    assert_eq!(waiter.await.unwrap(), 1);
    assert!(t.elapsed() < Duration::from_secs(3));
    // The waiter's subscription goes away after it got the lock.
    wait_for(Duration::from_secs(5), "unsubscribed", || {
        let mut c = s.connection();
        let v: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redisson_lock__channel:{p}")
            .query(&mut c)
            .unwrap();
        (v.1 == 0).then_some(())
    });
}
