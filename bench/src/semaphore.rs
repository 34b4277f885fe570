//! The semaphore scenario (issue #14): 16 workers share 4 permits, each taking one, holding it
//! briefly and giving it back, as fast as they can.
//!
//! - `native`: `DLOCK.SEMAPHORE key owner 4 lease WAIT 0` (the server queues the worker and
//!   answers at its grant), `DLOCK.RELEASE key owner`;
//! - `redis-semaphore`: an emulation of the redis-semaphore (npm) algorithm on the same server:
//!   a sorted set of permits scored by client-side expiry, taken by a script that drops
//!   expired members and adds one when fewer than the capacity remain, retried every 10 ms
//!   (its default retry interval); released with ZREM.
//!
//! Figures: grants per second, and how long a worker waited for its permit (p50/p99/max, ms).
//! Every backend is also checked to never have more than 4 workers inside.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::task::JoinSet;

use crate::report::Report;
use crate::resp::{encode, RawConn, Reply};
use crate::stats::latency_us;
use crate::Ctx;

const WORKERS: usize = 16;
const CAPACITY: usize = 4;
const LEASE_MS: u64 = 30_000;
/// How long a worker keeps its permit.
const HOLD: Duration = Duration::from_millis(1);
/// redis-semaphore's default retry interval.
const RETRY: Duration = Duration::from_millis(10);

/// redis-semaphore's acquire, with the permit's score its client-side expiry:
/// KEYS[1] the zset; ARGV: capacity, member, now (ms), lease (ms).
const ZSET_ACQUIRE: &str = "\
redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[3])
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('zadd', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2])
  redis.call('pexpire', KEYS[1], ARGV[4])
  return 1
end
return 0";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Native,
    ZsetPoll,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Native => "native",
            Kind::ZsetPoll => "redis-semaphore",
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Worker {
    conn: RawConn,
    kind: Kind,
    key: String,
    owner: String,
    sha: String,
}

impl Worker {
    /// Waits for a permit; returns how long it took.
    async fn acquire(&mut self) -> Result<Duration, String> {
        let t0 = Instant::now();
        let (key, owner) = (self.key.as_bytes(), self.owner.as_bytes());
        match self.kind {
            Kind::Native => {
                let cap = CAPACITY.to_string();
                let lease = LEASE_MS.to_string();
                let cmd = encode(&[
                    b"DLOCK.SEMAPHORE",
                    key,
                    owner,
                    cap.as_bytes(),
                    lease.as_bytes(),
                    b"WAIT",
                    b"0",
                ]);
                match self.conn.call(&cmd).await.map_err(|e| e.to_string())? {
                    Reply::Int(1) => Ok(t0.elapsed()),
                    other => Err(format!("DLOCK.SEMAPHORE: {other:?}")),
                }
            }
            Kind::ZsetPoll => loop {
                let (cap, now, lease) = (
                    CAPACITY.to_string(),
                    unix_ms().to_string(),
                    LEASE_MS.to_string(),
                );
                let cmd = encode(&[
                    b"EVALSHA",
                    self.sha.as_bytes(),
                    b"1",
                    key,
                    cap.as_bytes(),
                    owner,
                    now.as_bytes(),
                    lease.as_bytes(),
                ]);
                match self.conn.call(&cmd).await.map_err(|e| e.to_string())? {
                    Reply::Int(1) => return Ok(t0.elapsed()),
                    Reply::Int(0) => tokio::time::sleep(RETRY).await,
                    other => return Err(format!("acquire script: {other:?}")),
                }
            },
        }
    }

    async fn release(&mut self) -> Result<(), String> {
        let (key, owner) = (self.key.as_bytes(), self.owner.as_bytes());
        let cmd = match self.kind {
            Kind::Native => encode(&[b"DLOCK.RELEASE", key, owner]),
            Kind::ZsetPoll => encode(&[b"ZREM", key, owner]),
        };
        match self.conn.call(&cmd).await.map_err(|e| e.to_string())? {
            Reply::Int(1) => Ok(()),
            other => Err(format!("release: {other:?}")),
        }
    }
}

