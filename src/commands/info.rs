//! DLOCK.INFO: what a lock key holds, read only (lapsed read-write and semaphore holders are
//! left out, not removed).

use dlock_core::args;
use dlock_core::error::LockError;
use dlock_core::model::LockValue;
use dlock_core::rules;

use crate::engine::delay::LockDelay;
use crate::engine::registry;
use crate::engine::store::LockKey;
use crate::ffi::command::{Args, Command};
use crate::ffi::context::now_ms;
use crate::ffi::reply::Replier;
use crate::ffi::string::ArgStr;
use crate::ffi::{Ctx, Reply};

/// `DLOCK.INFO key`
pub struct Info;

impl Command for Info {
    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply(
            "dlock.info",
            args::info(argv).and_then(|k| info(ctx, k, strs.get(0))),
        )
    }
}

fn info(ctx: Ctx, key: &[u8], name: Option<ArgStr>) -> Result<Reply, LockError> {
    let db = ctx.selected_db();
    let lk = LockKey::open(ctx, key, name, false, None, true);
    let now = now_ms();
    let mut value = lk.value.clone();
    rules::prune_lapsed(&mut value, now);
    let waiters = registry().waiters_on(db, key);
    let fence = value.fence();
    let delay_left = match &value {
        LockValue::Semaphore(_) => 0,
        _ => LockDelay::load(ctx, key)
            .running_until(&value, now)
            .map_or(0, |ends| (ends - now).max(0)),
    };
    let remaining = |at: i64| (at - now).max(0);
    type Holder<'m> = (Vec<u8>, &'m str, i64, i64); // owner, mode, count, remaining ms

    // For a semaphore: its capacity and the permits nobody holds.
    let mut permits: Option<(i64, i64)> = None;
    let (kind, mode, lease, holders): (&str, Option<&str>, i64, Vec<Holder>) = match &value {
        LockValue::NotALock => return Err(LockError::WrongType),
        LockValue::Semaphore(sem) => {
            permits = Some((sem.capacity, sem.capacity - sem.used()));
            let holders = sem
                .holders
                .iter()
                .map(|(o, h)| (o.clone(), "permits", h.permits, remaining(h.deadline)))
                .collect();
            (
                "semaphore",
                None,
                value.expire_at().map_or(-1, remaining),
                holders,
            )
        }
        LockValue::Free => ("none", None, -2, vec![]),
        LockValue::Exclusive(x) => {
            let lease = x.expire_at.map_or(-1, remaining);
            let holders = x
                .holders
                .iter()
                .map(|(o, c)| (o.to_vec(), "exclusive", *c, lease))
                .collect();
            ("lock", Some("exclusive"), lease, holders)
        }
        LockValue::ReadWrite(rw) => {
            let mut holders = vec![];
            for (o, h) in &rw.holders {
                if h.write > 0 {
                    holders.push((o.clone(), "write", h.write, remaining(h.deadline)));
                }
                if h.read > 0 {
                    holders.push((o.clone(), "read", h.read, remaining(h.deadline)));
                }
            }
            let mode = if rw.is_write_locked() {
                "write"
            } else {
                "read"
            };
            (
                "rwlock",
                Some(mode),
                value.expire_at().map_or(-1, remaining),
                holders,
            )
        }
    };
    // Written by hand to keep the field order; RESP2 clients get the map as a flat array.
    let r = Replier(ctx);
    r.map(if permits.is_some() { 9 } else { 7 });
    r.bytes(b"kind");
    r.bytes(kind.as_bytes());
    if let Some((capacity, available)) = permits {
        r.bytes(b"capacity");
        r.int(capacity);
        r.bytes(b"available");
        r.int(available);
    }
    r.bytes(b"mode");
    match mode {
        Some(m) => r.bytes(m.as_bytes()),
        None => r.null(),
    }
    r.bytes(b"lease-ms");
    r.int(lease);
    r.bytes(b"holders");
    r.array(holders.len());
    for (owner, mode, count, lease) in &holders {
        r.array(4);
        r.bytes(owner);
        r.bytes(mode.as_bytes());
        r.int(*count);
        r.int(*lease);
    }
    r.bytes(b"waiters");
    r.int(waiters as i64);
    r.bytes(b"fence");
    match fence {
        Some(token) => r.int(token),
        None => r.null(),
    }
    r.bytes(b"delay-ms");
    r.int(delay_left);
    Ok(Reply::None)
}
