//! Shared test helpers: a server and a client per backend, with short leases.
#![allow(dead_code, unused_imports)]

pub mod cluster;

use std::time::Duration;

use dlock_client::{Backend, Client, Retry};
pub use dlock_testutil::{wait_for, Server};

pub const LEASE: Duration = Duration::from_millis(300);
pub const INTERVAL: Duration = Duration::from_millis(100);

/// A server for `backend`: with the module for Native, plain Redis for Script.
pub fn server(backend: Backend) -> Server {
    match backend {
        Backend::Script => Server::builder().without_module().start(),
        _ => Server::start(),
    }
}

pub fn builder(server: &Server, backend: Backend) -> dlock_client::ClientBuilder {
    Client::builder(server.url())
        .backend(backend)
        .lease(LEASE)
        .renew_interval(INTERVAL)
        .response_timeout(Duration::from_millis(500))
        .retry(Retry::new(
            1,
            Duration::from_millis(20),
            Duration::from_millis(50),
        ))
}

pub async fn client(server: &Server, backend: Backend) -> Client {
    builder(server, backend).build().await.expect("client")
}

/// A server for `backend`, a client of it and a raw connection: most tests' first line.
pub async fn setup(backend: Backend) -> (Server, Client, redis::aio::MultiplexedConnection) {
    let s = server(backend);
    let c = client(&s, backend).await;
    let r = raw(&s).await;
    (s, c, r)
}

/// Wait until `channel` has `n` subscribers (`PUBSUB NUMSUB`).
pub async fn until_numsub(r: &redis::aio::MultiplexedConnection, channel: &str, n: i64) {
    until(
        Duration::from_secs(5),
        &format!("{n} subscriber(s) of {channel}"),
        || {
            let (mut r, channel) = (r.clone(), channel.to_string());
            async move { numsub(&mut r, &channel).await == n }
        },
    )
    .await;
}

pub async fn raw(server: &Server) -> redis::aio::MultiplexedConnection {
    server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// `HGET key field` as a number (a hold count, a lease end).
pub async fn hget(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
    field: &str,
) -> Option<i64> {
    hget_as(c, key, field).await
}

/// `HGET key field`, as the caller's type.
pub async fn hget_as<T: redis::FromRedisValue>(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
    field: &str,
) -> T {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(c)
        .await
        .unwrap()
}

pub async fn exists(c: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query_async(c).await.unwrap();
    n == 1
}

/// `SET key x`: a value that is not a lock (every lock command on it answers WRONGTYPE).
pub async fn set_string(c: &mut redis::aio::MultiplexedConnection, key: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("x")
        .query_async(c)
        .await
        .unwrap();
}

/// `DEL key`: the keys deleted.
pub async fn del(c: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("DEL").arg(key).query_async(c).await.unwrap()
}

/// Wait until `key` no longer exists (its last hold released or lapsed).
pub async fn until_gone(r: &redis::aio::MultiplexedConnection, key: &str, what: &str) {
    until(Duration::from_secs(3), what, || {
        let (key, mut r) = (key.to_string(), r.clone());
        async move { !exists(&mut r, &key).await }
    })
    .await;
}

pub async fn pttl(c: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(c).await.unwrap()
}

/// Run `$name(backend)` for both backends.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod native {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(dlock_client::Backend::Native).await
                }
            )*
        }
        mod script {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(dlock_client::Backend::Script).await
                }
            )*
        }
    };
}

/// `waiters` of `DLOCK.INFO key`.
pub async fn info_waiters(c: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    info_int(c, key, "waiters").await
}

/// An integer field of `DLOCK.INFO key`.
pub async fn info_int(c: &mut redis::aio::MultiplexedConnection, key: &str, field: &str) -> i64 {
    let v: redis::Value = redis::cmd("DLOCK.INFO")
        .arg(key)
        .query_async(c)
        .await
        .unwrap();
    dlock_testutil::dlock_info_int(&v, field)
        .unwrap_or_else(|| panic!("DLOCK.INFO {key} has no integer field {field}: {v:?}"))
}

