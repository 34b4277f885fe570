//! Reliability (issue #7), promise 1: mutual exclusion under load, across real OS processes.
//!
//! The test binary re-executes itself as worker processes (`worker_*` tests, which return at
//! once unless started as workers, see `dlock_testutil::workers`). Every worker runs plain read-modify-write
//! sequences (GET, then SET) that are only correct if the lock excludes everyone else.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use dlock_testutil::workers::*;
use rand::Rng;

const PROCS: usize = 8;

fn connect(url: &str) -> Connection {
    redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(10))
        .expect("worker connects")
}

/// Waits (server-side, FIFO) for `key`; returns the fencing token of the grant.
#[track_caller]
fn lock(con: &mut Connection, key: &str, owner: &str) -> i64 {
    let r = cmd(
        con,
        &["DLOCK.ACQUIRE", key, owner, "30000", "WAIT", "0", "FENCE"],
    );
    let a = r.arr();
    assert_eq!(a[0], Reply::Int(1), "grant of {key} to {owner}: {r:?}");
    a[1].int()
}

#[track_caller]
fn unlock(con: &mut Connection, key: &str, owner: &str) {
    assert_eq!(release(con, key, owner), Reply::Int(1), "release {key}");
}

/// Marks the critical section: `INCR guard` must find nobody else inside.
#[track_caller]
fn enter(con: &mut Connection, guard: &str) {
    let inside: i64 = redis::cmd("INCR").arg(guard).query(con).unwrap();
    assert_eq!(
        inside, 1,
        "two clients inside the critical section of {guard}"
    );
}
fn leave(con: &mut Connection, guard: &str) {
    let _: i64 = redis::cmd("DECR").arg(guard).query(con).unwrap();
}

#[test]
fn worker_counter() {
    if !is_worker("counter") {
        return;
    }
    let url = param("REL_URL");
    let n = param_u64("REL_N");
    let owner = format!("counter-{}", param("REL_ID"));
    let mut con = connect(&url);
    let mut tokens = Vec::with_capacity(n as usize);
    for _ in 0..n {
        tokens.push(lock(&mut con, "cnt:lock", &owner));
        enter(&mut con, "cnt:inside");
        let v: i64 = redis::cmd("GET").arg("cnt:value").query(&mut con).unwrap();
        let _: () = redis::cmd("SET")
            .arg("cnt:value")
            .arg(v + 1)
            .query(&mut con)
            .unwrap();
        leave(&mut con, "cnt:inside");
        unlock(&mut con, "cnt:lock", &owner);
    }
    let list: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    report("tokens", list.join(","));
}

