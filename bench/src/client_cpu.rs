//! `client-cpu`: what the client library itself costs. 32 tasks, each on its own key, run
//! uncontended acquire + release cycles against the module, in this process, for a fixed
//! time; the figure is this process's CPU time (getrusage: user + system) per cycle, so the
//! server's work is not in it. Variants, interleaved repetition by repetition:
//! - `redis-rs`: the same two commands (`DLOCK.ACQUIRE k o lease`, `DLOCK.RELEASE k o`)
//!   sent with redis-rs on one shared multiplexed connection: the floor;
//! - `redis-rs-manager`: the same through the client's reconnecting `ConnectionManager`
//!   (`Client::connection`, with its per-request time-out): what the shared connection
//!   itself costs;
//! - `client-try`: `Lock::try_acquire` + `LockGuard::release` (one command each, the
//!   watchdog registry, the guard);
//! - `client-acquire`: `Lock::acquire` (a `DLOCK.ACQUIRE ... WAIT 0` on a pooled dedicated
//!   connection) + release.
//! The target: `client-try` at most 1.25x `redis-rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use dlock_client::{Backend as ClientBackend, Client};
use tokio::task::JoinSet;

use crate::report::Report;
use crate::{Backend, Ctx};

const WORKERS: usize = 32;
const SCENARIO: &str = "client-cpu";

/// This process's CPU time so far, in seconds.
fn process_cpu() -> f64 {
    // SAFETY: getrusage only writes the struct we pass; RUSAGE_SELF is always valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    RedisRs,
    Manager,
    ClientTry,
    ClientAcquire,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::RedisRs => "redis-rs",
            Variant::Manager => "redis-rs-manager",
            Variant::ClientTry => "client-try",
            Variant::ClientAcquire => "client-acquire",
        }
    }
}

/// One acquire + release with redis-rs.
async fn cycle<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    key: &str,
    owner: &str,
) -> Result<(), String> {
    let n: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(30_000)
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    let r: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(key)
        .arg(owner)
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    if (n, r) != (1, 1) {
        return Err(format!("acquire {n}, release {r}"));
    }
    Ok(())
}

/// One timed run: (cycles per second, client CPU microseconds per cycle).
async fn run(ctx: &Ctx, v: Variant, client: &Client) -> Result<(f64, f64), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    let raw = ctx
        .native
        .client()
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    for w in 0..WORKERS {
        let key = format!("bench:cpu:{}:{w}", v.name());
        let (stop, done) = (stop.clone(), done.clone());
        let lock = client.lock(key.as_str());
        let owner = lock.owner().id().to_string();
        let mut conn = raw.clone();
        let mut manager = client.connection();
        set.spawn(async move {
            while !stop.load(Relaxed) {
                match v {
                    Variant::RedisRs => cycle(&mut conn, &key, &owner).await?,
                    Variant::Manager => cycle(&mut manager, &key, &owner).await?,
                    Variant::ClientTry => {
                        let g = lock
                            .try_acquire()
                            .await
                            .map_err(|e| e.to_string())?
                            .ok_or("not granted")?;
                        g.release().await.map_err(|e| e.to_string())?;
                    }
                    Variant::ClientAcquire => {
                        let g = lock.acquire().await.map_err(|e| e.to_string())?;
                        g.release().await.map_err(|e| e.to_string())?;
                    }
                }
                done.fetch_add(1, Relaxed);
            }
            Ok::<(), String>(())
        });
    }
    tokio::time::sleep(ctx.cfg.warm).await;
    let (c0, cpu0, t0) = (done.load(Relaxed), process_cpu(), Instant::now());
    tokio::time::sleep(ctx.cfg.dur).await;
    let (c1, cpu1, el) = (done.load(Relaxed), process_cpu(), t0.elapsed());
    stop.store(true, Relaxed);
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    let cycles = (c1 - c0).max(1) as f64;
    Ok((cycles / el.as_secs_f64(), (cpu1 - cpu0) * 1e6 / cycles))
}

pub async fn client_cpu(ctx: &Ctx, rep: &mut Report) {
    eprintln!(
        "scenario {SCENARIO}: {WORKERS} tasks, own keys, uncontended acquire + release, this process's CPU per cycle, {} reps",
        ctx.cfg.reps
    );
    let client = match Client::builder(ctx.url(Backend::Native))
        .backend(ClientBackend::Native)
        .build()
        .await
    {
        Ok(c) => c,
        Err(e) => {
            rep.fails.push(format!("{SCENARIO}: client: {e}"));
            return;
        }
    };
    let variants = [
        Variant::RedisRs,
        Variant::Manager,
        Variant::ClientTry,
        Variant::ClientAcquire,
    ];
    for r in 0..ctx.cfg.reps {
        for i in 0..variants.len() {
            let v = variants[(i + r) % variants.len()];
            match run(ctx, v, &client).await {
                Ok((rate, cpu_us)) => {
                    rep.add(SCENARIO, v.name(), "locks/s", rate);
                    rep.add(SCENARIO, v.name(), "client_cpu_us/op", cpu_us);
                }
                Err(e) => rep.fails.push(format!("{SCENARIO} {}: {e}", v.name())),
            }
        }
    }
    let ratio = rep.ratio(
        "client-cpu-per-cycle",
        SCENARIO,
        "client_cpu_us/op",
        "client-try",
        "redis-rs",
    );
    rep.ratio(
        "client-cpu-per-cycle",
        SCENARIO,
        "client_cpu_us/op",
        "client-acquire",
        "redis-rs",
    );
    rep.target(
        "client-cpu client-try/redis-rs",
        "<= 1.25",
        ratio,
        ratio <= 1.25,
    );
}
