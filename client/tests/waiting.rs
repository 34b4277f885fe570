//! Waiting: a wait without limit keeps its place for as long as it takes, and a cancelled
//! acquire leaves no hold behind.

mod support;

use std::time::Duration;

use dlock_client::{scripts, Backend};
use support::*;
use tokio::time::Instant;

/// A holder renewed by its watchdog keeps the lock for 3× the response time-out; the
/// waiter's single request stays queued the whole time (the module's DLOCK.INFO shows
/// exactly one waiter at every sample; the script backend stays subscribed) and is granted
/// right after the release.
async fn wait_outlasts_response_timeout(b: Backend) {
    let s = server(b);
    let holder = client(&s, b).await;
    let waiter = client(&s, b).await;
    let response_timeout = waiter.config().response_timeout();
    let mut r = raw(&s).await;
    let g = holder.lock("q").acquire().await.unwrap();
    let w = waiter.clone();
    let task = tokio::spawn(async move {
        let g = w.lock("q").acquire().await;
        (g, Instant::now())
    });
    let channel = scripts::channel_name(scripts::DEFAULT_CHANNEL_PREFIX, "q");
    let queued = |r: redis::aio::MultiplexedConnection| {
        let channel = channel.clone();
        async move {
            let mut r = r;
            if b == Backend::Native {
                info_waiters(&mut r, "q").await
            } else {
                numsub(&mut r, &channel).await
            }
        }
    };
    until(Duration::from_secs(5), "the waiter to queue", || {
        let r = r.clone();
        let q = queued(r);
        async move { q.await == 1 }
    })
    .await;
    let until_t = Instant::now() + response_timeout * 3;
    let mut samples = 0;
    while Instant::now() < until_t {
        assert_eq!(
            queued(r.clone()).await,
            1,
            "waiter count changed at sample {samples}"
        );
        assert!(!task.is_finished(), "the waiter gave up");
        samples += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(samples > 20, "only {samples} samples");
    assert!(g.lost().check().is_none(), "the holder lost the lock");
    let released = Instant::now();
    g.release().await.unwrap();
    let (got, at) = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("granted after the release")
        .unwrap();
    let got = got.expect("granted");
    let late = at - released;
    assert!(
        late < dlock_testutil::LATENESS_BOUND,
        "granted {late:?} after the release"
    );
    assert_eq!(got.hold_count(), 1);
    got.release().await.unwrap();
    assert!(!exists(&mut r, "q").await);
}

/// 50 rounds: an acquire waiting on a held lock is cancelled at a random moment around
/// the holder's release; afterwards nobody holds the lock (the waiter's client has a long
/// lease, so a forgotten grant would stay for 30 s).
async fn cancelled_acquire_leaves_no_hold(b: Backend) {
    let s = server(b);
    let holder = client(&s, b).await;
    let waiter = long_lease_client(&s, b).await;
    let r = raw(&s).await;
    let mut granted_before_cancel = 0;
    for round in 0..50 {
        let key = format!("c{round}");
        let g = holder.lock(key.as_str()).acquire().await.unwrap();
        let w = waiter.clone();
        let k = key.clone();
        let task = tokio::spawn(async move { w.lock(k).acquire().await });
        until_waiting(&r, b, &key).await;
        if cancel_around_release(task, g.release()).await {
            granted_before_cancel += 1;
        }
        let mut rc = r.clone();
        until(
            Duration::from_secs(3),
            &format!("round {round}: no hold left on {key}"),
            || {
                let key = key.clone();
                let mut rc = rc.clone();
                async move { !exists(&mut rc, &key).await }
            },
        )
        .await;
        assert!(!exists(&mut rc, &key).await);
    }
    assert_eq!(waiter.watched_locks(), 0);
    eprintln!("{b:?}: {granted_before_cancel} of 50 rounds granted before the cancel");
}

both_backends!(
    wait_outlasts_response_timeout,
    cancelled_acquire_leaves_no_hold
);
