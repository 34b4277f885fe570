//! A replica with the module and `repl-diskless-load swapdb` loads the master's data from the
//! socket (the module declares REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD) instead of falling
//! back to a disk load, and while it loads a new data set in the background it keeps serving
//! the old one read-only and does nothing on its own.

use crate::common;
use common::*;
use dlock_testutil::replication::replicate;
use dlock_testutil::{info_field, sync_replicas};
use std::time::Duration;

fn link_up(c: &mut Connection) -> bool {
    info_field(c, "replication", "master_link_status").as_deref() == Some("up")
}

const SKIPPED: &str = "Skipping diskless-load";
/// Redis logs "MASTER <-> REPLICA sync: ...", Valkey "PRIMARY <-> REPLICA sync: ...".
const SWAPPED: &str = "REPLICA sync: Swapping active DB with loaded DB";

#[test]
fn swapdb_replica_loads_diskless_and_serves_old_data_while_loading() {
    let master = Server::builder()
        .args(["--repl-diskless-sync", "yes"])
        .start();
    let mut m = master.connection();
    assert_eq!(acquire(&mut m, "k", "A", 60_000), Reply::Int(1));
    // Enough keys for the second load below to last long enough to be seen.
    let mut fill = redis::cmd("MSET");
    for i in 0..400 {
        fill.arg(format!("fill:{i}")).arg(i);
    }
    let _: () = fill.query(&mut m).unwrap();

    // Serve clients every 1 KB of the load (default 2 MB: longer than this whole data set).
    let replica = Server::builder()
        .args(["--repl-diskless-load", "swapdb"])
        .args(["--loading-process-events-interval-bytes", "1024"])
        .start();
    let mut r = replica.connection();
    replicate(&replica, &master);
    sync_replicas(&mut m);
    let log = replica.log();
    assert!(!log.contains(SKIPPED), "fell back to a disk load:\n{log}");
    assert!(log.contains(SWAPPED), "no diskless swapdb load:\n{log}");
    assert_eq!(hgetall(&mut r, "k"), map(&[("A", "1")]));

    // A second full sync with the same replication id is loaded asynchronously: slow the
    // replica's loading down, drop it and overflow the backlog so that it cannot resume.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("key-load-delay")
        .arg(3000) // µs per key: ~1.2 s for the whole data set
        .query(&mut r)
        .unwrap();
    // One transaction: the replica sees the lock change only with the new data set.
    let mut overflow = redis::pipe();
    overflow.atomic();
    overflow
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica");
    overflow.cmd("DLOCK.RELEASE").arg("k").arg("A");
    overflow.cmd("DLOCK.ACQUIRE").arg("k").arg("B").arg(60_000);
    overflow
        .cmd("CONFIG")
        .arg("SET")
        .arg("repl-backlog-size")
        .arg(16384);
    for i in 0..10 {
        overflow
            .cmd("SET")
            .arg(format!("big:{i}"))
            .arg(vec![b'x'; 16384]);
    }
    let _: redis::Value = overflow.query(&mut m).unwrap();
    assert_eq!(hgetall(&mut m, "k"), map(&[("B", "1")]));

    wait_for(
        Duration::from_secs(20),
        "async_loading:1 on the replica",
        || {
            (info_field(&mut r, "persistence", "async_loading").as_deref() == Some("1"))
                .then_some(())
        },
    );
    // Meanwhile the replica answers from the old data set, read-only, like HGETALL would.
    let holders = dinfo_field(&mut r, "k", "holders").arr();
    assert_eq!(holders[0].arr()[0].str(), "A", "old data while loading");
    assert_eq!(hgetall(&mut r, "k"), map(&[("A", "1")]));
    assert_err(&acquire(&mut r, "k2", "C", 1000), "READONLY");
    assert_eq!(
        info_field(&mut r, "persistence", "async_loading").as_deref(),
        Some("1"),
        "the reads above ran during the load"
    );

    wait_for(Duration::from_secs(30), "async load done, link up", || {
        (info_field(&mut r, "persistence", "async_loading").as_deref() == Some("0")
            && link_up(&mut r))
        .then_some(())
    });
    sync_replicas(&mut m);
    assert_eq!(hgetall(&mut r, "k"), map(&[("B", "1")]), "the new data set");
    assert_eq!(dbsize(&mut r), dbsize(&mut m));
    let log = replica.log();
    assert!(!log.contains(SKIPPED), "{log}");
    assert_eq!(
        log.matches(SWAPPED).count(),
        2,
        "both loads diskless:\n{log}"
    );
    ping(&mut r);
}
