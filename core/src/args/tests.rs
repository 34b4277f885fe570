//! The parser's unit tests: every argument error and every option form.

use super::*;

fn v(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}
fn a<'w>(words: &[&'w str]) -> Result<AcquireArgs<'w>, LockError> {
    let refs: Vec<&'w [u8]> = words.iter().map(|w| w.as_bytes()).collect();
    acquire(&refs)
}
fn msg(r: Result<AcquireArgs, LockError>) -> String {
    r.unwrap_err().message("dlock.acquire")
}

#[test]
fn acquire_options_any_order_and_case() {
    let r = a(&["k", "o", "100", "fence", "wait", "5"]).unwrap();
    assert_eq!(
        (r.wait_ms, r.terms.fence, r.terms.lease_ms),
        (Some(5), true, 100)
    );
    let r = a(&["k", "o", "100"]).unwrap();
    assert_eq!((r.wait_ms, r.terms.fence), (None, false));
    assert_eq!(a(&["k", "o", "1", "WAIT", "0"]).unwrap().wait_ms, Some(0));
}

#[test]
fn acquire_errors() {
    assert_eq!(
        msg(a(&["k", "o"])),
        "ERR wrong number of arguments for 'dlock.acquire' command"
    );
    assert_eq!(msg(a(&["k", "o", "1", "WAIT"])), "ERR syntax error");
    assert_eq!(
        msg(a(&["k", "o", "1", "WAIT", "1", "WAIT", "1"])),
        "ERR syntax error"
    );
    assert_eq!(
        msg(a(&["k", "o", "1", "FENCE", "FENCE"])),
        "ERR syntax error"
    );
    assert_eq!(msg(a(&["k", "o", "1", "NX"])), "ERR syntax error");
    assert_eq!(
        msg(a(&["k", "o", "0"])),
        "ERR lease-ms must be a positive integer"
    );
    assert_eq!(
        msg(a(&["k", "o", "-5"])),
        "ERR lease-ms must be a positive integer"
    );
    assert_eq!(
        msg(a(&["k", "o", "1.5"])),
        "ERR lease-ms must be a positive integer"
    );
    assert_eq!(
        msg(a(&["k", "o", "+5"])),
        "ERR lease-ms must be a positive integer"
    );
    assert_eq!(
        msg(a(&["k", "o", "315360000001"])),
        "ERR lease-ms must be at most 315360000000"
    );
    // Too large for an integer is too long, not malformed.
    assert_eq!(
        msg(a(&["k", "o", "99999999999999999999999"])),
        "ERR lease-ms must be at most 315360000000"
    );
    assert_eq!(
        msg(a(&["k", "o", "-99999999999999999999999"])),
        "ERR lease-ms must be a positive integer"
    );
    assert_eq!(
        msg(a(&["k", "o", "1", "WAIT", "99999999999999999999999"])),
        "ERR timeout-ms must be at most 315360000000"
    );
    assert_eq!(
        msg(a(&["k", "o", "1", "WAIT", "-1"])),
        "ERR timeout-ms must be a non-negative integer"
    );
    assert_eq!(
        msg(a(&["k", "o", "1", "WAIT", "x"])),
        "ERR timeout-ms must be a non-negative integer"
    );
    assert_eq!(msg(a(&["k", "", "1"])), "ERR owner must be 1 to 512 bytes");
    assert_eq!(
        msg(a(&["k", &"x".repeat(513), "1"])),
        "ERR owner must be 1 to 512 bytes"
    );
    assert!(a(&["k", &"x".repeat(512), "1"]).is_ok());
    assert_eq!(
        msg(a(&["k", "mode", "1"])),
        "ERR owner name 'mode' is reserved"
    );
    // The owner is checked before the lease: both are wrong, the owner error comes first.
    assert_eq!(msg(a(&["k", "", "x"])), "ERR owner must be 1 to 512 bytes");
}

