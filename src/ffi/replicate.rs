//! Propagation to replicas and the AOF (`RedisModule_Replicate`). Redis wraps what one command
//! or one timer callback propagates in MULTI/EXEC. A key write is propagated as the core
//! command that makes the same change, and announced with that command's keyspace event.
//! Nothing is propagated when Redis would drop it (no AOF, no replication: see `targets`).
//!
//! Two writes that a command makes together on its hot path go as one plain `EVAL` of a
//! fixed script making the same core calls: a lock's first hold (`HSET` + `PEXPIREAT`) and a
//! release that publishes the unlock message (`DEL` + `PUBLISH`, replicas only). Each
//! `RedisModule_Replicate` costs ~2.5k instructions on 7.0 (a command look-up, an argument
//! vector), and two propagated writes make Redis add a MULTI/EXEC around them; one `EVAL`
//! is one look-up and no wrapper, still atomic on a replica or AOF without the module
//! (docs/DESIGN.md, Replication). Every propagated argument costs the master ~550 more
//! (Redis feeds the replication stream three pieces per argument): the constants of the hot
//! path (a first hold's count of 1, the unlock message `0`) are written in the scripts.

use std::ffi::CStr;

use redis_module::raw;

use super::notify::{self, Class};
use super::string::SharedStr;
use super::{api, targets, Ctx, RStr};

/// A lock's first hold: the field and its count, then the absolute expiry.
static HSET_PEXPIREAT: SharedStr = SharedStr::new(
    b"redis.call('hset',KEYS[1],ARGV[1],ARGV[2]) redis.call('pexpireat',KEYS[1],ARGV[3])",
);
/// The same with a count of 1 (the common first hold: one argument less).
static HSET_ONE_PEXPIREAT: SharedStr = SharedStr::new(
    b"redis.call('hset',KEYS[1],ARGV[1],'1') redis.call('pexpireat',KEYS[1],ARGV[2])",
);
/// A release that frees the lock: the key deleted, then the unlock message (`0`, as
/// Redisson's unlock script sends it) on the channel.
static DEL_PUBLISH: SharedStr =
    SharedStr::new(b"redis.call('del',KEYS[1]) redis.call('publish',ARGV[1],'0')");

/// MODULE UNLOAD: frees the scripts' strings.
pub fn free_scripts() {
    HSET_PEXPIREAT.free();
    HSET_ONE_PEXPIREAT.free();
    DEL_PUBLISH.free();
}

/// Propagates `cmd args...`. Up to six strings go one by one (formats "s" to "ssssss");
/// more as an array ("v"), which costs Redis one more reallocation.
pub fn replicate(ctx: Ctx, cmd: &CStr, args: &[&RStr]) {
    if !targets::get(ctx).any() {
        return;
    }
    replicate_to(ctx, cmd, c"", args);
}

/// [`replicate`] with Redis's target flags (`flags`: "" for both, "A" for replicas only),
/// without the targets check. False when Redis refused it: `cmd` is unknown there (a
/// `rename-command EVAL ""` in the configuration).
fn replicate_to(ctx: Ctx, cmd: &CStr, flags: &CStr, args: &[&RStr]) -> bool {
    let mut format = [0u8; 8];
    let fixed = args.len() <= 6;
    let n = if fixed { args.len() } else { 1 };
    format[..n].fill(if fixed { b's' } else { b'v' });
    let f = flags.to_bytes();
    format[n..n + f.len()].copy_from_slice(f);
    let format = CStr::from_bytes_until_nul(&format).expect("the format ends in NUL");
    let (c, p, f) = (ctx.as_ptr(), cmd.as_ptr(), format.as_ptr());
    let s = |i: usize| args[i].as_ptr();
    // SAFETY: (every arm) a live context; `cmd` and the format are NUL-terminated; the
    // variadic arguments are as many live strings as the format says ("v": an array of `len`
    // live strings, which `args` keeps alive for the call; the flags take no argument).
    let status = unsafe {
        let rm = api!(RedisModule_Replicate);
        match args.len() {
            1 => rm(c, p, f, s(0)),
            2 => rm(c, p, f, s(0), s(1)),
            3 => rm(c, p, f, s(0), s(1), s(2)),
            4 => rm(c, p, f, s(0), s(1), s(2), s(3)),
            5 => rm(c, p, f, s(0), s(1), s(2), s(3), s(4)),
            6 => rm(c, p, f, s(0), s(1), s(2), s(3), s(4), s(5)),
            _ => {
                let ptrs: Vec<*mut raw::RedisModuleString> =
                    args.iter().map(|a| a.as_ptr()).collect();
                rm(c, p, f, ptrs.as_ptr(), ptrs.len())
            }
        }
    };
    status == raw::REDISMODULE_OK as i32
}

