//! The command handlers: parse, open the key, serve its queue, apply the lock logic, store,
//! reply. The lock rules themselves are in `logic`; waiting and grants in `waiters`.

use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::{raw, Context, RedisError, RedisValue};

use crate::blocking;
use crate::config;
use crate::stats::{Stats, STATS};
use crate::store::{self, LockKey};
use crate::waiters;
use dlock_core::args::{self, AcquireArgs};
use dlock_core::error::LockError;
use dlock_core::model::LockValue;
use dlock_core::names;
use dlock_core::rules::{self, Released};

/// Runs a handler over the argument bytes (command name stripped), straight from Redis's argv
/// (no per-argument wrapper objects), and replies, counting errors.
///
/// # Safety
/// `argv` holds `argc` (>= 1) valid strings, as Redis passes them to a command.
unsafe fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    name: &str,
    handler: impl FnOnce(&Context, &[&[u8]], KeyArg) -> Result<RedisValue, LockError>,
) -> c_int {
    let context = Context::new(ctx);
    let raw_args = std::slice::from_raw_parts(argv, argc.max(0) as usize);
    // Valid commands have at most 7 words: keep them on the stack.
    let mut small: [&[u8]; 8] = [&[]; 8];
    let heap: Vec<&[u8]>;
    let words: &[&[u8]] = if raw_args.len() <= small.len() {
        for (slot, arg) in small.iter_mut().zip(raw_args) {
            *slot = store::bytes_of(*arg);
        }
        &small[..raw_args.len()]
    } else {
        heap = raw_args.iter().map(|a| store::bytes_of(*a)).collect();
        &heap
    };
    let key_arg = raw_args.get(1).and_then(|k| NonNull::new(*k));
    let result = handler(&context, words.get(1..).unwrap_or(&[]), key_arg).map_err(|e| {
        Stats::add(&STATS.errors, 1);
        match e {
            LockError::WrongArity => RedisError::WrongArity,
            other => RedisError::String(other.message(name)),
        }
    });
    context.reply(result) as c_int
}

/// The key argument's own string (argv[1]), shared with the key API instead of copied.
type KeyArg = Option<NonNull<raw::RedisModuleString>>;

/// Command entry points, registered in `lib.rs`.
///
/// # Safety
/// Called by Redis only, with a valid context and `argc` valid argument strings.
#[allow(clippy::missing_safety_doc)]
pub mod entry {
    use super::*;