#[test]
fn rwlock_and_release_and_renew() {
    let owned = v(&["k", "o", "read", "10", "WAIT", "3"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    let r = rwlock(&refs).unwrap();
    assert_eq!((r.terms.want, r.wait_ms), (Want::Read, Some(3)));
    let owned = v(&["k", "o", "both", "10"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    assert_eq!(
        rwlock(&refs).unwrap_err().message("x"),
        "ERR mode must be READ or WRITE"
    );

    let owned = v(&["k", "o", "Write"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    assert_eq!(release(&refs).unwrap().mode, Some(Mode::Write));
    let owned = v(&["k", "o", "x"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    assert_eq!(release(&refs).unwrap_err(), LockError::Syntax);
    let owned = v(&["k", "o", "READ", "x"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    assert_eq!(release(&refs).unwrap_err(), LockError::Syntax);
    let owned = v(&["k", "o", "COUNT", "1", "x"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    assert_eq!(release(&refs).unwrap_err(), LockError::Syntax);
    let owned = v(&["k", "o", "READ", "COUNT", "1"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    assert_eq!(release(&refs).unwrap_err(), LockError::Syntax);
    let owned = v(&["k"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    assert_eq!(release(&refs).unwrap_err(), LockError::WrongArity);

    let owned = v(&["k", "o", "7"]);
    let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
    assert_eq!(renew(&refs).unwrap().lease_ms, 7);
}

#[test]
fn bind_and_lockdelay() {
    let r = a(&[
        "k",
        "o",
        "100",
        "bind",
        "20",
        "LockDelay",
        "50",
        "WAIT",
        "1",
    ])
    .unwrap();
    assert_eq!(
        (r.terms.bind, r.terms.lock_delay, r.wait_ms),
        (Some(20), Some(50), Some(1))
    );
    assert_eq!(a(&["k", "o", "100"]).unwrap().terms.bind, None);
    assert_eq!(
        a(&["k", "o", "100", "BIND", "100"]).unwrap().terms.bind,
        Some(100)
    );
    assert_eq!(
        a(&["k", "o", "100", "BIND", "0"]).unwrap().terms.bind,
        Some(0)
    );
    assert_eq!(
        msg(a(&["k", "o", "100", "BIND", "101"])),
        "ERR grace-ms must be at most the lease-ms (100)"
    );
    assert_eq!(
        msg(a(&["k", "o", "100", "BIND", "99999999999999999999999"])),
        "ERR grace-ms must be at most the lease-ms (100)"
    );
    assert_eq!(
        msg(a(&["k", "o", "100", "BIND", "-1"])),
        "ERR grace-ms must be a non-negative integer"
    );
    // A bare BIND: the default grace, capped at the lease; the next word is the grace
    // unless it starts an option.
    assert_eq!(a(&["k", "o", "100", "BIND"]).unwrap().terms.bind, Some(100));
    assert_eq!(
        a(&["k", "o", "30000", "BIND"]).unwrap().terms.bind,
        Some(2000)
    );
    let r = a(&["k", "o", "30000", "BIND", "fence", "WAIT", "5"]).unwrap();
    assert_eq!(
        (r.terms.bind, r.terms.fence, r.wait_ms),
        (Some(2000), true, Some(5))
    );
    let r = a(&["k", "o", "30000", "BIND", "LOCKDELAY", "7"]).unwrap();
    assert_eq!((r.terms.bind, r.terms.lock_delay), (Some(2000), Some(7)));
    assert_eq!(
        msg(a(&["k", "o", "100", "BIND", "soon"])),
        "ERR grace-ms must be a non-negative integer"
    );
    assert_eq!(
        msg(a(&["k", "o", "100", "BIND", "BIND", "1"])),
        "ERR syntax error"
    );
    assert_eq!(
        msg(a(&["k", "o", "100", "BIND", "1", "BIND", "1"])),
        "ERR syntax error"
    );
    assert_eq!(
        a(&["k", "o", "100", "LOCKDELAY", "60000"])
            .unwrap()
            .terms
            .lock_delay,
        Some(60000)
    );
    assert_eq!(
        msg(a(&["k", "o", "100", "LOCKDELAY", "60001"])),
        "ERR LOCKDELAY ms must be at most 60000"
    );
    assert_eq!(
        msg(a(&[
            "k",
            "o",
            "100",
            "LOCKDELAY",
            "99999999999999999999999"
        ])),
        "ERR LOCKDELAY ms must be at most 60000"
    );
    assert_eq!(
        msg(a(&["k", "o", "100", "LOCKDELAY", "x"])),
        "ERR LOCKDELAY ms must be a non-negative integer"
    );
    fn rw<'w>(w: &[&'w str]) -> Result<AcquireArgs<'w>, String> {
        rwlock(&refs(w)).map_err(|e| e.message("x"))
    }
    assert_eq!(
        rw(&["k", "o", "WRITE", "10", "LOCKDELAY", "5"])
            .unwrap()
            .terms
            .lock_delay,
        Some(5)
    );
    assert_eq!(
        rw(&["k", "o", "READ", "10", "LOCKDELAY", "5"]).unwrap_err(),
        "ERR LOCKDELAY is an option of WRITE, not READ"
    );
    assert_eq!(
        rw(&["k", "o", "READ", "10", "BIND", "5"])
            .unwrap()
            .terms
            .bind,
        Some(5)
    );
    fn sem<'w>(w: &[&'w str]) -> Result<AcquireArgs<'w>, String> {
        semaphore(&refs(w)).map_err(|e| e.message("x"))
    }
    assert_eq!(
        sem(&["k", "o", "2", "10", "BIND", "5"]).unwrap().terms.bind,
        Some(5)
    );
    assert_eq!(
        sem(&["k", "o", "2", "10", "BIND", "COUNT", "2"])
            .unwrap()
            .terms
            .bind,
        Some(10)
    );
    assert_eq!(
        sem(&["k", "o", "2", "10", "BIND", "FENCE"]).unwrap_err(),
        "ERR syntax error"
    );
    assert_eq!(
        sem(&["k", "o", "2", "10", "LOCKDELAY", "5"]).unwrap_err(),
        "ERR syntax error"
    );
    fn rn<'w>(w: &[&'w str]) -> Result<RenewArgs<'w>, String> {
        renew(&refs(w)).map_err(|e| e.message("x"))
    }
    assert_eq!(rn(&["k", "o", "10"]).unwrap().bind, None);
    assert_eq!(rn(&["k", "o", "10", "bind", "3"]).unwrap().bind, Some(3));
    assert_eq!(rn(&["k", "o", "10", "BIND"]).unwrap().bind, Some(10));
    assert_eq!(rn(&["k", "o", "30000", "BIND"]).unwrap().bind, Some(2000));
    assert_eq!(
        rn(&["k", "o", "10", "BIND", "WAIT"]).unwrap_err(),
        "ERR syntax error"
    );
    assert_eq!(
        rn(&["k", "o", "10", "BIND", "11"]).unwrap_err(),
        "ERR grace-ms must be at most the lease-ms (10)"
    );
    assert_eq!(
        rn(&["k", "o", "10", "FENCE", "1"]).unwrap_err(),
        "ERR syntax error"
    );
    assert_eq!(
        rn(&["k", "o", "10", "BIND", "1", "x"]).unwrap_err(),
        "ERR syntax error"
    );
}

fn refs<'w>(words: &[&'w str]) -> Vec<&'w [u8]> {
    words.iter().map(|w| w.as_bytes()).collect()
}

#[test]
fn semaphore_arguments() {
    fn s<'w>(w: &[&'w str]) -> Result<AcquireArgs<'w>, String> {
        semaphore(&refs(w)).map_err(|e| e.message("dlock.semaphore"))
    }
    let r = s(&["k", "o", "4", "100", "wait", "5", "count", "3"]).unwrap();
    assert_eq!(
        (r.terms.want, r.wait_ms, r.terms.lease_ms, r.terms.fence),
        (
            Want::Permits {
                capacity: 4,
                count: 3
            },
            Some(5),
            100,
            false
        )
    );
    let r = s(&["k", "o", "4", "100"]).unwrap();
    assert_eq!(
        (r.terms.want, r.wait_ms),
        (
            Want::Permits {
                capacity: 4,
                count: 1
            },
            None
        )
    );
    let e = |w: &[&str]| s(w).map(|_| ()).unwrap_err();
    assert_eq!(
        e(&["k", "o", "4"]),
        "ERR wrong number of arguments for 'dlock.semaphore' command"
    );
    for bad in ["FENCE", "READ", "WRITE", "NX"] {
        assert_eq!(e(&["k", "o", "4", "100", bad]), "ERR syntax error");
    }
    assert_eq!(e(&["k", "o", "4", "100", "COUNT"]), "ERR syntax error");
    assert_eq!(
        e(&["k", "o", "4", "100", "COUNT", "1", "COUNT", "1"]),
        "ERR syntax error"
    );
    for cap in ["0", "-1", "x", "1000001", "+3"] {
        assert_eq!(
            e(&["k", "o", cap, "100"]),
            "ERR capacity must be a positive integer up to 1000000"
        );
    }
    assert!(s(&["k", "o", "1000000", "100"]).is_ok());
    assert_eq!(
        e(&["k", "o", "4", "100", "COUNT", "0"]),
        "ERR COUNT must be a positive integer up to 1000000"
    );
    assert_eq!(
        e(&["k", "o", "4", "100", "COUNT", "5"]),
        "ERR COUNT 5 is more than the capacity 4"
    );
    assert_eq!(
        e(&["k", "o", "4", "0"]),
        "ERR lease-ms must be a positive integer"
    );
    assert_eq!(
        e(&["k", "mode", "4", "1"]),
        "ERR owner name 'mode' is reserved"
    );
    // Argument order of the checks: owner, capacity, lease, options.
    assert_eq!(
        e(&["k", "o", "0", "0"]),
        "ERR capacity must be a positive integer up to 1000000"
    );
}

#[test]
fn release_count_and_waiters_arguments() {
    let r = release(&refs(&["k", "o", "count", "2"])).unwrap();
    assert_eq!((r.mode, r.count), (None, Some(2)));
    assert_eq!(
        release(&refs(&["k", "o", "COUNT"])).unwrap_err(),
        LockError::Syntax
    );
    assert_eq!(
        release(&refs(&["k", "o", "READ", "2"])).unwrap_err(),
        LockError::Syntax
    );
    assert_eq!(
        release(&refs(&["k", "o", "COUNT", "0"]))
            .unwrap_err()
            .message("x"),
        "ERR COUNT must be a positive integer up to 1000000"
    );
    assert_eq!(waiters(&refs(&["k"])).unwrap(), (&b"k"[..], None));
    assert_eq!(
        waiters(&refs(&["k", "count", "3"])).unwrap(),
        (&b"k"[..], Some(3))
    );
    assert_eq!(
        waiters(&refs(&["k", "LIMIT", "3"])).unwrap_err(),
        LockError::Syntax
    );
    assert_eq!(
        waiters(&refs(&["k", "COUNT"])).unwrap_err(),
        LockError::Syntax
    );
    assert_eq!(
        waiters(&refs(&["k", "COUNT", "0"]))
            .unwrap_err()
            .message("x"),
        "ERR COUNT must be a positive integer up to 1000000"
    );
    assert_eq!(waiters(&refs(&[])).unwrap_err(), LockError::WrongArity);
    assert_eq!(
        waiters(&refs(&["k", "COUNT", "1", "x"])).unwrap_err(),
        LockError::Syntax
    );
}