/// Propagates `cmd key n`, the number as a string made here ("ss"): Redis's own "l" format
/// builds it through `sdsfromlonglong` plus an object, ~250 instructions more per call.
pub fn replicate_key_int(ctx: Ctx, cmd: &CStr, key: &RStr, n: i64) {
    if !targets::get(ctx).any() {
        return;
    }
    replicate(ctx, cmd, &[key, &RStr::number(ctx, n)]);
}

/// PUBLISHes `message` on `channel`, and propagates the PUBLISH to replicas only (not to the
/// AOF), as Redis's own PUBLISH does, in the running command's propagation (after a release's
/// DEL: see [`propagate_del_and_publish`]; docs/DESIGN.md, Replication, on why not from a
/// timer).
fn publish(ctx: Ctx, channel: &RStr, message: &RStr) {
    publish_here(ctx, channel, message);
    if targets::get(ctx).replicas {
        replicate_to(ctx, c"PUBLISH", c"A", &[channel, message]);
    }
}

/// Delivers the unlock message `0` on `channel` to this server's subscribers only, with no key
/// write beside it: a message held back and sent late (`engine::unlock`), which is only ever
/// held back where no replica receives propagation. Propagating nothing, it may run while
/// clients are paused.
pub fn publish_unlock_here(ctx: Ctx, channel: &RStr) {
    publish_here(ctx, channel, &RStr::number(ctx, 0));
}

/// Delivers `message` to this server's subscribers of `channel`; in cluster mode also to the
/// shard's subscribers of it (`SSUBSCRIBE`, as `SPUBLISH` does): Redisson 3.23+ and 4.x subscribe
/// to the unlock channel that way in a cluster on Redis 7+, and would hear no `PUBLISH`.
fn publish_here(ctx: Ctx, channel: &RStr, message: &RStr) {
    // SAFETY: a live context and strings.
    unsafe { api!(RedisModule_PublishMessage)(ctx.as_ptr(), channel.as_ptr(), message.as_ptr()) };
    if super::cluster::enabled(ctx) {
        // SAFETY: the API table is filled once at load, before any command runs (as for
        // `api!`); a live context and strings. Absent before Redis 7.0: nothing to do there.
        unsafe {
            if let Some(shard) = redis_module::raw::RedisModule_PublishMessageShard {
                shard(ctx.as_ptr(), channel.as_ptr(), message.as_ptr());
            }
        }
    }
}

/// `HSET key field value` then `PEXPIREAT key at` (both already applied through the key
/// API), propagated as one command, with their keyspace events.
pub fn propagate_hset_pexpireat(ctx: Ctx, key: &RStr, field: &RStr, value: &RStr, at: i64) {
    propagate_field_and_expiry(ctx, c"hset", key, field, value, at);
}

/// [`propagate_hset_pexpireat`] of a change that a script made with another hash command:
/// the field's keyspace event is `hash_event` (`hincrby`), the expiry's `expire`.
pub fn propagate_field_and_expiry(
    ctx: Ctx,
    hash_event: &CStr,
    key: &RStr,
    field: &RStr,
    value: &RStr,
    at: i64,
) {
    if targets::get(ctx).any() {
        let at = RStr::number(ctx, at);
        let one = RStr::number(ctx, 1);
        let sent = if value.bytes() == b"1" {
            let script = HSET_ONE_PEXPIREAT.get(ctx);
            replicate_to(ctx, c"EVAL", c"", &[&script, &one, key, field, &at])
        } else {
            let script = HSET_PEXPIREAT.get(ctx);
            replicate_to(ctx, c"EVAL", c"", &[&script, &one, key, field, value, &at])
        };
        if !sent {
            // EVAL renamed away: the two writes as they are (Redis wraps them in MULTI/EXEC).
            replicate(ctx, CoreWrite::Hset.command(), &[key, field, value]);
            replicate(ctx, CoreWrite::PexpireAt.command(), &[key, &at]);
        }
    }
    notify::keyspace_event(ctx, Class::Hash, hash_event, key);
    let (class, event) = CoreWrite::PexpireAt.event();
    notify::keyspace_event(ctx, class, event, key);
}

/// `SET key value PXAT at` (already applied through the key API), propagated as one command
/// (what Redis propagates for `SET ... PX`), with its keyspace events (`set`, `expire`).
pub fn propagate_set_pxat(ctx: Ctx, key: &RStr, value: &RStr, at: i64) {
    if targets::get(ctx).any() {
        let pxat = RStr::new(ctx, b"PXAT");
        let at = RStr::number(ctx, at);
        replicate(ctx, CoreWrite::Set.command(), &[key, value, &pxat, &at]);
    }
    notify::keyspace_event(ctx, Class::String, c"set", key);
    let (class, event) = CoreWrite::PexpireAt.event();
    notify::keyspace_event(ctx, class, event, key);
}

