//! Flash-sale ("seckill") stock demo from the seeds: N buyers race for a stock of 1 000.
//!
//! Four runs against the same Redis:
//! 1. `naive`     GET stock, then SET stock-1: no lock, oversells;
//! 2. `one lock`  the same read-then-write under one dlock lock;
//! 3. `10 locks`  stock split into 10 keys of 100, each under its own lock; a buyer picks a
//!    random segment and tries the others when it is sold out.
//! 4. `semaphore` at most 10 buyers in the checkout at once (a `DLOCK.SEMAPHORE` of 10
//!    permits, each buyer waiting in the server's FIFO queue for one); inside, the stock is
//!    taken with an atomic DECR. Needs the dlock module (skipped on the script backend).
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
/// Buyers allowed in the checkout at once (semaphore permits).
const CHECKOUT: usize = 10;

/// Flash-sale demo: buyers race for a stock of 1 000 with no lock, one lock, 10 segment locks, and a checkout capped by a semaphore.
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
    Semaphore,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Naive => "naive (no lock)",
            Mode::OneLock => "one dlock lock",
            Mode::Segmented => "10 segment locks",
            Mode::Semaphore => "semaphore of 10",
        }
    }
}

struct Outcome {
    sold: u64,
    left: i64,
    secs: f64,
    p99_wait: Option<Duration>,
    /// Most buyers seen in the checkout at once (semaphore mode).
    most_inside: Option<usize>,
}

async fn reset(conn: &mut ConnectionManager) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    pipe.cmd("DEL")
        .arg("seckill:stock")
        .arg("seckill:lock")
        .arg("seckill:checkout")
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

/// One buyer through the checkout: a permit (waiting in the server's queue), an atomic DECR
/// of the stock, the permit back. `conn` must be the task's own connection: the WAIT blocks it.
/// Returns whether a unit was bought and how long the permit took.
async fn buy_through_checkout(
    conn: &mut redis::aio::MultiplexedConnection,
    owner: &str,
    inside: &std::sync::atomic::AtomicUsize,
    most_inside: &std::sync::atomic::AtomicUsize,
) -> redis::RedisResult<(bool, Duration)> {
    let t = Instant::now();
    let _permits: i64 = redis::cmd("DLOCK.SEMAPHORE")
        .arg(&["seckill:checkout", owner, &CHECKOUT.to_string(), "30000"])
        .arg(&["WAIT", "0"])
        .query_async(conn)
        .await?;
    let waited = t.elapsed();
    let now = inside.fetch_add(1, Ordering::Relaxed) + 1;
    most_inside.fetch_max(now, Ordering::Relaxed);
    let left: i64 = conn.decr("seckill:stock", 1).await?;
    if left < 0 {
        let _: i64 = conn.incr("seckill:stock", 1).await?; // sold out: put it back
    }
    inside.fetch_sub(1, Ordering::Relaxed);
    let _: Option<i64> = redis::cmd("DLOCK.RELEASE")
        .arg(&["seckill:checkout", owner])
        .query_async(conn)
        .await?;
    Ok((left >= 0, waited))
}

async fn run(client: &Client, url: &str, mode: Mode, buyers: u64, tasks: u64) -> Outcome {
    let mut conn = client.connection().expect("client open");
    reset(&mut conn).await.expect("reset stock");
    let next = Arc::new(AtomicU64::new(0));
    let sold = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    // Segments seen sold out (under their lock): later buyers skip them.
    let empty: Arc<Vec<AtomicBool>> =
        Arc::new((0..SEGMENTS).map(|_| AtomicBool::new(false)).collect());
    let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most_inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (client, next, sold, done) = (client.clone(), next.clone(), sold.clone(), done.clone());
        let (empty, inside, most_inside) = (empty.clone(), inside.clone(), most_inside.clone());
        let url = url.to_string();
        handles.push(tokio::spawn(async move {
            let mut conn = client.connection().expect("client open");
            let owner = format!("{}:{task}", client.owner_prefix());
            let mut own_conn = match mode {
                Mode::Semaphore => Some(
                    redis::Client::open(url.as_str())
                        .expect("URL")
                        .get_multiplexed_async_connection()
                        .await
                        .expect("a connection of the task's own"),
                ),
                _ => None,
            };
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
                    Mode::Semaphore => {
                        let c = own_conn.as_mut().expect("own connection");
                        let (ok, waited) = buy_through_checkout(c, &owner, &inside, &most_inside)
                            .await
                            .expect("checkout");
                        waits.push(waited);
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
        most_inside: matches!(mode, Mode::Semaphore).then(|| most_inside.load(Ordering::Relaxed)),
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
    for mode in [Mode::Naive, Mode::OneLock, Mode::Segmented, Mode::Semaphore] {
        if matches!(mode, Mode::Semaphore) && !client.is_native() {
            println!("(semaphore run skipped: semaphores need the dlock module)");
            continue;
        }
        rows.push((mode, run(&client, &a.url, mode, a.buyers, a.tasks).await));
    }
    println!();
    println!(
        "{:<18} {:>6} {:>12} {:>9} {:>10} {:>12} {:>13} {:>10}",
        "mode",
        "sold",
        "lost updates",
        "oversold",
        "stock left",
        "buyers/s",
        "p99 lock wait",
        "most in"
    );
    for (mode, o) in &rows {
        // Lost updates: sales the stock key never recorded (stock went down by fewer units
        // than were sold). Oversold: units sold beyond the stock.
        let lost_updates = (o.sold as i64 - (STOCK - o.left)).max(0);
        let oversold = (o.sold as i64 - STOCK).max(0);
        println!(
            "{:<18} {:>6} {:>12} {:>9} {:>10} {:>12.0} {:>13} {:>10}",
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
            o.most_inside.map_or("-".to_string(), |n| n.to_string()),
        );
    }
    let mut conn = client.connection().expect("client open");
    let mut pipe = redis::pipe();
    pipe.cmd("DEL").arg("seckill:stock").ignore();
    for i in 0..SEGMENTS {
        pipe.cmd("DEL").arg(format!("seckill:stock:{i}")).ignore();
    }
    let _: redis::RedisResult<()> = pipe.query_async(&mut conn).await;
}
