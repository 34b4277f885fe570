//! Flash-sale ("seckill") stock demo from the seeds: N buyers race for a stock of 1 000.
//!
//! Three runs against the same Redis:
//! 1. `naive`     GET stock, then SET stock-1: no lock, oversells;
//! 2. `one lock`  the same read-then-write under one dlock lock;
//! 3. `10 locks`  stock split into 10 keys of 100, each under its own lock; a buyer picks a
//!    random segment and tries the others when it is sold out.
//!
//! The table counts, per run, units sold, **lost updates** (two buyers read the same stock and
//! both wrote stock-1: a sale the stock never recorded), **oversold** (units sold beyond the
//! stock of 1 000) and the stock left. With more buyers than stock, a lock-free run shows lost
//! updates first and oversells only once the lost updates push sales past the stock.
//!
//! Run: `make run` in one terminal, then `make seckill` (or
//! `cargo run --release -p dlock-client --example seckill -- --help`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use dlock_client::{Backend, Client};
use rand::Rng;
use redis::aio::ConnectionManager;
use redis::AsyncCommands;

const STOCK: i64 = 1000;
const SEGMENTS: usize = 10;

/// Flash-sale demo: buyers race for a stock of 1 000 with no lock, one lock, and 10 segment locks.
#[derive(Parser)]
#[command(name = "seckill")]
struct Args {
    /// Redis with the dlock module (or any Redis with `--backend script`).
    #[arg(env = "DLOCK_URL", default_value = "redis://127.0.0.1:6379/")]
    url: String,
    /// Buyers per run.
    #[arg(long, default_value_t = 2000)]
    buyers: u64,
    /// Concurrent buyer tasks.
    #[arg(long, default_value_t = 100)]
    tasks: u64,
    /// Lock backend: auto (native when the module is loaded), native, or script (Lua).
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Auto,
    Native,
    Script,
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Backend {
        match b {
            BackendArg::Auto => Backend::Auto,
            BackendArg::Native => Backend::Native,
            BackendArg::Script => Backend::Script,
        }
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Naive,
    OneLock,
    Segmented,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Naive => "naive (no lock)",
            Mode::OneLock => "one dlock lock",
            Mode::Segmented => "10 segment locks",
        }
    }
}

struct Outcome {
    sold: u64,
    left: i64,
    secs: f64,
    p99_wait: Option<Duration>,
}

async fn reset(conn: &mut ConnectionManager) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    pipe.cmd("DEL")
        .arg("seckill:stock")
        .arg("seckill:lock")
        .ignore();
    pipe.cmd("SET").arg("seckill:stock").arg(STOCK).ignore();
    for i in 0..SEGMENTS {
        pipe.cmd("DEL").arg(format!("seckill:lock:{i}")).ignore();
        pipe.cmd("SET")
            .arg(format!("seckill:stock:{i}"))
            .arg(STOCK / SEGMENTS as i64)
            .ignore();
    }
    pipe.query_async(conn).await
}

/// Read-then-write one unit from `key`: the seeds' `get`, `if stock > 0`, `set stock-1`.
async fn buy_from(conn: &mut ConnectionManager, key: &str) -> redis::RedisResult<bool> {
    let stock: i64 = conn.get(key).await?;
    if stock > 0 {
        let _: () = conn.set(key, stock - 1).await?;
        Ok(true)
    } else {
        Ok(false)
    }
}

