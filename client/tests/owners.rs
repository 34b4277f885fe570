//! Owners that fail, through the client (native backend): holds bound to the client's
//! connection (BIND) free after the grace when the process dies and survive a reconnect;
//! lock-delay; the typed deadlock error.

use crate::support;

use std::time::{Duration, Instant};

use dlock_client::{Client, Error, LockKind};
use dlock_testutil::workers::{is_worker, param, report, spawn_worker};
use dlock_testutil::{dlock_info_int, leases_cut, waiters};
use redis::aio::MultiplexedConnection;
use support::*;

const GRACE: Duration = Duration::from_millis(500);
/// Long against the grace: a lock freed well before it was freed by the grace.
const LONG_LEASE: Duration = Duration::from_secs(20);

/// A native client with a long lease and the given bind grace.
async fn bound(server: &Server, grace: Option<Duration>) -> Client {
    Client::builder(server.url())
        .lease(LONG_LEASE)
        .response_timeout(Duration::from_millis(500))
        .bind_grace(grace)
        .build()
        .await
        .expect("client")
}

/// Polls `f` every 5 ms until it answers true; panics naming `what` after `limit`.
async fn until<F, Fut>(limit: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !f().await {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Kills every connection but `c`'s own (the client under test loses its shared and pooled
/// connections at once, as on a network reset).
async fn kill_other_connections(c: &mut MultiplexedConnection) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(c)
        .await
        .unwrap()
}

/// A separate process holding two locks through the client: `direct` granted at once (on
/// the shared connection) and `queued` granted from the server's queue (on a dedicated
/// connection); then it closes that dedicated connection (a cancelled wait on `busy`
/// reuses and drops it) and holds until killed.
#[test]
fn worker_client_holder() {
    if !is_worker("client-holder") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::builder(param("OWNERS_URL"))
            .lease(LONG_LEASE)
            .bind_grace(Some(GRACE))
            .build()
            .await
            .unwrap();
        let direct = client.lock("direct").try_acquire().await.unwrap().unwrap();
        report("direct", 1);
        let queued = client.lock("queued").acquire().await.unwrap();
        report("queued", 1);
        let busy_lock = client.lock("busy");
        let busy = busy_lock.try_acquire_for(Duration::from_secs(30), None);
        assert!(tokio::time::timeout(Duration::from_millis(300), busy)
            .await
            .is_err());
        report("cancelled", 1);
        tokio::time::sleep(Duration::from_secs(60)).await; // killed by the parent
        drop((direct, queued));
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_its_locks_after_the_grace_not_the_lease() {
    let srv = Server::start();
    let mut c = raw(&srv).await;
    let me = bound(&srv, Some(GRACE)).await;
    let queued_block = me.lock("queued").try_acquire().await.unwrap().unwrap();
    let _busy = me.lock("busy").try_acquire().await.unwrap().unwrap();
    let mut holder = spawn_worker(
        "worker_client_holder",
        "client-holder",
        &[("OWNERS_URL", srv.url())],
    );
    holder.expect_report("direct", Duration::from_secs(20));
    // The holder waits for `queued` in the server's queue; free it, so it is granted there.
    until(Duration::from_secs(5), "the holder queued", || {
        std::future::ready(waiters(&mut srv.connection(), "queued") == 1)
    })
    .await;
    queued_block.release().await.unwrap();
    holder.expect_report("queued", Duration::from_secs(5));
    holder.expect_report("cancelled", Duration::from_secs(5));
    // The dedicated connection the queued grant came on is closed now; the hold was rebound
    // to the shared connection, so nothing was cut and both holds outlive the grace.
    tokio::time::sleep(GRACE * 3).await;
    assert_eq!(
        leases_cut(&mut srv.connection()),
        0,
        "a hold was cut while its client lives"
    );
    assert!(exists(&mut c, "direct").await && exists(&mut c, "queued").await);
    assert!(pttl(&mut c, "queued").await > GRACE.as_millis() as i64 * 4);

    // kill -9: both free after the grace, far before the 20 s lease.
    let a = me.lock("direct");
    let waiting = tokio::spawn(async move {
        let g = a.acquire().await.unwrap();
        (Instant::now(), g)
    });
    until(Duration::from_secs(5), "the parent queued", || {
        std::future::ready(waiters(&mut srv.connection(), "direct") == 1)
    })
    .await;
    let killed = Instant::now();
    holder.kill9();
    let (at, g) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("granted after the kill")
        .unwrap();
    let took = at - killed;
    println!("kill -9 of a client process (bind grace {GRACE:?}, lease {LONG_LEASE:?}): next grant {took:?} after the kill");
    assert!(
        took >= GRACE / 2 && took < Duration::from_secs(5),
        "granted {took:?} after kill -9"
    );
    until(Duration::from_secs(5), "queued freed", || async {
        !exists(&mut c.clone(), "queued").await
    })
    .await;
    assert_eq!(leases_cut(&mut srv.connection()), 2);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_connection_is_killed_rebinds_within_the_grace() {
    let srv = Server::start();
    let mut c = raw(&srv).await;
    let client = bound(&srv, Some(GRACE)).await;
    let direct = client.lock("k").acquire().await.unwrap();
    let sem = client.semaphore("s", 3).acquire(2).await.unwrap();
    let w = client.rwlock("rw").write().acquire().await.unwrap();
    assert!(kill_other_connections(&mut c).await >= 1);
    // The server cut the three leases to the grace; the client noticed the close,
    // connected again and renewed with BIND: the leases are long again, the holds bound anew.
    until(Duration::from_secs(5), "the cut counted", || async {
        leases_cut(&mut srv.connection()) == 3
    })
    .await;
    tokio::time::sleep(GRACE * 3).await;
    for key in ["k", "s", "rw"] {
        let left = pttl(&mut c, key).await;
        assert!(
            left > (LONG_LEASE / 2).as_millis() as i64,
            "{key}: lease {left} ms after the reconnect"
        );
    }
    assert!(direct.lost().check().is_none());
    // Rebound: closing the new connection cuts again, and the holds survive again.
    assert!(kill_other_connections(&mut c).await >= 1);
    tokio::time::sleep(GRACE * 3).await;
    assert!(exists(&mut c, "k").await);
    direct.release().await.unwrap();
    sem.release().await.unwrap();
    w.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_bind_a_closed_connection_cuts_nothing() {
    let srv = Server::start();
    let mut c = raw(&srv).await;
    let client = Client::builder(srv.url())
        .lease(LONG_LEASE)
        .no_bind()
        .build()
        .await
        .unwrap();
    assert_eq!(client.config().bind_grace(), None);
    let g = client.lock("k").acquire().await.unwrap();
    assert!(kill_other_connections(&mut c).await >= 1);
    // A cut would take the lease to 0 at once (grace 0 is not sent: nothing is); give the
    // server time to see the close.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(leases_cut(&mut srv.connection()), 0);
    assert!(pttl(&mut c, "k").await > (LONG_LEASE / 2).as_millis() as i64);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_hold_with_lock_delay_keeps_the_next_holder_out() {
    let srv = Server::start();
    let client = bound(&srv, None).await;
    let lease = Duration::from_millis(300);
    let delay = Duration::from_millis(1000);
    let lock = client.lock("ld").lock_delay(delay);
    let held = Instant::now();
    let g = lock
        .try_acquire_for(Duration::ZERO, Some(lease))
        .await
        .unwrap();
    assert!(g.is_some());
    // Another owner waits; the hold lapses (no release), then the delay keeps it out.
    let next = client.lock("ld");
    let got = tokio::time::timeout(Duration::from_secs(8), next.acquire())
        .await
        .expect("granted after the delay")
        .unwrap();
    let took = held.elapsed();
    println!("lease {lease:?} + lock-delay {delay:?}: next grant {took:?} after the grant");
    assert!(
        took >= lease + delay - Duration::from_millis(50),
        "granted {took:?} after a {lease:?} lease with a {delay:?} delay"
    );
    assert!(took < lease + delay + Duration::from_secs(3));
    got.release().await.unwrap();
    // A released hold leaves no delay.
    let g = lock.try_acquire().await.unwrap().unwrap();
    g.release().await.unwrap();
    assert!(client.lock("ld").try_acquire().await.unwrap().is_some());
    // The write side takes it; readers and semaphores do not.
    let rw = client.rwlock("rw");
    let w = rw.write().lock_delay(delay).acquire().await.unwrap();
    w.release().await.unwrap();
    let r = rw.read().lock_delay(delay).try_acquire().await;
    assert!(matches!(r, Err(Error::Config(_))), "{r:?}");
    assert_eq!(rw.read().kind(), LockKind::Read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_owner_cycle_is_a_deadlock_error() {
    let srv = Server::start();
    let client = bound(&srv, Some(GRACE)).await;
    let (a, b) = (client.owner(), client.owner());
    let a1 = client.lock_as("k1", &a).acquire().await.unwrap();
    let b2 = client.lock_as("k2", &b).acquire().await.unwrap();
    let a_waits = {
        let l = client.lock_as("k2", &a);
        tokio::spawn(async move { l.try_acquire_for(Duration::from_secs(8), None).await })
    };
    until(Duration::from_secs(5), "a queued on k2", || async {
        client.waiters("k2").await.unwrap().len() == 1
    })
    .await;
    let started = Instant::now();
    let r = client
        .lock_as("k1", &b)
        .try_acquire_for(Duration::from_secs(8), None)
        .await;
    match &r {
        Err(Error::Deadlock { key, cycle }) => {
            assert_eq!(key, "k1");
            assert!(cycle.contains(a.id()) && cycle.contains(b.id()), "{cycle}");
            assert!(cycle.starts_with(b.id()), "{cycle}");
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!r.unwrap_err().is_connection());
    // The refused request changed nothing: a still waits and gets k2 once b lets it go.
    b2.release().await.unwrap();
    let g = a_waits.await.unwrap().unwrap().expect("a granted k2");
    g.release().await.unwrap();
    a1.release().await.unwrap();
}

#[test]
fn the_blocking_api_sends_lock_delay_and_binds() {
    let srv = Server::start();
    let client =
        dlock_client::blocking::Client::build(Client::builder(srv.url()).bind_grace(Some(GRACE)))
            .unwrap();
    let lease = Duration::from_millis(200);
    let g = client
        .lock("bl")
        .lock_delay(Duration::from_secs(5))
        .try_acquire_for(Duration::ZERO, Some(lease))
        .unwrap();
    assert!(g.is_some());
    let mut c = srv.connection();
    // The lease lapses; the delay then runs (DLOCK.INFO's delay-ms).
    wait_for(Duration::from_secs(5), "the lock-delay running", || {
        let v: redis::Value = redis::cmd("DLOCK.INFO").arg("bl").query(&mut c).ok()?;
        (dlock_info_int(&v, "delay-ms")? > 1000).then_some(())
    });
    assert!(client.lock("bl").try_acquire().unwrap().is_none());
    // A watchdog-held blocking lock is bound: its lease is cut when the connection closes.
    let held = client.lock("held").acquire().unwrap();
    let renewals = |c: &mut redis::Connection| {
        dlock_testutil::info_int(c, "dlock", "dlock_renewals").expect("dlock_renewals")
    };
    let renewed_before = renewals(&mut c);
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    assert!(killed >= 1);
    wait_for(Duration::from_secs(5), "the cut counted", || {
        (leases_cut(&mut c) == 1).then_some(())
    });
    // The client connects again and rebinds the hold within the grace (`DLOCK.RENEW ...
    // BIND`); the release then goes over the new connection. (Sent before the client saw the
    // close, it could fail with a connection error: a release is never re-sent by itself.)
    wait_for(Duration::from_secs(5), "the hold rebound", || {
        (renewals(&mut c) > renewed_before).then_some(())
    });
    held.release().unwrap();
}
