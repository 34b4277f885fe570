//! Hand-off when Redis evicts a held lock under `maxmemory` (a wake source in docs/DESIGN.md, "One grant path").

use crate::common;
use common::*;

/// `volatile-ttl` evicts only keys with an expiry, shortest TTL first: the held lock is the
/// only such key, so filling memory with plain strings evicts exactly the lock. The waiter is
/// then granted by the module's timer (not a command, so `deny-oom` does not stop the grant).
#[test]
fn handoff_on_eviction() {
    let srv = Server::builder()
        .args(["--maxmemory-policy", "volatile-ttl"])
        .start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 600_000), Reply::Int(1));
    let p = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "600000", "WAIT", "20000"],
        1,
    );
    let used: i64 = info_number(&mut c, "memory", "used_memory");
    let limit = (used + 2_000_000).to_string();
    assert_eq!(
        cmd(&mut c, &["CONFIG", "SET", "maxmemory", &limit]),
        Reply::Status("OK".into())
    );
    let before = info_number(&mut c, "stats", "evicted_keys");
    let filler = "x".repeat(10_000);
    let mut i = 0;
    // Fill until Redis evicts something (the only volatile key is the lock).
    while info_number(&mut c, "stats", "evicted_keys") == before {
        assert!(i < 2_000, "no eviction after {i} fillers");
        let r = cmd(&mut c, &["SET", &format!("fill:{i}"), &filler]);
        assert!(!r.is_err() || i > 0, "first filler refused: {r:?}");
        i += 1;
    }
    let (r, _) = p.wait(5 * SEC);
    assert_eq!(
        r,
        Reply::Int(1),
        "waiter granted after the lock was evicted"
    );
    // The grant itself may be evicted again at once (memory is still full): the reply is what
    // the waiter relies on. Free memory and check the server is healthy.
    cmd(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    ping(&mut c);
    assert_eq!(waiters(&mut c, "k"), 0);
    assert!(info_dlock(&mut c)["dlock_handoffs"] >= 1);
}

/// One integer `INFO` field (panics when absent).
fn info_number(c: &mut Connection, section: &str, field: &str) -> i64 {
    dlock_testutil::info_int(c, section, field)
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
}
