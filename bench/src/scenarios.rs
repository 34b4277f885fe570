//! The five scenarios of issue #6. Every one runs its backends in turn within each
//! repetition (rotating the order), so drift of the machine hits all backends alike.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_client::{Client, Lock, LockGuard};
use redis::aio::ConnectionManager;
use tokio::task::JoinSet;

use crate::report::{num, Report};
use crate::resp::{encode, RawConn, Reply};
use crate::stats::{self, latency_us};
use crate::{Backend, Ctx};

const LEASE: u64 = 30_000;

fn rotate<T: Clone>(v: &[T], r: usize) -> Vec<T> {
    (0..v.len()).map(|i| v[(i + r) % v.len()].clone()).collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Commands the backend's scripts call (counted by Redis in commandstats as well).
fn script_calls(b: Backend) -> &'static [&'static str] {
    match b {
        // Redisson's scripts.
        Backend::Lua => &[
            "exists", "hexists", "hincrby", "pexpire", "pttl", "del", "publish",
        ],
        // Compare-and-delete / compare-and-pexpire: one GET and one DEL or PEXPIRE each.
        Backend::SetNx => &["get", "del", "pexpire"],
        _ => &[],
    }
}

/// Server view of the lock cycles in an interval: (cycles, usec inside the commands).
/// Top-level commands only; the cycle count is the number of releases.
fn server_cycles(b: Backend, v: &stats::ServerView) -> (f64, f64) {
    let (release, top): (f64, &[&str]) = match b {
        Backend::Native | Backend::NativeClient => (
            v.calls("dlock.release") as f64,
            &["dlock.acquire", "dlock.release"],
        ),
        Backend::Lua => (v.calls("evalsha") as f64 / 2.0, &["evalsha"]),
        Backend::SetNx => (v.calls("evalsha") as f64, &["set", "evalsha"]),
        Backend::Raw => (v.calls("del") as f64, &["hincrby", "pexpire", "del"]),
    };
    (release, top.iter().map(|c| v.usec(c) as f64).sum())
}

