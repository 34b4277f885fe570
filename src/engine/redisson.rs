//! Redisson's lock scripts run natively (`DLOCK.REDISSON`, what the filter in `scripts`
//! renames them to): the same reply, the same keys, fields and TTLs, the same messages, the
//! same keyspace events (`hincrby`, `expire`, `del`, `set`...) as the Lua, and the writes
//! propagated as plain commands (HSET/PEXPIREAT/DEL/SET PXAT/PUBLISH). What the rules in
//! `dlock_core::redisson` leave to the script (a key of another type, a count that is not an
//! integer, a server that refuses writes now) runs as the real Lua through `RM_Call`.
//!
//! Waiters of dlock queued on a key a script changes are served as after the Lua: the
//! generic events (`del`, `expire`) reach the engine's handler (`listen::Keys`), which marks
//! the key for the recheck timer; the module's own notifications are not delivered to its own
//! subscription, so they are handed to the handler here.

use dlock_core::redisson::{self, Call, Fallback, Publish, UnlockStep};

use crate::ffi::call::CallReply;
use crate::ffi::command::Args;
use crate::ffi::key::{Key, KeyKind};
use crate::ffi::notify::{self, Class};
use crate::ffi::replicate::{self, propagate_key_int, CoreWrite};
use crate::ffi::reply::Replier;
use crate::ffi::{context, Ctx, RStr, Reply};
use crate::stats::{Stats, STATS};

use super::redisson_keys::{
    arg, changed, delete, latch_state, lock_state, pttl, read_field, read_string,
    set_field_and_lease, set_latch, Positions,
};

/// Serves `DLOCK.REDISSON script numkeys keys... args...` (`argv` without the command name,
/// `strs` the same as Redis strings).
pub fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
    let Some(script) = argv.first() else {
        return Reply::WrongArity;
    };
    // A digest is 40 bytes; every text served is longer.
    let sha = script.len() == 40;
    let tagged = strs.filter_tag().filter(|&i| i < redisson::SCRIPTS.len());
    let Some(i) = tagged.or_else(|| super::scripts::identify(script, sha)) else {
        return Reply::Error(
            "ERR dlock.redisson serves Redisson's lock scripts only (send them as EVAL or EVALSHA)"
                .into(),
        );
    };
    let call = redisson::parse(redisson::SCRIPTS[i].role, argv);
    let served = match call {
        Some(call) if ctx.writes_allowed() => serve(ctx, &call, strs),
        _ => Err(Fallback),
    };
    match served {
        Ok(reply) => {
            Stats::add(&STATS.redisson_served, 1);
            reply
        }
        Err(Fallback) => {
            Stats::add(&STATS.redisson_lua, 1);
            as_lua(ctx, sha, argv.len(), strs)
        }
    }
}

/// Runs the call as the script itself (`EVAL`/`EVALSHA` with the same arguments), its
/// writes propagated as the script's, and forwards its reply.
fn as_lua(ctx: Ctx, sha: bool, argc: usize, strs: Args) -> Reply {
    let words: Vec<RStr> = (0..argc)
        .filter_map(|i| strs.get(i))
        .map(|a| RStr::borrowed(ctx, a))
        .collect();
    let refs: Vec<&RStr> = words.iter().collect();
    let command = if sha { c"EVALSHA" } else { c"EVAL" };
    match CallReply::run_strs(ctx, command, &refs, true) {
        Some(reply) => {
            reply.forward(ctx);
            Reply::None
        }
        None => Reply::Error("ERR the script could not be run".into()),
    }
}

