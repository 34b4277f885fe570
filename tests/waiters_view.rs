//! DLOCK.WAITERS (issue #14): who waits on a key, in FIFO order, with what request, for how
//! long and how much of its time-out is left; read-only (a replica answers it).

use crate::common;
use common::*;
use dlock_testutil::sync_replicas;

/// `[owner, request, waited-ms, timeout-left-ms]` rows.
fn rows(c: &mut Connection, args: &[&str]) -> Vec<(String, String, i64, i64)> {
    let r = cmd(c, args);
    let Reply::Arr(list) = &r else {
        panic!("{args:?}: expected an array, got {r:?}")
    };
    list.iter()
        .map(|row| {
            let f = row.arr();
            assert_eq!(f.len(), 4, "row {row:?}");
            (f[0].str(), f[1].str(), f[2].int(), f[3].int())
        })
        .collect()
}

#[test]
fn order_fields_and_count() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert!(rows(&mut c, &["DLOCK.WAITERS", "missing"]).is_empty());
    assert_eq!(acquire(&mut c, "L", "h", 60_000), Reply::Int(1));
    assert!(
        rows(&mut c, &["DLOCK.WAITERS", "L"]).is_empty(),
        "held, nobody waits"
    );
    let _a = enqueue(
        &srv,
        &mut c,
        "L",
        &["DLOCK.ACQUIRE", "L", "a", "1000", "WAIT", "0"],
        1,
    );
    std::thread::sleep(ms(30)); // so that a has waited measurably longer than b
    let _b = enqueue(
        &srv,
        &mut c,
        "L",
        &["DLOCK.ACQUIRE", "L", "b", "1000", "WAIT", "20000"],
        2,
    );
    let got = rows(&mut c, &["DLOCK.WAITERS", "L"]);
    assert_eq!(
        got.iter()
            .map(|r| (r.0.as_str(), r.1.as_str()))
            .collect::<Vec<_>>(),
        [("a", "lock"), ("b", "lock")],
        "FIFO order"
    );
    assert_eq!(got[0].3, -1, "WAIT 0 has no time-out");
    assert!(got[0].2 >= 30 && got[0].2 >= got[1].2, "waited-ms {got:?}");
    assert!(
        (15_000..=20_000).contains(&got[1].3),
        "timeout-left-ms {got:?}"
    );
    let first = rows(&mut c, &["DLOCK.WAITERS", "L", "count", "1"]);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0, "a");
    assert_eq!(rows(&mut c, &["DLOCK.WAITERS", "L", "COUNT", "5"]).len(), 2);

    // The time-out left goes down; the wait goes up.
    std::thread::sleep(ms(50));
    let later = rows(&mut c, &["DLOCK.WAITERS", "L"]);
    assert!(
        later[1].3 < got[1].3 && later[1].2 > got[1].2,
        "{got:?} then {later:?}"
    );

    // After a hand-off, the granted waiter is gone from the list.
    assert_eq!(release(&mut c, "L", "h"), Reply::Int(1));
    wait_waiters(&mut c, "L", 1);
    let got = rows(&mut c, &["DLOCK.WAITERS", "L"]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "b");
}

#[test]
fn every_request_kind_is_named() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(rwlock(&mut c, "R", "h", "WRITE", 60_000), Reply::Int(1));
    let _r = enqueue(
        &srv,
        &mut c,
        "R",
        &["DLOCK.RWLOCK", "R", "r", "READ", "1000", "WAIT", "0"],
        1,
    );
    let _w = enqueue(
        &srv,
        &mut c,
        "R",
        &["DLOCK.RWLOCK", "R", "w", "WRITE", "1000", "WAIT", "0"],
        2,
    );
    let got = rows(&mut c, &["DLOCK.WAITERS", "R"]);
    assert_eq!((got[0].1.as_str(), got[1].1.as_str()), ("read", "write"));

    let r = cmd(
        &mut c,
        &["DLOCK.SEMAPHORE", "S", "h", "5", "60000", "COUNT", "5"],
    );
    assert_eq!(r, Reply::Int(5));
    let _s = enqueue(
        &srv,
        &mut c,
        "S",
        &[
            "DLOCK.SEMAPHORE",
            "S",
            "s",
            "5",
            "1000",
            "COUNT",
            "3",
            "WAIT",
            "0",
        ],
        1,
    );
    let got = rows(&mut c, &["DLOCK.WAITERS", "S"]);
    assert_eq!((got[0].0.as_str(), got[0].1.as_str()), ("s", "permits:3"));

    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut c).unwrap();
    assert_eq!(
        cmd(&mut c, &["DLOCK.WAITERS", "str"]),
        Reply::Err(WRONGTYPE.into())
    );
}

#[test]
fn answers_on_a_read_only_replica() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.connection();
    let mut r = replica.connection();
    assert_eq!(acquire(&mut m, "L", "h", 60_000), Reply::Int(1));
    let _w = enqueue(
        &master,
        &mut m,
        "L",
        &["DLOCK.ACQUIRE", "L", "w", "1000", "WAIT", "0"],
        1,
    );
    sync_replicas(&mut m);
    assert_eq!(rows(&mut m, &["DLOCK.WAITERS", "L"]).len(), 1);
    // Clients wait on the master only: the replica's queue is empty, and it answers.
    assert!(rows(&mut r, &["DLOCK.WAITERS", "L"]).is_empty());
    assert!(rows(&mut r, &["DLOCK.WAITERS", "L", "COUNT", "3"]).is_empty());
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut m).unwrap();
    sync_replicas(&mut m);
    assert_eq!(
        cmd(&mut r, &["DLOCK.WAITERS", "str"]),
        Reply::Err(WRONGTYPE.into())
    );
    let flags = cmd(&mut r, &["COMMAND", "INFO", "dlock.waiters"]);
    let text = format!("{flags:?}");
    assert!(text.contains("readonly"), "registered read-only: {text}");
}