/// Whether this server lets modules publish to shard channels (`SPUBLISH`).
pub fn shard_publish_available() -> bool {
    // SAFETY: reads the API table, filled at load and never written afterwards.
    unsafe { raw::RedisModule_PublishMessageShard }.is_some()
}

/// `PUBLISH` (or `SPUBLISH`, `shard`) of `message` on `channel`, as a script's call of it
/// does: delivered here (and, in cluster mode, to the other nodes by Redis), propagated to
/// replicas only outside cluster mode (Redis's own `publishCommand`).
pub fn publish_as_command(ctx: Ctx, shard: bool, channel: &RStr, message: &RStr) -> bool {
    // SAFETY: reads the API table, filled at load and never written afterwards (the shard
    // function may be absent).
    let here = unsafe {
        match (shard, raw::RedisModule_PublishMessageShard) {
            (false, _) => api!(RedisModule_PublishMessage),
            (true, Some(f)) => f,
            (true, None) => return false,
        }
    };
    // SAFETY: a live context and strings.
    unsafe { here(ctx.as_ptr(), channel.as_ptr(), message.as_ptr()) };
    if targets::get(ctx).replicas && !ctx.in_cluster() {
        let cmd = if shard { c"SPUBLISH" } else { c"PUBLISH" };
        replicate_to(ctx, cmd, c"A", &[channel, message]);
    }
    true
}

/// `DEL key` (already applied) with its keyspace event, then [`publish`] of the unlock
/// message `0` on `channel`. When only replicas receive propagation, both go as one command;
/// the AOF, like Redis's own PUBLISH, never gets the message, so with the AOF on they go apart.
pub fn propagate_del_and_publish(ctx: Ctx, key: &RStr, channel: &RStr) {
    let t = targets::get(ctx);
    let message = &RStr::number(ctx, 0);
    let as_one = || {
        let script = DEL_PUBLISH.get(ctx);
        let one = RStr::number(ctx, 1);
        replicate_to(ctx, c"EVAL", c"", &[&script, &one, key, channel])
    };
    // EVAL renamed away (`as_one` false): the `else` branch, two commands in MULTI/EXEC.
    if t.replicas && !t.aof && as_one() {
        let (class, event) = CoreWrite::Del.event();
        notify::keyspace_event(ctx, class, event, key);
        publish_here(ctx, channel, message);
    } else {
        propagate(ctx, CoreWrite::Del, &[key]);
        publish(ctx, channel, message);
    }
}

/// A change to a key, as the core command that makes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreWrite {
    Hset,
    Hdel,
    Del,
    PexpireAt,
    Persist,
    Set,
}

impl CoreWrite {
    fn command(self) -> &'static CStr {
        match self {
            CoreWrite::Hset => c"HSET",
            CoreWrite::Hdel => c"HDEL",
            CoreWrite::Del => c"DEL",
            CoreWrite::PexpireAt => c"PEXPIREAT",
            CoreWrite::Persist => c"PERSIST",
            CoreWrite::Set => c"SET",
        }
    }

    /// The keyspace event the core command sends (PEXPIREAT, like EXPIRE, sends `expire`).
    fn event(self) -> (Class, &'static CStr) {
        match self {
            CoreWrite::Hset => (Class::Hash, c"hset"),
            CoreWrite::Hdel => (Class::Hash, c"hdel"),
            CoreWrite::Del => (Class::Generic, c"del"),
            CoreWrite::PexpireAt => (Class::Generic, c"expire"),
            CoreWrite::Persist => (Class::Generic, c"persist"),
            CoreWrite::Set => (Class::String, c"set"),
        }
    }
}

/// [`propagate`] of a write whose one argument after the key is a number.
pub fn propagate_key_int(ctx: Ctx, write: CoreWrite, key: &RStr, n: i64) {
    replicate_key_int(ctx, write.command(), key, n);
    let (class, event) = write.event();
    notify::keyspace_event(ctx, class, event, key);
}

/// Propagates `write key args...` (already applied through the key API) and sends its
/// keyspace event about `key`. The caller signals the key as modified once per save.
pub fn propagate(ctx: Ctx, write: CoreWrite, key_and_args: &[&RStr]) {
    replicate(ctx, write.command(), key_and_args);
    let (class, event) = write.event();
    notify::keyspace_event(ctx, class, event, key_and_args[0]);
}