// ---------------------------------------------------------------------------------------
// 1. Uncontended
// ---------------------------------------------------------------------------------------

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
                .map(|k| Step {
                    trips: vec![
                        ctx.acquire(b, k, &owner, LEASE),
                        ctx.release(b, k, &owner, LEASE),
                    ],
                    locks: 1,
                })
                .collect()
        } else {
            let mut buf = vec![];
            let mut exp = vec![];
            for k in keys.iter().cycle().take(depth) {
                let (a, ea) = ctx.acquire(b, k, &owner, LEASE);
                let (r, er) = ctx.release(b, k, &owner, LEASE);
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
    let backends = [Backend::Native, Backend::Lua, Backend::SetNx, Backend::Raw];
    for (depth, sc) in [(1usize, "uncontended"), (16, "uncontended-pipelined")] {
        eprintln!(
            "scenario {sc}: 32 workers, own keys, {} lock cycle(s) per round trip, {} reps",
            depth, ctx.cfg.reps
        );
        for r in 0..ctx.cfg.reps {
            for b in rotate(&backends, r) {
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
        }
        let nl = rep.ratio(sc, sc, "locks/s", "native", "lua");
        let nr = rep.ratio(sc, sc, "locks/s", "native", "raw");
        rep.ratio(
            &format!("{sc}-server-time"),
            sc,
            "srv_us/op",
            "lua",
            "native",
        );
        rep.ratio(
            &format!("{sc}-server-time"),
            sc,
            "srv_us/op",
            "raw",
            "native",
        );
        rep.ratio(sc, sc, "locks/s", "setnx", "native");
        if depth > 1 {
            rep.target(&format!("{sc} native/lua"), ">= 2.0", nl, nl >= 2.0);
            rep.target(&format!("{sc} native/raw"), ">= 0.75", nr, nr >= 0.75);
        }
    }
}

// ---------------------------------------------------------------------------------------
// A lock worker for the contended scenarios
// ---------------------------------------------------------------------------------------

enum Locker {
    /// `native` (ACQUIRE ... WAIT 0: the server queues and grants) or `setnx` (retry + sleep).
    Raw {
        conn: RawConn,
        acq: Vec<u8>,
        granted: Reply,
        rel: Vec<u8>,
        poll: bool,
        counter_get: Vec<u8>,
        counter: String,
    },
    /// `dlock-client`: `lua` (script backend) or `native-client`.
    Client {
        _client: Client,
        lock: Lock,
        conn: ConnectionManager,
        guard: Option<LockGuard>,
        counter: String,
    },
}

impl Locker {
    async fn new(ctx: &Ctx, b: Backend, key: &str, counter: &str, owner: usize) -> Locker {
        match b {
            Backend::Native | Backend::SetNx => {
                let owner = ctx.owner(owner);
                let lease = LEASE.to_string();
                let (acq, granted) = if b == Backend::Native {
                    (
                        encode(&[
                            b"DLOCK.ACQUIRE",
                            key.as_bytes(),
                            owner.as_bytes(),
                            lease.as_bytes(),
                            b"WAIT",
                            b"0",
                        ]),
                        Reply::Int(1),
                    )
                } else {
                    let (a, mut e) = ctx.acquire(b, key, &owner, LEASE);
                    (a, e.remove(0))
                };
                Locker::Raw {
                    conn: RawConn::connect(ctx.port(b)).await.expect("connect"),
                    acq,
                    granted,
                    rel: ctx.release(b, key, &owner, LEASE).0,
                    poll: b == Backend::SetNx,
                    counter_get: encode(&[b"GET", counter.as_bytes()]),
                    counter: counter.to_string(),
                }
            }
            Backend::Lua | Backend::NativeClient => {
                let client = Client::builder(ctx.url(b))
                    .backend(if b == Backend::Lua {
                        dlock_client::Backend::Script
                    } else {
                        dlock_client::Backend::Native
                    })
                    .build()
                    .await
                    .expect("dlock client");
                Locker::Client {
                    lock: client.lock(key),
                    conn: client.connection(),
                    _client: client,
                    guard: None,
                    counter: counter.to_string(),
                }
            }
            Backend::Raw => unreachable!("raw commands do not lock"),
        }
    }

    /// Waits until granted.
    async fn acquire(&mut self) -> Result<(), String> {
        match self {
            Locker::Raw {
                conn,
                acq,
                granted,
                poll,
                ..
            } => loop {
                let r = conn.call(acq).await.map_err(|e| e.to_string())?;
                if &r == granted {
                    return Ok(());
                }
                if *poll && r == Reply::Nil {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                return Err(format!("acquire answered {r:?}"));
            },
            Locker::Client { lock, guard, .. } => {
                match lock
                    .try_acquire_for(Duration::from_secs(60), Some(Duration::from_millis(LEASE)))
                    .await
                {
                    Ok(Some(g)) => {
                        *guard = Some(g);
                        Ok(())
                    }
                    Ok(None) => Err("not granted within 60 s".into()),
                    Err(e) => Err(e.to_string()),
                }
            }
        }
    }

    async fn release(&mut self) -> Result<(), String> {
        match self {
            Locker::Raw { conn, rel, .. } => match conn.call(rel).await {
                Ok(Reply::Int(1)) => Ok(()),
                other => Err(format!("release answered {other:?}")),
            },
            Locker::Client { guard, .. } => match guard.take().expect("held").release().await {
                Ok(()) => Ok(()),
                other => Err(format!("release answered {other:?}")),
            },
        }
    }

    /// GET the counter, SET it to +1 (two round trips: a lost exclusion shows as a lost update).
    async fn bump(&mut self) -> Result<(), String> {
        match self {
            Locker::Raw {
                conn,
                counter_get,
                counter,
                ..
            } => {
                let v = conn.call(counter_get).await.map_err(|e| e.to_string())?;
                let n = v.as_i64().unwrap_or(0) + 1;
                let set = encode(&[b"SET", counter.as_bytes(), n.to_string().as_bytes()]);
                match conn.call(&set).await {
                    Ok(Reply::Status(_)) => Ok(()),
                    other => Err(format!("SET answered {other:?}")),
                }
            }
            Locker::Client { conn, counter, .. } => {
                let v: Option<i64> = redis::cmd("GET")
                    .arg(&*counter)
                    .query_async(conn)
                    .await
                    .map_err(|e| e.to_string())?;
                redis::cmd("SET")
                    .arg(&*counter)
                    .arg(v.unwrap_or(0) + 1)
                    .query_async::<()>(conn)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. Hot lock
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    last: AtomicUsize,
    handoffs: AtomicU64,
    grants: AtomicU64,
    errors: Mutex<Vec<String>>,
}

pub async fn hot_lock(ctx: &Ctx, rep: &mut Report) {
    const WORKERS: usize = 16;
    let backends = [
        Backend::Native,
        Backend::NativeClient,
        Backend::Lua,
        Backend::SetNx,
    ];
    let sc = "hot-lock";
    eprintln!(
        "scenario {sc}: {WORKERS} workers on one key, GET+SET a counter inside, {} reps of {:?}",
        ctx.cfg.reps, ctx.cfg.hot_dur
    );
    for r in 0..ctx.cfg.reps {
        for b in rotate(&backends, r) {
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
    }
    let h = rep.ratio(sc, sc, "handoffs/s", "native", "lua");
    rep.ratio(sc, sc, "handoffs/s", "native-client", "lua");
    rep.ratio(sc, sc, "handoffs/s", "native", "setnx");
    let p = rep.ratio(
        &format!("{sc}-wait-p99"),
        sc,
        "wait_p99_us",
        "native",
        "lua",
    );
    rep.ratio(
        &format!("{sc}-wait-p99"),
        sc,
        "wait_p99_us",
        "native-client",
        "lua",
    );
    rep.ratio(
        &format!("{sc}-wait-max"),
        sc,
        "wait_max_us",
        "native",
        "lua",
    );
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

// ---------------------------------------------------------------------------------------
// 3. Hand-off latency
// ---------------------------------------------------------------------------------------

pub async fn handoff(ctx: &Ctx, rep: &mut Report) {
    let backends = [
        Backend::Native,
        Backend::NativeClient,
        Backend::Lua,
        Backend::SetNx,
    ];
    let sc = "handoff";
    let hold = Duration::from_millis(2);
    eprintln!(
        "scenario {sc}: 2 workers ping-pong one lock (hold {hold:?}), {} hand-offs x {} reps",
        ctx.cfg.handoffs, ctx.cfg.reps
    );
    for r in 0..ctx.cfg.reps {
        for b in rotate(&backends, r) {
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
    }
    rep.ratio(&format!("{sc}-p50"), sc, "p50_us", "native", "lua");
    rep.ratio(&format!("{sc}-p99"), sc, "p99_us", "native", "lua");
    rep.ratio(&format!("{sc}-p50"), sc, "p50_us", "native-client", "lua");
}

// ---------------------------------------------------------------------------------------
// 4. Renewal
// ---------------------------------------------------------------------------------------

pub async fn renewal(ctx: &Ctx, rep: &mut Report) {
    let backends = [Backend::Native, Backend::Lua, Backend::SetNx, Backend::Raw];
    for n in [1_000usize, 10_000] {
        let sc = format!("renew-{n}");
        eprintln!(
            "scenario {sc}: one client holds {n} locks, one pipelined watchdog round, {} reps",
            ctx.cfg.renew_reps
        );
        let mut sets = vec![];
        for (i, b) in backends.iter().copied().enumerate() {
            let owner = ctx.owner(300 + i);
            let mut acq = vec![];
            let mut acq_exp = vec![];
            let mut ren = vec![];
            let mut ren_exp = vec![];
            for k in 0..n {
                let key = format!("bench:renew:{}:{n}:{k}", b.name());
                let (a, ea) = ctx.acquire(b, &key, &owner, 300_000);
                acq.extend(a);
                acq_exp.extend(ea);
                let (r, er) = ctx.renew(b, &key, &owner, 300_000);
                ren.extend(r);
                ren_exp.extend(er);
            }
            let mut conn = RawConn::connect(ctx.port(b)).await.expect("connect");
            conn.send(&acq).await.unwrap();
            let mut fb = None;
            let bad = conn.expect(&acq_exp, &mut fb).await.unwrap();
            assert_eq!(bad, 0, "{sc} {} set-up: {fb:?}", b.name());
            sets.push((b, conn, ren, ren_exp));
        }
        for r in 0..ctx.cfg.renew_reps {
            let order: Vec<usize> = rotate(&(0..sets.len()).collect::<Vec<_>>(), r);
            for i in order {
                let (b, conn, ren, exp) = &mut sets[i];
                let mut ctrl = ctx.ctrl(*b).await;
                let cpu0 = stats::begin(&mut ctrl).await;
                let t = Instant::now();
                conn.send(ren).await.unwrap();
                let mut fb = None;
                let bad = conn.expect(exp, &mut fb).await.unwrap();
                let el = t.elapsed();
                let view = stats::end(&mut ctrl, cpu0).await;
                if bad > 0 {
                    rep.fails
                        .push(format!("{sc} {}: {bad} renewals failed ({fb:?})", b.name()));
                }
                rep.add(&sc, b.name(), "round_ms", ms(el));
                let top = match b {
                    Backend::Native | Backend::NativeClient => "dlock.renew",
                    Backend::Lua | Backend::SetNx => "evalsha",
                    Backend::Raw => "pexpire",
                };
                rep.add(
                    &sc,
                    b.name(),
                    "srv_us/renew",
                    view.usec(top) as f64 / n as f64,
                );
                rep.add(&sc, b.name(), "srv_cpu_ms", view.cpu * 1e3);
            }
        }
        let t = rep.ratio(&sc, &sc, "round_ms", "native", "lua");
        rep.ratio(
            &format!("{sc}-server-time"),
            &sc,
            "srv_us/renew",
            "native",
            "lua",
        );
        rep.ratio(
            &format!("{sc}-server-cpu"),
            &sc,
            "srv_cpu_ms",
            "native",
            "lua",
        );
        rep.ratio(&sc, &sc, "round_ms", "native", "raw");
        if n == 10_000 {
            rep.target(
                &format!("{sc} time native/lua"),
                "<= 0.333",
                t,
                t <= 1.0 / 3.0,
            );
        }
    }
    for b in [Backend::Native, Backend::Lua] {
        let mut c = ctx.ctrl(b).await;
        c.call(&encode(&[b"FLUSHALL"])).await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// 5. Waiters at scale
// ---------------------------------------------------------------------------------------

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
    for r in 0..ctx.cfg.scale_reps {
        for b in rotate(&backends, r) {
            scale_run(ctx, b, n, nkeys, rep).await;
        }
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
        let (a, e) = ctx.acquire(b, k, &holder, 600_000);
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
            let rel = ctx.release(b, &key, &owner, 600_000).0;
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
        let (a, e) = ctx.release(b, k, &holder, 600_000);
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
