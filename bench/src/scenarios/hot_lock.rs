//! Scenario 2, hot lock: many workers on one key; hand-offs per second, the wait each grant
//! took, and how many commands the acquire side sends per grant.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::task::JoinSet;

use crate::report::{num, Report};
use crate::resp::encode;
use crate::stats::{self, latency_us};
use crate::{Backend, Ctx};

use super::{locker::Locker, rounds, script_calls, CONTENDED};

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    last: AtomicUsize,
    handoffs: AtomicU64,
    grants: AtomicU64,
    errors: Mutex<Vec<String>>,
}

/// Workers contending for the one key.
const WORKERS: usize = 16;

pub async fn hot_lock(ctx: &Ctx, rep: &mut Report) {
    let backends = CONTENDED;
    let sc = "hot-lock";
    eprintln!(
        "scenario {sc}: {WORKERS} workers on one key, GET+SET a counter inside, {} reps of {:?}",
        ctx.cfg.reps, ctx.cfg.hot_dur
    );
    for b in rounds(&backends, ctx.cfg.reps) {
        hot_run(ctx, b, sc, rep).await;
    }
    let h = rep.ratio(sc, sc, "handoffs/s", "native", "lua");
    rep.ratio(sc, sc, "handoffs/s", "native-client", "lua");
    rep.ratio(sc, sc, "handoffs/s", "native", "setnx");
    let (p99, max) = (format!("{sc}-wait-p99"), format!("{sc}-wait-max"));
    let p = rep.ratio(&p99, sc, "wait_p99_us", "native", "lua");
    rep.ratio(&p99, sc, "wait_p99_us", "native-client", "lua");
    rep.ratio(&max, sc, "wait_max_us", "native", "lua");
    let c = rep.median(sc, "native", "acq_cmds/grant");
    rep.target("hot-lock handoffs/s native/lua", ">= 3", h, h >= 3.0);
    rep.target("hot-lock wait-p99 native/lua", "<= 0.3", p, p <= 0.3);
    rep.target(
        "hot-lock native acquire commands per grant",
        "== 1",
        c,
        (c - 1.0).abs() < 0.005,
    );
    rep.notes.push(format!(
        "hot lock: lua needs {} acquire-side commands per grant (lock script tries, SUBSCRIBE/UNSUBSCRIBE), native-client {}",
        num(rep.median(sc, "lua", "acq_cmds/grant")),
        num(rep.median(sc, "native-client", "acq_cmds/grant"))
    ));
}

/// One backend's run: its hand-off rate, waits and commands per grant into `rep`, and a
/// failure if the counter the workers bump shows two holders at once.
async fn hot_run(ctx: &Ctx, b: Backend, sc: &str, rep: &mut Report) {
    let key = format!("bench:hot:{}", b.name());
    let counter = format!("{key}:n");
    let mut ctrl = ctx.ctrl(b).await;
    ctrl.call(&encode(&[b"DEL", key.as_bytes(), counter.as_bytes()]))
        .await
        .unwrap();
    let sh = Arc::new(Shared {
        last: AtomicUsize::new(usize::MAX),
        ..Default::default()
    });
    let mut lockers = vec![];
    for w in 0..WORKERS {
        lockers.push(Locker::new(ctx, b, &key, &counter, 100 + w).await);
    }
    let cpu0 = stats::begin(&mut ctrl).await;
    let t0 = Instant::now();
    let mut set = JoinSet::new();
    for (w, mut l) in lockers.into_iter().enumerate() {
        let sh = sh.clone();
        set.spawn(async move {
            let mut waits = vec![];
            while !sh.stop.load(Relaxed) {
                let t = Instant::now();
                if let Err(e) = l.acquire().await {
                    sh.errors.lock().unwrap().push(e);
                    break;
                }
                waits.push(t.elapsed());
                let prev = sh.last.swap(w, Relaxed);
                if prev != w && prev != usize::MAX {
                    sh.handoffs.fetch_add(1, Relaxed);
                }
                let inside = l.bump().await;
                let out = l.release().await;
                if let Err(e) = inside.and(out) {
                    sh.errors.lock().unwrap().push(e);
                    break;
                }
                sh.grants.fetch_add(1, Relaxed);
            }
            (waits, l)
        });
    }
    tokio::time::sleep(ctx.cfg.hot_dur).await;
    sh.stop.store(true, Relaxed);
    let mut waits = vec![];
    let mut keep = vec![];
    while let Some(j) = set.join_next().await {
        let (w, l) = j.expect("worker");
        waits.extend(w);
        keep.push(l);
    }
    let el = t0.elapsed().as_secs_f64();
    let view = stats::end(&mut ctrl, cpu0).await;
    drop(keep);
    let grants = sh.grants.load(Relaxed);
    let counter_v = ctrl
        .call(&encode(&[b"GET", counter.as_bytes()]))
        .await
        .ok()
        .and_then(|r| r.as_i64())
        .unwrap_or(0);
    if counter_v as u64 != grants {
        rep.fails.push(format!(
            "{sc} {}: counter {counter_v} != grants {grants}: mutual exclusion broken",
            b.name()
        ));
    }
    for e in sh.errors.lock().unwrap().iter().take(3) {
        rep.fails.push(format!("{sc} {}: {e}", b.name()));
    }
    let (p50, p99, max) = latency_us(&waits);
    let g = grants.max(1) as f64;
    // SetNx's release script GETs the key once per grant: not a command sent.
    let all = if b == Backend::SetNx {
        (view.work_calls() - view.calls("del") - view.calls("evalsha")) as f64
    } else {
        view.top_calls(script_calls(b)) as f64
    };
    rep.add(
        sc,
        b.name(),
        "handoffs/s",
        sh.handoffs.load(Relaxed) as f64 / el,
    );
    rep.add(sc, b.name(), "grants/s", grants as f64 / el);
    rep.add(sc, b.name(), "wait_p50_us", p50);
    rep.add(sc, b.name(), "wait_p99_us", p99);
    rep.add(sc, b.name(), "wait_max_us", max);
    // Everything but the GET, the SET of the counter and the release: what it took
    // to be granted.
    rep.add(sc, b.name(), "acq_cmds/grant", (all - 3.0 * g) / g);
    rep.add(sc, b.name(), "cmds/grant", all / g);
    rep.add(sc, b.name(), "srv_cpu%", view.cpu / el * 100.0);
}