async fn load_acquire_script(ctx: &Ctx) -> String {
    let mut c = RawConn::connect(ctx.native.port()).await.expect("connect");
    match c
        .call(&encode(&[b"SCRIPT", b"LOAD", ZSET_ACQUIRE.as_bytes()]))
        .await
        .expect("SCRIPT LOAD")
    {
        Reply::Bulk(b) => String::from_utf8(b).expect("sha"),
        other => panic!("SCRIPT LOAD: {other:?}"),
    }
}

/// One repetition of one backend: (grants per second, waits of the measured interval).
async fn run(ctx: &Ctx, kind: Kind, sha: &str, rep: &mut Report) -> (f64, Vec<Duration>) {
    let key = format!("bench:semaphore:{}", kind.name());
    let mut ctrl = RawConn::connect(ctx.native.port()).await.expect("connect");
    ctrl.call(&encode(&[b"DEL", key.as_bytes()])).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicUsize::new(0));
    let most_inside = Arc::new(AtomicUsize::new(0));
    let measure_from = Instant::now() + ctx.cfg.warm;
    let measure_to = measure_from + ctx.cfg.dur;
    let mut set = JoinSet::new();
    for w in 0..WORKERS {
        let mut worker = Worker {
            conn: RawConn::connect(ctx.native.port()).await.expect("connect"),
            kind,
            key: key.clone(),
            owner: ctx.owner(300 + w),
            sha: sha.to_string(),
        };
        let (stop, inside, most_inside) = (stop.clone(), inside.clone(), most_inside.clone());
        set.spawn(async move {
            let (mut waits, mut grants) = (vec![], 0u64);
            while !stop.load(Relaxed) {
                let asked = Instant::now();
                let waited = worker.acquire().await?;
                let n = inside.fetch_add(1, Relaxed) + 1;
                most_inside.fetch_max(n, Relaxed);
                if asked >= measure_from && asked < measure_to {
                    waits.push(waited);
                    grants += 1;
                }
                tokio::time::sleep(HOLD).await;
                inside.fetch_sub(1, Relaxed);
                worker.release().await?;
            }
            Ok::<_, String>((waits, grants))
        });
    }
    tokio::time::sleep_until(measure_to.into()).await;
    stop.store(true, Relaxed);
    let (mut waits, mut grants) = (vec![], 0u64);
    while let Some(j) = set.join_next().await {
        match j.expect("worker task") {
            Ok((w, g)) => {
                waits.extend(w);
                grants += g;
            }
            Err(e) => rep.fails.push(format!("semaphore {}: {e}", kind.name())),
        }
    }
    let most = most_inside.load(Relaxed);
    if most > CAPACITY {
        rep.fails.push(format!(
            "semaphore {}: {most} workers inside a semaphore of {CAPACITY}",
            kind.name()
        ));
    }
    (grants as f64 / ctx.cfg.dur.as_secs_f64(), waits)
}

pub async fn semaphore(ctx: &Ctx, rep: &mut Report) {
    let sc = "semaphore";
    eprintln!(
        "scenario {sc}: {WORKERS} workers, capacity {CAPACITY}, hold {HOLD:?}, {:?} x {} reps",
        ctx.cfg.dur, ctx.cfg.reps
    );
    let sha = load_acquire_script(ctx).await;
    for r in 0..ctx.cfg.reps {
        let kinds = if r % 2 == 0 {
            [Kind::Native, Kind::ZsetPoll]
        } else {
            [Kind::ZsetPoll, Kind::Native]
        };
        for kind in kinds {
            let (rate, waits) = run(ctx, kind, &sha, rep).await;
            let (p50, p99, max) = latency_us(&waits);
            rep.add(sc, kind.name(), "grants_per_s", rate);
            rep.add(sc, kind.name(), "wait_p50_ms", p50 / 1e3);
            rep.add(sc, kind.name(), "wait_p99_ms", p99 / 1e3);
            rep.add(sc, kind.name(), "wait_max_ms", max / 1e3);
        }
    }
    rep.ratio(
        "semaphore-grants",
        sc,
        "grants_per_s",
        "native",
        "redis-semaphore",
    );
    rep.ratio(
        "semaphore-wait-p99",
        sc,
        "wait_p99_ms",
        "native",
        "redis-semaphore",
    );
}
