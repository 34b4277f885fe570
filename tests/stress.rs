//! Mutual exclusion under contention from several OS processes: the test binary re-executes
//! itself as workers (`stress_worker`, a no-op unless started as a `stress` worker).

use crate::common;
use common::*;
use dlock_testutil::workers::{run_worker_processes, worker_spec};

/// Worker, spec "port,mode,id,iterations".
#[test]
fn stress_worker() {
    let Some(spec) = worker_spec("stress") else {
        return; // not a worker run
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (port, mode, id, iters): (u16, &str, &str, u64) = (
        parts[0].parse().unwrap(),
        parts[1],
        parts[2],
        parts[3].parse().unwrap(),
    );
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    let owner = format!("{mode}-{id}-{}", std::process::id());
    let int = |c: &mut Connection, k: &str| get_int(c, k).unwrap_or(0);
    for i in 0..iters {
        match mode {
            "excl" => {
                let r = cmd(
                    &mut c,
                    &["DLOCK.ACQUIRE", "lock", &owner, "10000", "WAIT", "60000"],
                );
                assert_eq!(r, Reply::Int(1), "{owner} iteration {i}");
                let v = int(&mut c, "counter");
                let _: () = redis::cmd("SET")
                    .arg("counter")
                    .arg(v + 1)
                    .query(&mut c)
                    .unwrap();
                assert_eq!(
                    release(&mut c, "lock", &owner),
                    Reply::Int(1),
                    "{owner} release {i}"
                );
            }
            "writer" => {
                let r = cmd(
                    &mut c,
                    &[
                        "DLOCK.RWLOCK",
                        "rw",
                        &owner,
                        "WRITE",
                        "10000",
                        "WAIT",
                        "60000",
                    ],
                );
                assert_eq!(r, Reply::Int(1), "{owner} iteration {i}");
                let a = int(&mut c, "a");
                let b = int(&mut c, "b");
                assert_eq!(a, b, "writer {owner} found a != b");
                let _: () = redis::cmd("SET").arg("a").arg(a + 1).query(&mut c).unwrap();
                ping(&mut c); // widen the window between the two updates
                let _: () = redis::cmd("SET").arg("b").arg(b + 1).query(&mut c).unwrap();
                let r = cmd(&mut c, &["DLOCK.RELEASE", "rw", &owner, "WRITE"]);
                assert_eq!(r, Reply::Int(1), "{owner} release {i}");
            }
            "reader" => {
                let r = cmd(
                    &mut c,
                    &[
                        "DLOCK.RWLOCK",
                        "rw",
                        &owner,
                        "READ",
                        "10000",
                        "WAIT",
                        "60000",
                    ],
                );
                assert_eq!(r, Reply::Int(1), "{owner} iteration {i}");
                let a = int(&mut c, "a");
                ping(&mut c);
                let b = int(&mut c, "b");
                assert_eq!(a, b, "reader {owner} observed a write in progress");
                let r = cmd(&mut c, &["DLOCK.RELEASE", "rw", &owner, "READ"]);
                assert_eq!(r, Reply::Int(1), "{owner} release {i}");
            }
            other => panic!("unknown worker mode {other}"),
        }
    }
}

fn run_workers(srv: &Server, workers: &[(&str, u64)]) {
    let specs: Vec<String> = workers
        .iter()
        .enumerate()
        .map(|(i, (mode, iters))| format!("{},{mode},{i},{iters}", srv.port()))
        .collect();
    run_worker_processes("stress_worker", "stress", &specs);
}

#[test]
fn exclusive_lock_counter_from_several_processes() {
    let srv = Server::start();
    let (procs, iters) = (4u64, 2000u64);
    let w: Vec<(&str, u64)> = (0..procs).map(|_| ("excl", iters)).collect();
    run_workers(&srv, &w);
    let mut c = srv.connection();
    assert_eq!(
        get_int(&mut c, "counter"),
        Some((procs * iters) as i64),
        "lost updates"
    );
    assert!(!exists(&mut c, "lock"));
    assert_eq!(info_dlock(&mut c)["dlock_waiters"], 0);
}

#[test]
fn rwlock_readers_never_see_a_write_in_progress() {
    let srv = Server::start();
    let w = [
        ("writer", 1000),
        ("writer", 1000),
        ("reader", 1500),
        ("reader", 1500),
        ("reader", 1500),
    ];
    run_workers(&srv, &w);
    let mut c = srv.connection();
    assert_eq!(get_int(&mut c, "a"), Some(2000));
    assert_eq!(get_int(&mut c, "b"), Some(2000));
    assert!(!exists(&mut c, "rw"));
}
