//! Reliability (issue #7), promise 3: a server restart with `--appendonly yes --appendfsync
//! always` (stopped by SHUTDOWN NOSAVE or by SIGKILL, restarted on the same dir and port).
//!
//! Held locks (exclusive, reentrant, read-write with several readers, a writer that also
//! reads), their TTLs (to the uncertainty of reading them) and the fencing counters survive; clients blocked at the
//! moment of the stop get a connection error, never a grant; after the restart the locks are
//! held by their original holders only, and a lease that runs out after the restart is handed
//! on punctually to a new waiter.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use dlock_testutil::{free_port, ServerBuilder, LATENESS_BOUND};

#[derive(Clone, Copy, Debug)]
enum Stop {
    ShutdownNosave,
    Kill9,
}

fn builder(dir: &std::path::Path, port: u16) -> ServerBuilder {
    Server::builder().dir(dir).port(port).aof()
}

struct Snapshot {
    hash: BTreeMap<String, String>,
    pttl: i64,
    /// Midway through the PTTL call: the server read its clock within `rtt / 2` of it.
    at: Instant,
    rtt: Duration,
}

fn snapshot(c: &mut Connection, key: &str) -> Snapshot {
    let hash = hgetall(c, key);
    let t0 = Instant::now();
    let p = pttl(c, key);
    let rtt = t0.elapsed();
    Snapshot {
        hash,
        pttl: p,
        at: t0 + rtt / 2,
        rtt,
    }
}

fn fence(c: &mut Connection, key: &str) -> Option<i64> {
    get_int(c, &slot_fence_key(key))
}

