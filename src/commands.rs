//! The command handlers: parse, open the key, serve its queue, apply the lock logic, store,
//! reply. The lock rules themselves are in `logic`; waiting and grants in `waiters`.

use redis_module::{raw, Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::args::{self, AcquireArgs};
use crate::blocking;
use crate::config;
use crate::error::LockError;
use crate::logic::{self, Grant, Released};
use crate::model::LockValue;
use crate::names;
use crate::stats::{Stats, STATS};
use crate::store::{self, LockKey};
use crate::waiters::{self, count_grant};

/// Runs a handler over the raw argument bytes (command name stripped) and turns its error
/// into the reply, counting it.
fn run(
    ctx: &Context,
    name: &str,
    args: Vec<RedisString>,
    handler: impl FnOnce(&Context, &[&[u8]]) -> Result<RedisValue, LockError>,
) -> RedisResult {
    let argv: Vec<&[u8]> = args.iter().skip(1).map(|a| a.as_slice()).collect();
    match handler(ctx, &argv) {
        Ok(v) => Ok(v),
        Err(e) => {
            Stats::add(&STATS.errors, 1);
            match e {
                LockError::WrongArity => Err(RedisError::WrongArity),
                other => Err(RedisError::String(other.message(name))),
            }
        }
    }
}

pub fn acquire_cmd(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, "dlock.acquire", args, |ctx, argv| {
        acquire(ctx, args::acquire(argv)?)
    })
}

pub fn rwlock_cmd(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, "dlock.rwlock", args, |ctx, argv| {
        acquire(ctx, args::rwlock(argv)?)
    })
}

pub fn release_cmd(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, "dlock.release", args, |ctx, argv| {
        release(ctx, args::release(argv)?)
    })
}

pub fn renew_cmd(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, "dlock.renew", args, |ctx, argv| {
        renew(ctx, args::renew(argv)?)
    })
}

pub fn info_cmd(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, "dlock.info", args, |ctx, argv| {
        info(ctx, &args::info(argv)?)
    })
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
fn acquire(ctx: &Context, a: AcquireArgs) -> Result<RedisValue, LockError> {
    let db = store::selected_db(ctx);
    let mut lk = LockKey::open(ctx, &a.key, true);
    let now = store::now_ms();
    let mut reg = waiters::registry();
    waiters::prepare(ctx, &mut reg, db, &mut lk, now);
    let queue_ahead = reg.waiters_on(db, &a.key) > 0;
    let before = lk.value.clone();
    let reply = match logic::acquire(
        &mut lk.value,
        &a.owner,
        a.want,
        a.lease_ms,
        now,
        queue_ahead,
    ) {
        Grant::Granted {
            count,
            fresh_exclusive,
        } => match waiters::fence_on_grant(ctx, &a.key, fresh_exclusive, a.fence) {
            Ok(fence) => {
                count_grant(count);
                Ok(grant_reply(count, fence))
            }
            Err(e) => {
                lk.value = before;
                Err(e)
            }
        },
        Grant::Busy => match a.wait_ms {
            Some(wait_ms) if blocking::may_block(ctx) => reg
                .enqueue(ctx, db, &a, wait_ms)
                .map(|()| RedisValue::NoReply),
            _ => Ok(RedisValue::Null),
        },
        Grant::Refused(e) => Err(e),
    };
    lk.save();
    waiters::rearm(ctx, &mut reg, db, &lk, now);
    reply
}

/// DLOCK.RELEASE.
fn release(ctx: &Context, a: args::ReleaseArgs) -> Result<RedisValue, LockError> {
    let db = store::selected_db(ctx);
    let mut lk = LockKey::open(ctx, &a.key, true);
    let now = store::now_ms();
    let mut reg = waiters::registry();
    waiters::prepare(ctx, &mut reg, db, &mut lk, now);
    let was_exclusive = matches!(lk.value, LockValue::Exclusive(_));
    let result = logic::release(&mut lk.value, &a.owner, a.mode);
    if let Ok(Released::Last | Released::Decremented) = result {
        Stats::add(&STATS.releases, 1);
    }
    if let Ok(Released::Last) = result {
        // Hand-off inside this command: no window for another client or script.
        waiters::serve(ctx, &mut reg, db, &mut lk, now);
    }
    lk.save();
    if result == Ok(Released::Last) && was_exclusive && lk.value == LockValue::Free {
        let cfg = config::get();
        if cfg.publish {
            store::publish(
                ctx,
                &names::unlock_channel(&cfg.channel_prefix, &a.key),
                b"0",
            );
        }
    }
    waiters::rearm(ctx, &mut reg, db, &lk, now);
    match result? {
        Released::Last => Ok(RedisValue::Integer(1)),
        Released::Decremented => Ok(RedisValue::Integer(0)),
        Released::NotHeld => Ok(RedisValue::Null),
    }
}

/// DLOCK.RENEW.
fn renew(ctx: &Context, a: args::RenewArgs) -> Result<RedisValue, LockError> {
    let db = store::selected_db(ctx);
    let mut lk = LockKey::open(ctx, &a.key, true);
    let now = store::now_ms();
    let mut reg = waiters::registry();
    waiters::prepare(ctx, &mut reg, db, &mut lk, now);
    let result = logic::renew(&mut lk.value, &a.owner, a.lease_ms, now);
    lk.save();
    waiters::rearm(ctx, &mut reg, db, &lk, now);
    if result == Ok(true) {
        Stats::add(&STATS.renewals, 1);
    }
    Ok(RedisValue::Integer(result? as i64))
}

/// DLOCK.INFO: reads only (lapsed read-write holders are left out, not removed).
fn info(ctx: &Context, key: &[u8]) -> Result<RedisValue, LockError> {
    let db = store::selected_db(ctx);
    let lk = LockKey::open(ctx, key, false);
    let now = store::now_ms();
    let mut value = lk.value.clone();
    logic::prune_lapsed(&mut value, now);
    let waiters = waiters::registry().waiters_on(db, key);
    let fence = store::FenceKey::of(key).get(ctx)?;
    let remaining = |at: i64| (at - now).max(0);
    let (kind, mode, lease, holders): (&str, Option<&str>, i64, Vec<(Vec<u8>, &str, i64, i64)>) =
        match &value {
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