async fn run(client: &Client, mode: Mode, buyers: u64, tasks: u64) -> Outcome {
    let mut conn = client.connection();
    reset(&mut conn).await.expect("reset stock");
    let next = Arc::new(AtomicU64::new(0));
    let sold = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    // Segments seen sold out (under their lock): later buyers skip them.
    let empty: Arc<Vec<AtomicBool>> =
        Arc::new((0..SEGMENTS).map(|_| AtomicBool::new(false)).collect());
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, next, sold, done) = (client.clone(), next.clone(), sold.clone(), done.clone());
        let empty = empty.clone();
        handles.push(tokio::spawn(async move {
            let mut conn = client.connection();
            let mut waits = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < buyers {
                let ok = match mode {
                    Mode::Naive => buy_from(&mut conn, "seckill:stock").await.unwrap_or(false),
                    Mode::OneLock => {
                        let t = Instant::now();
                        let g = client
                            .lock("seckill:lock")
                            .acquire()
                            .await
                            .expect("acquire");
                        waits.push(t.elapsed());
                        let ok = buy_from(&mut conn, "seckill:stock").await.unwrap_or(false);
                        g.release().await.expect("release");
                        ok
                    }
                    Mode::Segmented => {
                        let first = rand::thread_rng().gen_range(0..SEGMENTS);
                        let mut ok = false;
                        for k in 0..SEGMENTS {
                            let i = (first + k) % SEGMENTS;
                            if empty[i].load(Ordering::Relaxed) {
                                continue;
                            }
                            let t = Instant::now();
                            let g = client
                                .lock(format!("seckill:lock:{i}"))
                                .acquire()
                                .await
                                .expect("acquire");
                            waits.push(t.elapsed());
                            ok = buy_from(&mut conn, &format!("seckill:stock:{i}"))
                                .await
                                .unwrap_or(false);
                            g.release().await.expect("release");
                            if !ok {
                                empty[i].store(true, Ordering::Relaxed);
                            }
                            if ok {
                                break;
                            }
                        }
                        ok
                    }
                };
                if ok {
                    sold.fetch_add(1, Ordering::Relaxed);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            waits
        }));
    }
    // Progress while it runs.
    let progress = {
        let done = done.clone();
        let sold = sold.clone();
        tokio::spawn(async move {
            loop {
                let d = done.load(Ordering::Relaxed);
                eprint!(
                    "\r  {:<18} {:>5}/{} buyers served, {:>5} sold ",
                    mode.name(),
                    d,
                    buyers,
                    sold.load(Ordering::Relaxed)
                );
                let _ = std::io::stderr().flush();
                if d >= buyers {
                    eprintln!();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let mut waits = Vec::new();
    for h in handles {
        waits.extend(h.await.expect("buyer task"));
    }
    let secs = start.elapsed().as_secs_f64();
    let _ = progress.await;
    let left: i64 = match mode {
        Mode::Segmented => {
            let mut t = 0;
            for i in 0..SEGMENTS {
                let v: i64 = conn.get(format!("seckill:stock:{i}")).await.unwrap();
                t += v;
            }
            t
        }
        _ => conn.get("seckill:stock").await.unwrap(),
    };
    waits.sort();
    let p99_wait =
        (!waits.is_empty()).then(|| waits[(waits.len() * 99 / 100).min(waits.len() - 1)]);
    Outcome {
        sold: sold.load(Ordering::Relaxed),
        left,
        secs,
        p99_wait,
    }
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let client = match Client::builder(a.url.clone())
        .backend(a.backend.into())
        .build()
        .await
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "cannot connect to {}: {e}\n(start Redis with `make run`, or pass a URL)",
                a.url
            );
            std::process::exit(1);
        }
    };
    println!(
        "seckill: {} buyers, {} tasks, stock {STOCK}, {} backend, {}",
        a.buyers,
        a.tasks,
        if client.is_native() {
            "native (dlock module)"
        } else {
            "script (Redisson Lua)"
        },
        a.url
    );
    let mut rows = Vec::new();
    for mode in [Mode::Naive, Mode::OneLock, Mode::Segmented] {
        rows.push((mode, run(&client, mode, a.buyers, a.tasks).await));
    }
    println!();
    println!(
        "{:<18} {:>6} {:>12} {:>9} {:>10} {:>12} {:>13}",
        "mode", "sold", "lost updates", "oversold", "stock left", "buyers/s", "p99 lock wait"
    );
    for (mode, o) in &rows {
        // Lost updates: sales the stock key never recorded (stock went down by fewer units
        // than were sold). Oversold: units sold beyond the stock.
        let lost_updates = (o.sold as i64 - (STOCK - o.left)).max(0);
        let oversold = (o.sold as i64 - STOCK).max(0);
        println!(
            "{:<18} {:>6} {:>12} {:>9} {:>10} {:>12.0} {:>13}",
            mode.name(),
            o.sold,
            lost_updates,
            oversold,
            o.left,
            a.buyers as f64 / o.secs,
            o.p99_wait.map_or("-".to_string(), |d| format!(
                "{:.1} ms",
                d.as_secs_f64() * 1e3
            )),
        );
    }
    let mut conn = client.connection();
    let mut pipe = redis::pipe();
    pipe.cmd("DEL").arg("seckill:stock").ignore();
    for i in 0..SEGMENTS {
        pipe.cmd("DEL").arg(format!("seckill:stock:{i}")).ignore();
    }
    let _: redis::RedisResult<()> = pipe.query_async(&mut conn).await;
}