fn serve(ctx: Ctx, call: &Call, strs: Args) -> Result<Reply, Fallback> {
    let now = context::now_ms();
    match *call {
        Call::RwLock(ref call) => super::redisson_rwlock::serve(ctx, call, strs, now),
        Call::TryLock { lease_ms, .. } => {
            let at = Positions { numkeys: 1 };
            let (key, owner) = (arg(ctx, strs, at.key(0)), arg(ctx, strs, at.arg(1)));
            let k = Key::open(ctx, &key, true);
            let field = read_field(ctx, &k, &owner);
            match redisson::try_lock(lock_state(&k, &field))? {
                Some(count) => {
                    let v = RStr::number(ctx, count);
                    set_field_and_lease(ctx, &k, &key, &owner, &v, now + lease_ms);
                    Ok(Reply::Null)
                }
                None => Ok(Reply::Int(pttl(&k, now))),
            }
        }
        Call::Unlock {
            lease_ms,
            publish,
            latch,
            ..
        } => {
            let at = Positions {
                numkeys: if latch.is_some() { 3 } else { 2 },
            };
            if publish == Publish::SPublish && !replicate::shard_publish_available() {
                return Err(Fallback);
            }
            let latch_key = latch.map(|(_, ms)| (arg(ctx, strs, at.key(2)), ms));
            let latch_handle = latch_key
                .as_ref()
                .map(|(name, _)| Key::open(ctx, name, true));
            let latch_value = latch_handle.as_ref().map(read_string);
            let (key, owner) = (arg(ctx, strs, at.key(0)), arg(ctx, strs, at.arg(2)));
            let k = Key::open(ctx, &key, true);
            let field = read_field(ctx, &k, &owner);
            let step = redisson::unlock(latch_state(&latch_value), lock_state(&k, &field))?;
            let latch_to = |value: i64| {
                if let (Some(h), Some((name, ms))) = (&latch_handle, &latch_key) {
                    set_latch(ctx, h, name, value, now + ms);
                }
            };
            Ok(match step {
                UnlockStep::Latched(n) => Reply::Int(n),
                UnlockStep::NotHeld => Reply::Null,
                UnlockStep::Decremented(left) => {
                    let v = RStr::number(ctx, left);
                    set_field_and_lease(ctx, &k, &key, &owner, &v, now + lease_ms);
                    latch_to(0);
                    Reply::Int(0)
                }
                UnlockStep::Freed => {
                    notify::keyspace_event(ctx, Class::Hash, c"hincrby", &key);
                    delete(ctx, &k, &key);
                    drop(k);
                    let channel = arg(ctx, strs, at.key(1));
                    let message = arg(ctx, strs, at.arg(0));
                    replicate::publish_as_command(
                        ctx,
                        publish == Publish::SPublish,
                        &channel,
                        &message,
                    );
                    latch_to(1);
                    Reply::Int(1)
                }
            })
        }
        Call::ForceUnlock { publish, .. } => {
            if publish == Publish::SPublish && !replicate::shard_publish_available() {
                return Err(Fallback);
            }
            let at = Positions { numkeys: 2 };
            let key = arg(ctx, strs, at.key(0));
            let k = Key::open(ctx, &key, true);
            if k.kind() == KeyKind::Empty {
                return Ok(Reply::Int(0));
            }
            delete(ctx, &k, &key);
            drop(k);
            let (channel, message) = (arg(ctx, strs, at.key(1)), arg(ctx, strs, at.arg(0)));
            replicate::publish_as_command(ctx, publish == Publish::SPublish, &channel, &message);
            Ok(Reply::Int(1))
        }
        Call::Renew {
            batch,
            keys,
            lease_ms,
            ..
        } => {
            let at = Positions {
                numkeys: keys.len(),
            };
            // Every key is looked at before any is written: a key the script would stop at
            // (another type) leaves the whole call to the script.
            let mut opened = Vec::with_capacity(keys.len());
            for i in 0..keys.len() {
                let (key, owner) = (arg(ctx, strs, at.key(i)), arg(ctx, strs, at.arg(1 + i)));
                let k = Key::open(ctx, &key, true);
                let field = read_field(ctx, &k, &owner);
                let holds = redisson::renew(lock_state(&k, &field))?;
                opened.push((key, k, holds));
            }
            let reply = Replier(ctx);
            if batch {
                reply.array(opened.len());
            }
            for (key, k, holds) in &opened {
                if *holds {
                    k.set_abs_expire(Some(now + lease_ms));
                    propagate_key_int(ctx, CoreWrite::PexpireAt, key, now + lease_ms);
                    changed(ctx, key, true);
                }
                if batch {
                    reply.int(i64::from(*holds));
                }
            }
            Ok(if batch {
                Reply::None
            } else {
                Reply::Int(i64::from(opened[0].2))
            })
        }
    }
}