/// 8 processes × 300 increments (long: × 3 000) under one lock: the count is exact, and every
/// grant got its own fencing token (the tokens of all processes are exactly 1..=total).
#[test]
fn counter_8_processes_exact() {
    let per = scale(300u64, 3000);
    let srv = Server::start();
    let mut c = srv.connection();
    let _: () = redis::cmd("SET")
        .arg("cnt:value")
        .arg(0)
        .query(&mut c)
        .unwrap();
    // Create the fencing counter (at 0) so that every grant advances it.
    assert_eq!(
        cmd(
            &mut c,
            &["DLOCK.ACQUIRE", "cnt:lock", "setup", "1000", "FENCE"]
        )
        .arr()[1],
        Reply::Int(1)
    );
    assert_eq!(release(&mut c, "cnt:lock", "setup"), Reply::Int(1));
    let t0 = Instant::now();
    let workers: Vec<Worker> = (0..PROCS)
        .map(|i| {
            spawn_worker(
                "worker_counter",
                "counter",
                &[
                    ("REL_URL", srv.url()),
                    ("REL_N", per.to_string()),
                    ("REL_ID", i.to_string()),
                ],
            )
        })
        .collect();
    let reports = finish_all(workers, Duration::from_secs(scale(120, 900)));
    let took = t0.elapsed();
    let total = PROCS as i64 * per as i64;
    assert_eq!(get_int(&mut c, "cnt:value"), Some(total), "lost updates");
    let mut tokens: Vec<i64> = values(&reports, "tokens")
        .flat_map(|l| {
            l.split(',')
                .map(|t| t.parse::<i64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(tokens.len() as i64, total);
    tokens.sort_unstable();
    let expect: Vec<i64> = (2..=total + 1).collect();
    assert!(
        tokens == expect,
        "fencing tokens are not exactly 2..={}",
        total + 1
    );
    assert!(!exists(&mut c, "cnt:lock"), "lock left behind");
    let stats = info_dlock(&mut c);
    println!(
        "counter: {PROCS} processes x {per} = {total} increments exact in {took:?}; \
         handoffs to waiters {}, grants {}",
        stats["dlock_handoffs"], stats["dlock_grants"]
    );
    // Contention really happened: most grants went through the waiter queue.
    assert!(stats["dlock_handoffs"] > 0, "no contention: {stats:?}");
}

#[test]
fn worker_seckill() {
    if !is_worker("seckill") {
        return;
    }
    let url = param("REL_URL");
    let buyers = param_u64("REL_BUYERS");
    let threads = param_u64("REL_THREADS");
    let segments = param_u64("REL_SEGMENTS");
    let id = param("REL_ID");
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let url = url.clone();
            let owner = format!("buyer-{id}-{t}");
            let n = buyers / threads + u64::from(t < buyers % threads);
            std::thread::spawn(move || {
                let mut con = connect(&url);
                let mut rng = rand::thread_rng();
                let (mut sold, mut sold_out, mut negative) = (0i64, 0i64, 0i64);
                for _ in 0..n {
                    let first = rng.gen_range(0..segments);
                    let mut bought = false;
                    // Like the seeds' SegmentSeckillController: a random segment first, then the
                    // others in turn when it is sold out.
                    for j in 0..segments {
                        let s = (first + j) % segments;
                        let (lk, stock, guard) = (
                            format!("sk:lock:{s}"),
                            format!("sk:stock:{s}"),
                            format!("sk:inside:{s}"),
                        );
                        lock(&mut con, &lk, &owner);
                        enter(&mut con, &guard);
                        let left: i64 = redis::cmd("GET").arg(&stock).query(&mut con).unwrap();
                        if left < 0 {
                            negative += 1;
                        }
                        if left > 0 {
                            let _: () = redis::cmd("SET")
                                .arg(&stock)
                                .arg(left - 1)
                                .query(&mut con)
                                .unwrap();
                            bought = true;
                        }
                        leave(&mut con, &guard);
                        unlock(&mut con, &lk, &owner);
                        if bought {
                            break;
                        }
                    }
                    if bought {
                        sold += 1;
                    } else {
                        sold_out += 1;
                    }
                }
                (sold, sold_out, negative)
            })
        })
        .collect();
    let (mut sold, mut sold_out, mut negative) = (0, 0, 0);
    for h in handles {
        let (a, b, c) = h.join().expect("buyer thread");
        sold += a;
        sold_out += b;
        negative += c;
    }
    report("sold", sold);
    report("soldout", sold_out);
    report("negative", negative);
}

/// The seeds' flash sale: `stock` items, `buyers` buyers in 8 processes (4 threads each),
/// the stock split over `segments` keys each under its own lock.
fn seckill(segments: u64, stock: i64, buyers: u64) {
    let srv = Server::start();
    let mut c = srv.connection();
    let per_seg = stock / segments as i64;
    for s in 0..segments {
        let _: () = redis::cmd("SET")
            .arg(format!("sk:stock:{s}"))
            .arg(per_seg)
            .query(&mut c)
            .unwrap();
    }
    let t0 = Instant::now();
    let workers: Vec<Worker> = (0..PROCS as u64)
        .map(|i| {
            let n = buyers / PROCS as u64 + u64::from(i < buyers % PROCS as u64);
            spawn_worker(
                "worker_seckill",
                "seckill",
                &[
                    ("REL_URL", srv.url()),
                    ("REL_BUYERS", n.to_string()),
                    ("REL_THREADS", "4".into()),
                    ("REL_SEGMENTS", segments.to_string()),
                    ("REL_ID", i.to_string()),
                ],
            )
        })
        .collect();
    let reports = finish_all(workers, Duration::from_secs(scale(120, 900)));
    let took = t0.elapsed();
    let sold = sum_reports(&reports, "sold");
    let sold_out = sum_reports(&reports, "soldout");
    let negative = sum_reports(&reports, "negative");
    let left: Vec<i64> = (0..segments)
        .map(|s| get_int(&mut c, &format!("sk:stock:{s}")).unwrap())
        .collect();
    println!(
        "seckill with {segments} lock(s): stock {stock}, {buyers} buyers in {PROCS} processes: \
         sold {sold}, sold out {sold_out}, negative reads {negative}, left {left:?}, in {took:?}"
    );
    assert_eq!(sold, stock, "exactly the stock is sold");
    assert_eq!(sold + sold_out, buyers as i64, "every buyer got an answer");
    assert_eq!(negative, 0, "the stock was seen negative");
    assert!(left.iter().all(|&l| l == 0), "stock left: {left:?}");
    for s in 0..segments {
        assert!(
            !exists(&mut c, &format!("sk:lock:{s}")),
            "lock {s} left behind"
        );
    }
}

#[test]
fn seckill_one_lock() {
    let (stock, buyers) = scale((1000, 4000), (10_000, 40_000));
    seckill(1, stock, buyers);
}

#[test]
fn seckill_ten_segment_locks() {
    let (stock, buyers) = scale((1000, 4000), (10_000, 40_000));
    seckill(10, stock, buyers);
}
