//! Scenario 3, hand-off latency: the time from a release to the next holder's reply.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::report::Report;
use crate::resp::encode;
use crate::stats::latency_us;
use crate::{Backend, Ctx};

use super::{locker::Locker, rounds, CONTENDED};

pub async fn handoff(ctx: &Ctx, rep: &mut Report) {
    let backends = CONTENDED;
    let sc = "handoff";
    let hold = Duration::from_millis(2);
    eprintln!(
        "scenario {sc}: 2 workers ping-pong one lock (hold {hold:?}), {} hand-offs x {} reps",
        ctx.cfg.handoffs, ctx.cfg.reps
    );
    for b in rounds(&backends, ctx.cfg.reps) {
        handoff_run(ctx, b, sc, hold, rep).await;
    }
    rep.ratio(&format!("{sc}-p50"), sc, "p50_us", "native", "lua");
    rep.ratio(&format!("{sc}-p99"), sc, "p99_us", "native", "lua");
    rep.ratio(&format!("{sc}-p50"), sc, "p50_us", "native-client", "lua");
}

/// One backend's hand-offs: their latencies, and the errors, into `rep`.
async fn handoff_run(ctx: &Ctx, b: Backend, sc: &str, hold: Duration, rep: &mut Report) {
    let key = format!("bench:handoff:{}", b.name());
    let mut ctrl = ctx.ctrl(b).await;
    ctrl.call(&encode(&[b"DEL", key.as_bytes()])).await.unwrap();
    let n = ctx.cfg.handoffs;
    let go: Arc<[tokio::sync::Notify; 2]> = Arc::new(Default::default());
    let rel_at = Arc::new(Mutex::new(None::<Instant>));
    let done = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(Mutex::new(vec![]));
    let mut set = JoinSet::new();
    for w in 0..2usize {
        let mut l = Locker::new(ctx, b, &key, "bench:unused", 200 + w).await;
        let (go, rel_at, done, count, errors) = (
            go.clone(),
            rel_at.clone(),
            done.clone(),
            count.clone(),
            errors.clone(),
        );
        set.spawn(async move {
            let mut lats = vec![];
            loop {
                go[w].notified().await;
                if done.load(Relaxed) {
                    break;
                }
                if let Err(e) = l.acquire().await {
                    errors.lock().unwrap().push(e);
                    done.store(true, Relaxed);
                    go[1 - w].notify_one();
                    break;
                }
                let granted = Instant::now();
                if let Some(t) = rel_at.lock().unwrap().take() {
                    lats.push(granted - t);
                }
                let k = count.fetch_add(1, Relaxed) + 1;
                let last = k > n;
                if !last {
                    // The other worker starts waiting while this one holds.
                    go[1 - w].notify_one();
                }
                tokio::time::sleep(hold).await;
                *rel_at.lock().unwrap() = Some(Instant::now());
                if let Err(e) = l.release().await {
                    errors.lock().unwrap().push(e);
                }
                if last {
                    done.store(true, Relaxed);
                    go[1 - w].notify_one();
                    break;
                }
            }
            lats
        });
    }
    go[0].notify_one();
    let mut lats = vec![];
    while let Some(j) = set.join_next().await {
        lats.extend(j.expect("worker"));
    }
    for e in errors.lock().unwrap().iter().take(3) {
        rep.fails.push(format!("{sc} {}: {e}", b.name()));
    }
    let (p50, p99, max) = latency_us(&lats);
    rep.add(sc, b.name(), "p50_us", p50);
    rep.add(sc, b.name(), "p99_us", p99);
    rep.add(sc, b.name(), "max_us", max);
}