    pub unsafe extern "C" fn acquire(
        ctx: *mut raw::RedisModuleCtx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> c_int {
        dispatch(ctx, argv, argc, "dlock.acquire", |ctx, a, k| {
            super::acquire(ctx, args::acquire(a)?, k)
        })
    }

    pub unsafe extern "C" fn rwlock(
        ctx: *mut raw::RedisModuleCtx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> c_int {
        dispatch(ctx, argv, argc, "dlock.rwlock", |ctx, a, k| {
            super::acquire(ctx, args::rwlock(a)?, k)
        })
    }

    pub unsafe extern "C" fn release(
        ctx: *mut raw::RedisModuleCtx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> c_int {
        dispatch(ctx, argv, argc, "dlock.release", |ctx, a, k| {
            super::release(ctx, args::release(a)?, k)
        })
    }

    pub unsafe extern "C" fn renew(
        ctx: *mut raw::RedisModuleCtx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> c_int {
        dispatch(ctx, argv, argc, "dlock.renew", |ctx, a, k| {
            super::renew(ctx, args::renew(a)?, k)
        })
    }

    pub unsafe extern "C" fn info(
        ctx: *mut raw::RedisModuleCtx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> c_int {
        dispatch(ctx, argv, argc, "dlock.info", |ctx, a, k| {
            super::info(ctx, args::info(a)?, k)
        })
    }
}

fn grant_reply(count: i64, fence: Option<i64>) -> RedisValue {
    match fence {
        Some(token) => {
            RedisValue::Array(vec![RedisValue::Integer(count), RedisValue::Integer(token)])
        }
        None => RedisValue::Integer(count),
    }
}

/// DLOCK.ACQUIRE and DLOCK.RWLOCK.
fn acquire(ctx: &Context, a: AcquireArgs, name: KeyArg) -> Result<RedisValue, LockError> {
    let db = store::selected_db(ctx);
    waiters::with_lock(ctx, db, a.key, name, Some(a.owner), |reg, lk, now| {
        let queue_ahead = reg.waiters_on(db, a.key) > 0;
        let grant = waiters::try_grant(
            ctx,
            lk,
            a.owner,
            a.want,
            a.lease_ms,
            now,
            queue_ahead,
            a.fence,
        );
        match grant {
            Ok(Some((count, fence))) => Ok(grant_reply(count, fence)),
            Ok(None) => match a.wait_ms {
                Some(wait_ms) if blocking::may_block(ctx) => reg
                    .enqueue(ctx, db, &a, wait_ms)
                    .map(|()| RedisValue::NoReply),
                _ => Ok(RedisValue::Null),
            },
            Err(e) => Err(e),
        }
    })
}

/// DLOCK.RELEASE.
fn release(ctx: &Context, a: args::ReleaseArgs, name: KeyArg) -> Result<RedisValue, LockError> {
    let db = store::selected_db(ctx);
    let (result, freed_exclusive) =
        waiters::with_lock(ctx, db, a.key, name, Some(a.owner), |reg, lk, now| {
            let was_exclusive = matches!(lk.value, LockValue::Exclusive(_));
            let result = rules::release(&mut lk.value, a.owner, a.mode);
            if let Ok(Released::Last) = result {
                // Hand-off inside this command: no window for another client or script.
                waiters::serve(ctx, reg, db, lk, now);
            }
            let freed =
                result == Ok(Released::Last) && was_exclusive && lk.value == LockValue::Free;
            (result, freed)
        });
    if let Ok(Released::Last | Released::Decremented) = result {
        Stats::add(&STATS.releases, 1);
    }
    if freed_exclusive {
        // Nobody in the queue took it: wake Redisson-style waiters (same MULTI as the DEL).
        let cfg = config::get();
        if cfg.publish {
            store::publish(
                ctx,
                &names::unlock_channel(&cfg.channel_prefix, a.key),
                b"0",
            );
        }
    }
    match result? {
        Released::Last => Ok(RedisValue::Integer(1)),
        Released::Decremented => Ok(RedisValue::Integer(0)),
        Released::NotHeld => Ok(RedisValue::Null),
    }
}

/// DLOCK.RENEW.
fn renew(ctx: &Context, a: args::RenewArgs, name: KeyArg) -> Result<RedisValue, LockError> {
    let db = store::selected_db(ctx);
    let result = waiters::with_lock(ctx, db, a.key, name, Some(a.owner), |_, lk, now| {
        rules::renew(&mut lk.value, a.owner, a.lease_ms, now)
    });
    if result == Ok(true) {
        Stats::add(&STATS.renewals, 1);
    }
    Ok(RedisValue::Integer(result? as i64))
}

/// DLOCK.INFO: reads only (lapsed read-write holders are left out, not removed).
fn info(ctx: &Context, key: &[u8], name: KeyArg) -> Result<RedisValue, LockError> {
    let db = store::selected_db(ctx);
    let lk = LockKey::open(ctx, key, name, false, None);
    let now = store::now_ms();
    let mut value = lk.value.clone();
    rules::prune_lapsed(&mut value, now);
    let waiters = waiters::registry().waiters_on(db, key);
    let fence = store::FenceKey::of(key).get(ctx)?;
    let remaining = |at: i64| (at - now).max(0);
    type Holder<'m> = (Vec<u8>, &'m str, i64, i64); // owner, mode, count, remaining ms
    let (kind, mode, lease, holders): (&str, Option<&str>, i64, Vec<Holder>) = match &value {
        LockValue::NotALock => return Err(LockError::WrongType),
        LockValue::Free => ("none", None, -2, vec![]),
        LockValue::Exclusive(x) => {
            let lease = x.expire_at.map_or(-1, remaining);
            let holders = x
                .holders
                .iter()
                .map(|(o, c)| (o.clone(), "exclusive", *c, lease))
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
    let raw_ctx = ctx.get_raw();
    unsafe {
        let reply_str = |s: &[u8]| {
            raw::RedisModule_ReplyWithStringBuffer.unwrap()(raw_ctx, s.as_ptr().cast(), s.len());
        };
        let reply_int = |n: i64| {
            raw::RedisModule_ReplyWithLongLong.unwrap()(raw_ctx, n);
        };
        raw::RedisModule_ReplyWithMap.unwrap()(raw_ctx, 6);
        reply_str(b"kind");
        reply_str(kind.as_bytes());
        reply_str(b"mode");
        match mode {
            Some(m) => reply_str(m.as_bytes()),
            None => {
                raw::RedisModule_ReplyWithNull.unwrap()(raw_ctx);
            }
        }
        reply_str(b"lease-ms");
        reply_int(lease);
        reply_str(b"holders");
        raw::RedisModule_ReplyWithArray.unwrap()(raw_ctx, holders.len() as _);
        for (owner, mode, count, lease) in &holders {
            raw::RedisModule_ReplyWithArray.unwrap()(raw_ctx, 4);
            reply_str(owner);
            reply_str(mode.as_bytes());
            reply_int(*count);
            reply_int(*lease);
        }
        reply_str(b"waiters");
        reply_int(waiters as i64);
        reply_str(b"fence");
        match fence {
            Some(token) => reply_int(token),
            None => {
                raw::RedisModule_ReplyWithNull.unwrap()(raw_ctx);
            }
        }
    }
    Ok(RedisValue::NoReply)
}
