//! libFuzzer target: every DLOCK.* argument parser and the module-argument parser.
//!
//! Input layout: byte 0 picks the parser, then words as `[len: u8][len bytes]...` (a short
//! last word takes what is left). Nothing may panic; accepted requests must respect the
//! documented limits; rejections must be `ERR ...` replies.
//!
//! Run (nightly + cargo-fuzz): `cargo +nightly fuzz run parsers -- -max_total_time=60`
//! (from the repository root). On stable, `tests/reliability_parsers.rs` runs the same parsers
//! against a reference implementation in `make test`.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;

use dlock_core::args::{self, MAX_MS};
use dlock_core::{config, error};

fn words(data: &[u8]) -> Vec<&[u8]> {
    let mut out = vec![];
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = (len as usize).min(tail.len());
        out.push(&tail[..n]);
        rest = &tail[n..];
    }
    out
}

fn check_owner(owner: &[u8]) {
    assert!(!owner.is_empty() && owner.len() <= 512, "owner length {}", owner.len());
    assert_ne!(owner, b"mode");
}

fn check_err(e: error::LockError, cmd: &str) {
    let m = e.message(cmd);
    assert!(
        m.starts_with("ERR ") || m.starts_with("WRONGTYPE "),
        "error reply {m:?}"
    );
}

fn check_acquire(r: Result<args::AcquireArgs, error::LockError>, argv: &[&[u8]], cmd: &str) {
    match r {
        Ok(a) => {
            check_owner(&a.terms.owner);
            assert_eq!(a.key, argv[0]);
            let lease = a.terms.lease_ms;
            assert!((1..=MAX_MS).contains(&lease), "lease {lease}");
            if let Some(w) = a.wait_ms {
                assert!((0..=MAX_MS).contains(&w), "wait {w}");
            }
        }
        Err(e) => check_err(e, cmd),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let argv = words(rest);
    match which % 8 {
        0 => check_acquire(args::acquire(&argv), &argv, "dlock.acquire"),
        1 => check_acquire(args::rwlock(&argv), &argv, "dlock.rwlock"),
        2 => match args::release(&argv) {
            Ok(r) => {
                check_owner(&r.owner);
                assert!((2..=4).contains(&argv.len()));
                if let Some(n) = r.count {
                    assert!((1..=args::MAX_CAPACITY).contains(&n), "COUNT {n}");
                }
            }
            Err(e) => check_err(e, "dlock.release"),
        },
        3 => match args::renew(&argv) {
            Ok(r) => {
                check_owner(&r.owner);
                assert!((1..=MAX_MS).contains(&r.lease_ms));
            }
            Err(e) => check_err(e, "dlock.renew"),
        },
        4 => match args::info(&argv) {
            Ok(k) => assert_eq!(k, argv[0]),
            Err(e) => check_err(e, "dlock.info"),
        },
        5 => {
            let r = args::semaphore(&argv);
            if let Ok(a) = &r {
                let args::Want::Permits { capacity, count } = a.want else {
                    panic!("DLOCK.SEMAPHORE parsed as {:?}", a.want)
                };
                assert!((1..=capacity).contains(&count) && capacity <= args::MAX_CAPACITY);
                assert!(!a.fence);
            }
            check_acquire(r, &argv, "dlock.semaphore")
        }
        6 => match args::waiters(&argv) {
            Ok((k, n)) => {
                assert_eq!(k, argv[0]);
                assert!(n.is_none_or(|n| (1..=args::MAX_CAPACITY as usize).contains(&n)));
            }
            Err(e) => check_err(e, "dlock.waiters"),
        },
        _ => {
            let strings: Vec<String> = argv
                .iter()
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            match config::Config::parse(&strings) {
                Ok(c) => assert!(!c.channel_prefix.is_empty()),
                Err(line) => assert!(!line.is_empty()),
            }
        }
    }
});