/// Wait until a client waits on `key`: in the module's queue (native), or subscribed to
/// its unlock channel (script).
pub async fn until_waiting(r: &redis::aio::MultiplexedConnection, b: Backend, key: &str) {
    let channel =
        dlock_client::scripts::channel_name(dlock_client::scripts::DEFAULT_CHANNEL_PREFIX, key);
    until(Duration::from_secs(5), "a client to wait", || {
        let mut r = r.clone();
        let (key, channel) = (key.to_string(), channel.clone());
        async move {
            if b == Backend::Native {
                info_waiters(&mut r, &key).await >= 1
            } else {
                numsub(&mut r, &channel).await >= 1
            }
        }
    })
    .await;
}

/// Subscribers of `channel` (`PUBSUB NUMSUB`).
pub async fn numsub(c: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
    let v: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(c)
        .await
        .unwrap();
    v.1
}

/// Poll `f` every 2 ms until it answers true, or panic after `timeout` with `what`.
pub async fn until<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A client whose leases last 30 s: a grant it forgot (e.g. after a cancelled acquire) would
/// stay visible for the whole test.
pub async fn long_lease_client(server: &Server, backend: Backend) -> Client {
    builder(server, backend)
        .lease(Duration::from_secs(30))
        .renew_interval(Duration::from_secs(10))
        .build()
        .await
        .unwrap()
}

/// `rounds` rounds on a server of its own, one key each (`c0`, `c1`, ...):
/// `round(holder, waiter, key)` takes the key with the holder's client and starts a waiting
/// acquire of it with the waiter's (a task), answering that task and the holder's release;
/// the round waits until the acquire queues, cancels it around the release
/// ([`cancel_around_release`]) and waits until nobody holds the key (`what` is held: "hold",
/// "permit"). The waiter's client has a long lease, so a forgotten grant would stay for
/// 30 s; at the end it watches nothing. Prints how many rounds were granted before the
/// cancel.
pub async fn cancel_rounds<G, R, F, Fut>(b: Backend, rounds: usize, what: &str, mut round: F)
where
    G: Send + 'static,
    R: std::future::Future<Output = dlock_client::Result<()>> + Send + 'static,
    F: FnMut(Client, Client, String) -> Fut,
    Fut: std::future::Future<Output = (tokio::task::JoinHandle<dlock_client::Result<G>>, R)>,
{
    let s = server(b);
    let holder = client(&s, b).await;
    let waiter = long_lease_client(&s, b).await;
    let r = &raw(&s).await;
    let mut granted_before_cancel = 0;
    for n in 0..rounds {
        let key = format!("c{n}");
        let (task, release) = round(holder.clone(), waiter.clone(), key.clone()).await;
        until_waiting(r, b, &key).await;
        if cancel_around_release(task, release).await {
            granted_before_cancel += 1;
        }
        until_gone(r, &key, &format!("round {n}: no {what} left on {key}")).await;
    }
    assert_eq!(waiter.watched_locks(), 0);
    eprintln!("{b:?}: {granted_before_cancel} of {rounds} rounds granted before the cancel");
}

/// Cancels `task` (a pending acquire) and runs `release` (the holder's release) at random
/// moments within 1.5 ms of each other, around the hand-off. True when the acquire was
/// granted before the cancel (its guard is dropped here, which gives the grant back).
pub async fn cancel_around_release<G: Send + 'static>(
    task: tokio::task::JoinHandle<dlock_client::Result<G>>,
    release: impl std::future::Future<Output = dlock_client::Result<()>> + Send + 'static,
) -> bool {
    use rand::Rng;
    let (before, after) = {
        let mut rng = rand::thread_rng();
        (rng.gen_range(0..1500u64), rng.gen_range(0..1500u64))
    };
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_micros(before)).await;
        release.await
    });
    tokio::time::sleep(Duration::from_micros(after)).await;
    task.abort();
    release.await.unwrap().unwrap();
    match task.await {
        Ok(g) => {
            drop(g.unwrap());
            true
        }
        Err(e) => {
            assert!(e.is_cancelled());
            false
        }
    }
}
