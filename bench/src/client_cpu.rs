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
//!
//! The clocks move with the machine's load (and with how many replies one read carries), so
//! the same cycles are also counted in instructions, as `make bench-instr` counts the
//! server's: this binary runs itself under `valgrind --tool=callgrind` (one variant per
//! run, the 32 tasks doing a fixed number of cycles each), once with `N` and once with `2N`
//! cycles; `(I(2N) - I(N)) / N` is the client's instructions per cycle, with start-up and
//! set-up cancelled. The target: `client-try` at most 1.25x `redis-rs` in instructions
//! (the CPU-time ratio is shown next to it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use dlock_client::{Backend as ClientBackend, Client};
use tokio::task::JoinSet;

use crate::report::Report;
use crate::{Backend, Ctx};

const WORKERS: usize = 32;

/// The environment variable that makes this binary an instruction-count child:
/// `<variant>:<cycles per task>:<port>`.
const CHILD_ENV: &str = "DLOCK_BENCH_CLIENT_INSTR";
/// Cycles per task in the shorter counted run (the longer one does twice as many).
const INSTR_CYCLES: usize = 64;
const SCENARIO: &str = "client-cpu";

/// This process's CPU time so far, in seconds.
fn process_cpu() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    use nix::sys::time::TimeValLike;
    // RUSAGE_SELF cannot fail on Linux; a zero would only shrink one bench figure.
    let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let t = |v: nix::sys::time::TimeVal| v.num_microseconds() as f64 / 1e6;
    t(u.user_time()) + t(u.system_time())
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    RedisRs,
    Manager,
    ClientTry,
    ClientAcquire,
}

const VARIANTS: [Variant; 4] = [
    Variant::RedisRs,
    Variant::Manager,
    Variant::ClientTry,
    Variant::ClientAcquire,
];

impl Variant {
    fn from_name(n: &str) -> Option<Variant> {
        VARIANTS.into_iter().find(|v| v.name() == n)
    }
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

/// What one task of a variant works with.
struct Task {
    key: String,
    owner: String,
    lock: dlock_client::Lock,
    raw: redis::aio::MultiplexedConnection,
    manager: redis::aio::ConnectionManager,
}

impl Task {
    fn new(v: Variant, w: usize, client: &Client, raw: &redis::aio::MultiplexedConnection) -> Task {
        let key = format!("bench:cpu:{}:{w}", v.name());
        let lock = client.lock(key.as_str());
        Task {
            owner: lock.owner().id().to_string(),
            key,
            lock,
            raw: raw.clone(),
            manager: client.connection().expect("client open"),
        }
    }
}

/// One acquire + release of variant `v`.
async fn one(v: Variant, t: &mut Task) -> Result<(), String> {
    match v {
        Variant::RedisRs => cycle(&mut t.raw, &t.key, &t.owner).await,
        Variant::Manager => cycle(&mut t.manager, &t.key, &t.owner).await,
        Variant::ClientTry => {
            let g = t
                .lock
                .try_acquire()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not granted")?;
            g.release().await.map_err(|e| e.to_string())
        }
        Variant::ClientAcquire => {
            let g = t.lock.acquire().await.map_err(|e| e.to_string())?;
            g.release().await.map_err(|e| e.to_string())
        }
    }
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
        let (stop, done) = (stop.clone(), done.clone());
        let mut task = Task::new(v, w, client, &raw);
        set.spawn(async move {
            while !stop.load(Relaxed) {
                one(v, &mut task).await?;
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
    // DLOCK_BENCH_VARIANT=<name> runs one variant alone (for a profiler).
    let only = std::env::var("DLOCK_BENCH_VARIANT").ok();
    let variants: Vec<Variant> = VARIANTS
        .into_iter()
        .filter(|v| only.as_deref().is_none_or(|o| o == v.name()))
        .collect();
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
    rep.ratio(
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
    let counted = instructions(ctx, &variants, rep);
    let metric = if counted {
        "client_instr/op"
    } else {
        rep.notes.push(format!(
            "{SCENARIO}: valgrind is missing, so the target is checked on CPU time"
        ));
        "client_cpu_us/op"
    };
    let ratio = rep.ratio(
        "client-per-cycle",
        SCENARIO,
        metric,
        "client-try",
        "redis-rs",
    );
    rep.ratio(
        "client-per-cycle",
        SCENARIO,
        metric,
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

/// Count each variant's client instructions per cycle under callgrind (see the module
/// doc); false when valgrind is missing.
fn instructions(ctx: &Ctx, variants: &[Variant], rep: &mut Report) -> bool {
    use std::process::{Command, Stdio};
    if Command::new("valgrind").arg("--version").output().is_err() {
        return false;
    }
    let dir = std::env::temp_dir().join(format!("dlock-client-instr-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let exe = std::env::current_exe().expect("this binary's path");
    let port = ctx.native.port();
    let count = |v: Variant, per_task: usize| -> Result<u64, String> {
        let out = dir.join(format!("{}-{per_task}.out", v.name()));
        let st = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(&exe)
            .env(CHILD_ENV, format!("{}:{per_task}:{port}", v.name()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| e.to_string())?;
        if !st.success() {
            return Err(format!("callgrind child: {st}"));
        }
        crate::callgrind::callgrind_total(&out).ok_or_else(|| "no callgrind total".to_string())
    };
    eprintln!("scenario {SCENARIO}: client instructions per cycle (callgrind, {WORKERS} tasks x {INSTR_CYCLES} and x {})", 2 * INSTR_CYCLES);
    for &v in variants {
        let r = count(v, INSTR_CYCLES).and_then(|short| Ok((short, count(v, 2 * INSTR_CYCLES)?)));
        match r {
            Ok((short, long)) => {
                let per = (long as f64 - short as f64) / (WORKERS * INSTR_CYCLES) as f64;
                rep.add(SCENARIO, v.name(), "client_instr/op", per);
            }
            Err(e) => rep
                .fails
                .push(format!("{SCENARIO} {} instructions: {e}", v.name())),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    true
}

/// When this process is an instruction-count child (`DLOCK_BENCH_CLIENT_INSTR` set, see
/// the module doc): run its cycles on a current-thread runtime and answer true.
pub fn instr_child() -> bool {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return false;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let (Some(v), Some(n), Some(port)) = (
        parts.first().and_then(|n| Variant::from_name(n)),
        parts.get(1).and_then(|n| n.parse::<usize>().ok()),
        parts.get(2).and_then(|p| p.parse::<u16>().ok()),
    ) else {
        eprintln!("{CHILD_ENV}={spec}: expected <variant>:<cycles>:<port>");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(child_cycles(v, n, port)) {
        eprintln!("{CHILD_ENV}: {e}");
        std::process::exit(1);
    }
    true
}

async fn child_cycles(v: Variant, n: usize, port: u16) -> Result<(), String> {
    let url = format!("redis://127.0.0.1:{port}/");
    let client = Client::builder(url.as_str())
        .backend(ClientBackend::Native)
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let raw = redis::Client::open(url.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut set = JoinSet::new();
    for w in 0..WORKERS {
        let mut task = Task::new(v, w, &client, &raw);
        set.spawn(async move {
            for _ in 0..n {
                one(v, &mut task).await?;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    Ok(())
}
