//! Scenario 5, waiters at scale: 10 000 clients blocked on 100 keys; another client's PING
//! latency while they queue, wait and are served, and the server's CPU.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_client::Client;
use tokio::task::JoinSet;

use crate::report::Report;
use crate::resp::{encode, RawConn, Reply};
use crate::stats::{self, latency_us};
use crate::{Backend, Ctx};

use super::{rounds, script_calls};

const PH_IDLE: u8 = 0;
const PH_QUEUE: u8 = 1;
const PH_WAIT: u8 = 2;
const PH_SERVE: u8 = 3;
const PH_STOP: u8 = 255;

/// Another client: PING every ~200 µs on its own OS thread and blocking socket, so its
/// latency is the server's, not the benchmark's runtime's.
fn pinger(port: u16, phase: Arc<AtomicU8>) -> std::thread::JoinHandle<Vec<(u8, Duration)>> {
    std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("ping connect");
        s.set_nodelay(true).unwrap();
        let mut out = vec![];
        let mut buf = [0u8; 64];
        loop {
            let ph = phase.load(Relaxed);
            if ph == PH_STOP {
                return out;
            }
            let t = Instant::now();
            s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
            let mut got = 0;
            while got < 7 {
                got += s.read(&mut buf[got..]).unwrap();
            }
            out.push((ph, t.elapsed()));
            std::thread::sleep(Duration::from_micros(200));
        }
    })
}

async fn wait_until<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

pub async fn waiters(ctx: &Ctx, rep: &mut Report) {
    let sc = "waiters";
    let (n, nkeys) = (ctx.cfg.waiters, ctx.cfg.waiter_keys);
    eprintln!(
        "scenario {sc}: {n} blocked waiters over {nkeys} keys, PING latency of another client, {} reps",
        ctx.cfg.scale_reps
    );
    let backends = [Backend::Native, Backend::Lua];
    for b in rounds(&backends, ctx.cfg.scale_reps) {
        scale_run(ctx, b, n, nkeys, rep).await;
    }
    let mut worst = 0f64;
    for m in ["ping_p99_wait_ms", "ping_p99_serve_ms"] {
        let v = rep
            .figures
            .iter()
            .find(|f| f.scenario == sc && f.backend == "native" && f.metric == m)
            .map_or(f64::NAN, |f| f.values.iter().cloned().fold(0.0, f64::max));
        worst = worst.max(v);
        rep.target(
            &format!("waiters native {m} (worst rep)"),
            "< 5",
            v,
            v < 5.0,
        );
    }
    let _ = worst;
    rep.ratio(&format!("{sc}-serve-time"), sc, "serve_s", "native", "lua");
}

