//! The client contract (docs/CLIENTS.md#the-client-contract) as the Rust client keeps it:
//! "is it still held?" is answered from the clock at the moment of asking, a bound hold ends
//! a grace after its connection was last known open, a waited grant is confirmed, a guard
//! can be renewed at will. The whole contract is also run by the conformance suite
//! (`cargo test -p dlock-conformance`).

use crate::support;

use std::process::Command;
use std::time::Duration;

use dlock_client::{Backend, Client, Error, LostReason};
use dlock_testutil::workers::{is_worker, param, report, spawn_worker, unix_ms};
use support::{raw, server};

const GRACE: Duration = Duration::from_millis(300);

/// The worker of [`a_stopped_holder_whose_connections_closed_reports_lost_on_resume`]: holds
/// a bound lock (grace 300 ms, lease 5 s) and asks "still held?" every millisecond from a
/// plain thread, reporting the last "held" answer once the answer turns to "lost".
#[test]
fn stopped_holder_worker() {
    if !is_worker("stopped-holder") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_client, guard) = rt.block_on(async {
        let c = Client::builder(param("URL"))
            .lease(Duration::from_secs(5))
            .bind_grace(Some(GRACE))
            .build()
            .await
            .unwrap();
        let g = c.lock("k").acquire().await.unwrap();
        (c, g)
    });
    report("granted", 1);
    let lost = guard.lost();
    let mut last_held = unix_ms();
    loop {
        let t = unix_ms();
        match lost.check() {
            None => last_held = t,
            Some(r) => {
                report("lost", format!("{last_held} {t} {r:?}"));
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_secs(30));
}

/// A holder process is stopped (SIGSTOP: a GC or VM pause looks the same) while its
/// connections are closed: the server cuts the bound hold to the grace and hands the lock
/// on. On resume the first answer is already "lost": the last "held" answer came before the
/// process was continued. (Counting the grace from when the client *notices* the close, as
/// before, answered "held" for the first milliseconds after resuming, while another client
/// held the lock.)
#[test]
fn a_stopped_holder_whose_connections_closed_reports_lost_on_resume() {
    let s = server(Backend::Native);
    let mut w = spawn_worker(
        "stopped_holder_worker",
        "stopped-holder",
        &[("URL", s.url())],
    );
    w.expect_report("granted", Duration::from_secs(20));
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .arg(sig)
            .arg(w.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    };
    signal("-STOP");
    let mut c = s.connection();
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut c)
        .unwrap();
    assert!(killed >= 1, "the worker's connections closed");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let other = rt.block_on(async {
        let c = Client::open(s.url()).await.unwrap();
        let g = c
            .lock("k")
            .try_acquire_for(Duration::from_secs(10), None)
            .await
            .unwrap()
            .expect("granted after the grace");
        (c, g)
    });
    let resumed = unix_ms();
    signal("-CONT");
    let r = w.expect_report("lost", Duration::from_secs(10));
    let f: Vec<&str> = r.split(' ').collect();
    let (last_held, lost_at): (f64, f64) = (f[0].parse().unwrap(), f[1].parse().unwrap());
    assert!(
        last_held < resumed,
        "reported held {:.1} ms after resuming while another client held the lock",
        last_held - resumed
    );
    assert!(lost_at - resumed < 1000.0, "{r}");
    assert!(other.1.lost().check().is_none());
    w.kill9();
}

/// With nothing else to send, a client keeps its bound holds valid with a sign of life
/// (one PING a third of the grace): held long after the grace, with a lease far longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_of_life_keeps_bound_holds_valid_between_renewals() {
    let s = server(Backend::Native);
    let c = Client::builder(s.url())
        .lease(Duration::from_secs(30))
        .bind_grace(Some(GRACE))
        .build()
        .await
        .unwrap();
    let g = c.lock("k").acquire().await.unwrap();
    // Renewals come every 10 s; the grace is 0.3 s.
    for _ in 0..10 {
        tokio::time::sleep(GRACE).await;
        assert_eq!(g.lost().check(), None);
    }
    g.release().await.unwrap();
}

/// A grant after a wait longer than its lease is confirmed before it is returned: held well
/// after (the watchdog renews it), and its lease on the server is a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_a_wait_longer_than_its_lease_is_not_born_lost() {
    let s = server(Backend::Native);
    let lease = Duration::from_millis(600);
    let c = Client::builder(s.url()).lease(lease).build().await.unwrap();
    let holder = c.lock("k").acquire().await.unwrap();
    let lock = c.lock("k");
    let waiting = tokio::spawn(async move { lock.acquire().await });
    tokio::time::sleep(lease * 2).await;
    holder.release().await.unwrap();
    let g = waiting.await.unwrap().unwrap();
    assert_eq!(g.lost().check(), None);
    let mut r = raw(&s).await;
    let pttl = support::pttl(&mut r, "k").await;
    assert!(pttl > 400, "a fresh lease on the server: {pttl} ms");
    tokio::time::sleep(lease * 2).await;
    assert_eq!(g.lost().check(), None);
    g.release().await.unwrap();
}

/// `renew()` sets the lease again now; a deleted lock answers `NotHeld` and is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_renew_sets_the_lease_or_reports_the_loss() {
    let s = server(Backend::Native);
    let c = Client::open(s.url()).await.unwrap();
    let g = c
        .lock("k")
        .acquire_with_lease(Duration::from_secs(2))
        .await
        .unwrap();
    let mut r = raw(&s).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(support::pttl(&mut r, "k").await <= 1500);
    g.renew().await.unwrap();
    assert!(support::pttl(&mut r, "k").await > 1500);
    let _: () = redis::cmd("DEL")
        .arg("k")
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(matches!(g.renew().await, Err(Error::NotHeld(_))));
    assert_eq!(g.lost().check(), Some(LostReason::NotHeld));
}
