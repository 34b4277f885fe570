//! Scenario 1, uncontended: one lock cycle (acquire + release) after another, each on a free
//! lock; `-pipelined` sends many cycles per round trip.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::task::JoinSet;

use crate::report::Report;
use crate::resp::{RawConn, Reply};
use crate::stats;
use crate::{Backend, Ctx};

use super::{rounds, server_cycles, LEASE};

struct Step {
    trips: Vec<(Vec<u8>, Vec<Reply>)>,
    locks: u64,
}

struct UncRun {
    rate: f64,
    srv_us: f64,
    cpu_us: f64,
    cpu: f64,
    bad: u64,
    first_bad: Option<String>,
}

async fn uncontended_run(ctx: &Ctx, b: Backend, depth: usize) -> UncRun {
    const WORKERS: usize = 32;
    let port = ctx.port(b);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let first_bad = Arc::new(Mutex::new(None::<String>));
    let mut set = JoinSet::new();
    for w in 0..WORKERS {
        let owner = ctx.owner(w);
        let keys: Vec<String> = (0..16)
            .map(|i| format!("bench:u:{}:{w}:{i}", b.name()))
            .collect();
        let steps: Vec<Step> = if depth <= 1 {
            keys.iter()
                .map(|k| {
                    let hold = ctx.sha.hold(b, k, &owner, LEASE);
                    Step {
                        trips: vec![hold.acquire(), hold.release()],
                        locks: 1,
                    }
                })
                .collect()
        } else {
            let mut buf = vec![];
            let mut exp = vec![];
            for k in keys.iter().cycle().take(depth) {
                let hold = ctx.sha.hold(b, k, &owner, LEASE);
                let (a, ea) = hold.acquire();
                let (r, er) = hold.release();
                buf.extend(a);
                buf.extend(r);
                exp.extend(ea);
                exp.extend(er);
            }
            vec![Step {
                trips: vec![(buf, exp)],
                locks: depth as u64,
            }]
        };
        let mut conn = RawConn::connect(port).await.expect("connect");
        let (stop, done, bad, first_bad) =
            (stop.clone(), done.clone(), bad.clone(), first_bad.clone());
        set.spawn(async move {
            let mut fb = None;
            'outer: loop {
                for s in &steps {
                    if stop.load(Relaxed) {
                        break 'outer;
                    }
                    for (bytes, exp) in &s.trips {
                        if conn.send(bytes).await.is_err() {
                            break 'outer;
                        }
                        match conn.expect(exp, &mut fb).await {
                            Ok(0) => {}
                            Ok(n) => {
                                bad.fetch_add(n, Relaxed);
                            }
                            Err(e) => {
                                fb.get_or_insert(e.to_string());
                                bad.fetch_add(1, Relaxed);
                                break 'outer;
                            }
                        }
                    }
                    done.fetch_add(s.locks, Relaxed);
                }
            }
            if let Some(f) = fb {
                first_bad.lock().unwrap().get_or_insert(f);
            }
        });
    }
    tokio::time::sleep(ctx.cfg.warm).await;
    let mut ctrl = ctx.ctrl(b).await;
    let cpu0 = stats::begin(&mut ctrl).await;
    let c0 = done.load(Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(ctx.cfg.dur).await;
    let c1 = done.load(Relaxed);
    let el = t0.elapsed().as_secs_f64();
    let view = stats::end(&mut ctrl, cpu0).await;
    stop.store(true, Relaxed);
    while set.join_next().await.is_some() {}
    let (server_locks, usec) = server_cycles(b, &view);
    let fb = first_bad.lock().unwrap().take();
    UncRun {
        rate: (c1 - c0) as f64 / el,
        srv_us: usec / server_locks,
        cpu_us: view.cpu * 1e6 / server_locks,
        cpu: view.cpu / el,
        bad: bad.load(Relaxed),
        first_bad: fb,
    }
}

pub async fn uncontended(ctx: &Ctx, rep: &mut Report) {
    let backends = [
        Backend::Native,
        Backend::NativeBind,
        Backend::Lua,
        Backend::SetNx,
        Backend::Raw,
    ];
    for (depth, sc) in [(1usize, "uncontended"), (16, "uncontended-pipelined")] {
        eprintln!(
            "scenario {sc}: 32 workers, own keys, {} lock cycle(s) per round trip, {} reps",
            depth, ctx.cfg.reps
        );
        for b in rounds(&backends, ctx.cfg.reps) {
            let m = uncontended_run(ctx, b, depth).await;
            rep.add(sc, b.name(), "locks/s", m.rate);
            rep.add(sc, b.name(), "srv_us/op", m.srv_us);
            rep.add(sc, b.name(), "srv_cpu%", m.cpu * 100.0);
            // The server's whole CPU (I/O included) per lock cycle: its capacity, whatever
            // else the machine runs.
            rep.add(sc, b.name(), "srv_cpu_us/op", m.cpu_us);
            if m.bad > 0 {
                rep.fails.push(format!(
                    "{sc} {}: {} unexpected replies (first: {})",
                    b.name(),
                    m.bad,
                    m.first_bad.unwrap_or_default()
                ));
            }
        }
        let nl = rep.ratio(sc, sc, "locks/s", "native", "lua");
        let nr = rep.ratio(sc, sc, "locks/s", "native", "raw");
        let server_time = format!("{sc}-server-time");
        for slower in ["lua", "raw"] {
            rep.ratio(&server_time, sc, "srv_us/op", slower, "native");
        }
        rep.ratio(sc, sc, "locks/s", "setnx", "native");
        // BIND's price: the server's whole CPU per lock cycle with BIND against without
        // (user-space instructions alone: docs/DESIGN.md, What a command costs). The target
        // is on the round-trip shape, a lock user's; the pipelined ratio is reported.
        let bind = rep.ratio(
            &format!("{sc}-bind-cost"),
            sc,
            "srv_cpu_us/op",
            "native-bind",
            "native",
        );
        if depth == 1 {
            rep.target(
                &format!("{sc} bind/plain server CPU"),
                "<= 1.05",
                bind,
                bind <= 1.05,
            );
        }
        if depth > 1 {
            rep.target(&format!("{sc} native/lua"), ">= 2.0", nl, nl >= 2.0);
            rep.target(&format!("{sc} native/raw"), ">= 0.75", nr, nr >= 0.75);
        }
    }
}