async fn scale_run(ctx: &Ctx, b: Backend, n: usize, nkeys: usize, rep: &mut Report) {
    let sc = "waiters";
    let port = ctx.port(b);
    let mut ctrl = ctx.ctrl(b).await;
    let keys: Vec<String> = (0..nkeys)
        .map(|j| format!("bench:wait:{}:{j}", b.name()))
        .collect();
    let holder = ctx.owner(999_999);
    // The holders.
    let mut buf = vec![];
    let mut exp = vec![];
    for k in &keys {
        let (a, e) = ctx.sha.hold(b, k, &holder, 600_000).acquire();
        buf.extend(a);
        exp.extend(e);
    }
    ctrl.send(&buf).await.unwrap();
    let mut fb = None;
    assert_eq!(
        ctrl.expect(&exp, &mut fb).await.unwrap(),
        0,
        "{sc} holders: {fb:?}"
    );

    // Lua: one dlock-client per 100 waiters (separate processes would each have one).
    let clients: Vec<Client> = if b == Backend::Lua {
        let mut v = vec![];
        for _ in 0..n.div_ceil(nkeys) {
            v.push(
                Client::builder(ctx.url(b))
                    .backend(dlock_client::Backend::Script)
                    .build()
                    .await
                    .expect("client"),
            );
        }
        v
    } else {
        vec![]
    };

    let phase = Arc::new(AtomicU8::new(PH_IDLE));
    let ping = pinger(port, phase.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;

    phase.store(PH_QUEUE, Relaxed);
    let _ = stats::begin(&mut ctrl).await;
    let t_q = Instant::now();
    let served = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut set = JoinSet::new();
    let sem = Arc::new(tokio::sync::Semaphore::new(256));
    let keep = Arc::new(Mutex::new(Vec::<RawConn>::with_capacity(n)));
    for i in 0..n {
        let key = keys[i % nkeys].clone();
        let (served, errors) = (served.clone(), errors.clone());
        if b == Backend::Native {
            let owner = ctx.owner(1_000_000 + i);
            let acq = encode(&[
                b"DLOCK.ACQUIRE",
                key.as_bytes(),
                owner.as_bytes(),
                b"600000",
                b"WAIT",
                b"0",
            ]);
            let rel = ctx.sha.hold(b, &key, &owner, 600_000).release().0;
            let sem = sem.clone();
            let keep = keep.clone();
            set.spawn(async move {
                let r: Result<((), RawConn), String> = async {
                    let permit = sem.acquire_owned().await.unwrap();
                    let mut c = RawConn::connect(port).await.map_err(|e| e.to_string())?;
                    c.send(&acq).await.map_err(|e| e.to_string())?;
                    drop(permit);
                    match c.read_reply().await {
                        Ok(Reply::Int(1)) => {}
                        other => return Err(format!("waiter got {other:?}")),
                    }
                    let r = match c.call(&rel).await {
                        Ok(Reply::Int(1)) => Ok(()),
                        other => Err(format!("release answered {other:?}")),
                    };
                    // Stay connected until the measurement is over: a client going away
                    // costs the server a close(), which is not part of serving waiters.
                    Ok((r?, c))
                }
                .await;
                let r = match r {
                    Ok(((), c)) => {
                        keep.lock().unwrap().push(c);
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                match r {
                    Ok(()) => {
                        served.fetch_add(1, Relaxed);
                    }
                    Err(e) => errors.lock().unwrap().push(e),
                }
            });
        } else {
            let lock = clients[i / nkeys].lock(key);
            set.spawn(async move {
                let r = match lock
                    .try_acquire_for(Duration::from_secs(120), Some(Duration::from_secs(600)))
                    .await
                {
                    Ok(Some(g)) => match g.release().await {
                        Ok(()) => Ok(()),
                        other => Err(format!("release answered {other:?}")),
                    },
                    other => Err(format!("waiter got {other:?}")),
                };
                match r {
                    Ok(()) => {
                        served.fetch_add(1, Relaxed);
                    }
                    Err(e) => errors.lock().unwrap().push(e),
                }
            });
        }
    }
    // Everyone queued: the module counts its waiters; a Redisson waiter has tried twice
    // (before and after subscribing) when it starts waiting for a message.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut queued = false;
    while Instant::now() < deadline {
        queued = if b == Backend::Native {
            let f = stats::info_fields(&mut ctrl, "dlock").await;
            f.get("dlock_waiters").and_then(|v| v.parse::<usize>().ok()) == Some(n)
        } else {
            let v = stats::end(&mut ctrl, 0.0).await;
            v.calls("evalsha") as usize >= 2 * n
        };
        if queued {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let queue_s = t_q.elapsed().as_secs_f64();
    if !queued {
        rep.fails.push(format!(
            "{sc} {}: waiters did not all queue in 90 s",
            b.name()
        ));
    }
    phase.store(PH_WAIT, Relaxed);
    let cpu_w = stats::cpu(&mut ctrl).await;
    let t_w = Instant::now();
    // DLOCK_BENCH_WAIT_MS stretches the idle phase (for profiling the server while it waits).
    let wait_ms = std::env::var("DLOCK_BENCH_WAIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    let wait_cpu = (stats::cpu(&mut ctrl).await - cpu_w) / t_w.elapsed().as_secs_f64();

    phase.store(PH_SERVE, Relaxed);
    let cpu0 = stats::begin(&mut ctrl).await;
    let t_s = Instant::now();
    let mut buf = vec![];
    let mut exp = vec![];
    for k in &keys {
        let (a, e) = ctx.sha.hold(b, k, &holder, 600_000).release();
        buf.extend(a);
        exp.extend(e);
    }
    ctrl.send(&buf).await.unwrap();
    let mut fb = None;
    let bad = ctrl.expect(&exp, &mut fb).await.unwrap();
    if bad > 0 {
        rep.fails
            .push(format!("{sc} {} holder release: {fb:?}", b.name()));
    }
    let all_served = wait_until(Duration::from_secs(120), || {
        let s = served.clone();
        let e = errors.clone();
        async move { s.load(Relaxed) as usize + e.lock().unwrap().len() >= n }
    })
    .await;
    let serve_s = t_s.elapsed().as_secs_f64();
    let view = stats::end(&mut ctrl, cpu0).await;
    phase.store(PH_STOP, Relaxed);
    let pings = ping.join().expect("pinger");
    if !all_served {
        set.abort_all();
        rep.fails.push(format!(
            "{sc} {}: only {} of {n} waiters served in 120 s",
            b.name(),
            served.load(Relaxed)
        ));
    }
    while set.join_next().await.is_some() {}
    for e in errors.lock().unwrap().iter().take(3) {
        rep.fails.push(format!("{sc} {}: {e}", b.name()));
    }
    drop(clients);
    keep.lock().unwrap().clear();
    let lat = |ph: u8| {
        let v: Vec<Duration> = pings.iter().filter(|p| p.0 == ph).map(|p| p.1).collect();
        let (p50, p99, max) = latency_us(&v);
        (p50 / 1e3, p99 / 1e3, max / 1e3)
    };
    let name = b.name();
    let (i50, i99, _) = lat(PH_IDLE);
    let (_, q99, qmax) = lat(PH_QUEUE);
    let (w50, w99, wmax) = lat(PH_WAIT);
    let (s50, s99, smax) = lat(PH_SERVE);
    rep.add(sc, name, "ping_p50_idle_ms", i50);
    rep.add(sc, name, "ping_p99_idle_ms", i99);
    rep.add(sc, name, "queue_s", queue_s);
    rep.add(sc, name, "ping_p99_queue_ms", q99);
    rep.add(sc, name, "ping_max_queue_ms", qmax);
    rep.add(sc, name, "ping_p50_wait_ms", w50);
    rep.add(sc, name, "ping_p99_wait_ms", w99);
    rep.add(sc, name, "ping_max_wait_ms", wmax);
    rep.add(sc, name, "srv_cpu%_wait", wait_cpu * 100.0);
    rep.add(sc, name, "serve_s", serve_s);
    rep.add(sc, name, "ping_p50_serve_ms", s50);
    rep.add(sc, name, "ping_p99_serve_ms", s99);
    rep.add(sc, name, "ping_max_serve_ms", smax);
    rep.add(
        sc,
        name,
        "srv_cmds/grant",
        view.top_calls(script_calls(b)) as f64 / n as f64,
    );
    rep.add(sc, name, "srv_cpu_serve_s", view.cpu);
    let mut c = ctx.ctrl(b).await;
    c.call(&encode(&[b"FLUSHALL"])).await.unwrap();
}