fn restart(how: Stop) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut srv = builder(dir.path(), port).start();
    let mut c = srv.connection();

    // Exclusive, reentrant, with a fencing counter.
    assert_eq!(
        cmd(&mut c, &["DLOCK.ACQUIRE", "x", "A", "60000", "FENCE"]),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(1)])
    );
    assert_eq!(acquire(&mut c, "x", "A", 60_000), Reply::Int(2));
    // A counter that has moved a few times, then a holder.
    for _ in 0..3 {
        cmd(&mut c, &["DLOCK.ACQUIRE", "y", "tmp", "1000", "FENCE"]);
        assert_eq!(release(&mut c, "y", "tmp"), Reply::Int(1));
    }
    assert_eq!(
        cmd(&mut c, &["DLOCK.ACQUIRE", "y", "B", "20000", "FENCE"]),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(4)])
    );
    // Read-write: two readers with their own leases; a writer that also reads.
    assert_eq!(rwlock(&mut c, "rw", "R1", "READ", 30_000), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "rw", "R2", "READ", 45_000), Reply::Int(1));
    assert_eq!(
        cmd(
            &mut c,
            &["DLOCK.RWLOCK", "rww", "W", "WRITE", "40000", "FENCE"]
        ),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(1)])
    );
    assert_eq!(rwlock(&mut c, "rww", "W", "READ", 40_000), Reply::Int(1));
    // A short lease that runs out after the restart.
    assert_eq!(acquire(&mut c, "short", "S", 4000), Reply::Int(1));

    // Blocked clients at the moment of the stop.
    let blocked = [
        enqueue(
            &srv,
            &mut c,
            "x",
            &["DLOCK.ACQUIRE", "x", "B1", "60000", "WAIT", "0"],
            1,
        ),
        enqueue(
            &srv,
            &mut c,
            "x",
            &["DLOCK.ACQUIRE", "x", "B2", "60000", "WAIT", "0", "FENCE"],
            2,
        ),
        enqueue(
            &srv,
            &mut c,
            "rw",
            &["DLOCK.RWLOCK", "rw", "WW", "WRITE", "60000", "WAIT", "0"],
            1,
        ),
        enqueue(
            &srv,
            &mut c,
            "rww",
            &[
                "DLOCK.RWLOCK",
                "rww",
                "RR",
                "READ",
                "60000",
                "WAIT",
                "60000",
            ],
            1,
        ),
    ];

    let keys = ["x", "y", "rw", "rww", "short"];
    let before: Vec<Snapshot> = keys.iter().map(|k| snapshot(&mut c, k)).collect();
    let fences: Vec<Option<i64>> = keys.iter().map(|k| fence(&mut c, k)).collect();
    assert_eq!(fences, vec![Some(1), Some(4), None, Some(1), None]);
    drop(c);

    match how {
        Stop::ShutdownNosave => srv.shutdown(),
        Stop::Kill9 => srv.kill(),
    }
    assert!(!srv.is_running());
    for p in &blocked {
        let (r, _) = p.wait(Duration::from_secs(10));
        assert!(
            matches!(r, Reply::Io(_)),
            "{:?}: a client blocked at the {how:?} must get a connection error, got {r:?}",
            p.args
        );
    }

    let t_restart = Instant::now();
    let srv2 = builder(dir.path(), port).start();
    let restart_took = t_restart.elapsed();
    let mut c = srv2.connection();
    let mut drifts = vec![];
    for (k, b) in keys.iter().zip(&before) {
        let a = snapshot(&mut c, k);
        assert_eq!(a.hash, b.hash, "{k}: the lock hash after the restart");
        let expected = b.pttl as f64 - (a.at - b.at).as_secs_f64() * 1000.0;
        let drift = a.pttl as f64 - expected;
        // What the two reads cannot tell apart: half of each round trip, and PTTL's whole
        // milliseconds. A TTL restarted or shortened by the restart drifts by the restart time.
        let uncertain = (a.rtt + b.rtt).as_secs_f64() * 500.0 + 2.0;
        assert!(
            drift.abs() <= uncertain,
            "{k}: PTTL {} after the restart, expected {expected:.0} ± {uncertain:.0} (drift {drift:.0} ms)",
            a.pttl
        );
        drifts.push(drift);
        assert_eq!(waiters(&mut c, k), 0, "{k}: no waiter survives a restart");
    }
    let after_fences: Vec<Option<i64>> = keys.iter().map(|k| fence(&mut c, k)).collect();
    assert_eq!(after_fences, fences, "fencing counters after the restart");
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], 0);
    println!(
        "restart after {how:?}: server back in {restart_took:?}; TTL drift per key (ms): {:?}",
        drifts.iter().map(|d| d.round() as i64).collect::<Vec<_>>()
    );

    // Held by the original holders only: the blocked clients got nothing.
    assert_eq!(hgetall(&mut c, "x"), map(&[("A", "2"), ("", "1")]));
    assert!(
        acquire(&mut c, "x", "B1", 1000).is_nil(),
        "B1 must not hold x"
    );
    assert_eq!(release(&mut c, "x", "B2"), Reply::Nil, "B2 holds nothing");
    assert_eq!(
        cmd(&mut c, &["DLOCK.RWLOCK", "rw", "WW", "WRITE", "1000"]),
        Reply::Nil
    );
    assert_eq!(rwlock(&mut c, "rw", "R3", "READ", 1000), Reply::Int(1));
    // The holders can go on: renew, release; the counter continues where it was.
    assert_eq!(renew(&mut c, "y", "B", 20_000), Reply::Int(1));
    assert_eq!(release(&mut c, "x", "A"), Reply::Int(0));
    assert_eq!(release(&mut c, "x", "A"), Reply::Int(1));
    assert_eq!(
        cmd(&mut c, &["DLOCK.ACQUIRE", "x", "B1", "1000", "FENCE"]),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(2)]),
        "fence continues after the restart"
    );
    assert_eq!(
        cmd(&mut c, &["DLOCK.RELEASE", "rww", "W", "WRITE"]),
        Reply::Int(1)
    );
    assert_eq!(
        dinfo_field(&mut c, "rww", "mode"),
        Reply::Bulk("read".into())
    );

    // The short lease runs out after the restart: a new waiter gets it on time.
    let t0 = Instant::now();
    let left = pttl(&mut c, "short");
    assert!(
        left > 0,
        "short lease still running after the restart ({left})"
    );
    let deadline = t0 + Duration::from_millis(left as u64);
    let p = enqueue(
        &srv2,
        &mut c,
        "short",
        &["DLOCK.ACQUIRE", "short", "Q", "5000", "WAIT", "10000"],
        1,
    );
    let (r, _, at) = p.wait_at(Duration::from_secs(15));
    assert_eq!(
        r,
        Reply::Int(1),
        "waiter granted when the restored lease ran out"
    );
    let late = at.saturating_duration_since(deadline).as_secs_f64() * 1000.0;
    assert!(
        at + ms(3) >= deadline,
        "granted before the restored lease ended"
    );
    assert!(
        late <= LATENESS_BOUND.as_secs_f64() * 1000.0,
        "granted {late:.0} ms after the restored lease"
    );
    println!("restart after {how:?}: restored lease handed on {late:.1} ms after its end");
}

#[test]
fn locks_ttls_and_fences_survive_shutdown_nosave() {
    restart(Stop::ShutdownNosave);
}

#[test]
fn locks_ttls_and_fences_survive_kill9() {
    restart(Stop::Kill9);
}
