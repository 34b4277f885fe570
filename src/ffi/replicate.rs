//! Propagation to replicas and the AOF (`RedisModule_Replicate`). Redis wraps what one command
//! or one timer callback propagates in MULTI/EXEC. A key write is propagated as the core
//! command that makes the same change, and announced with that command's keyspace event.
//! Nothing is propagated when Redis would drop it (no AOF, no replication: see `targets`).

use std::ffi::CStr;

use redis_module::raw;

use super::notify::{self, Class};
use super::{api, targets, Ctx, RStr};

/// Propagates `cmd args...`. Up to three strings go one by one (formats "s", "ss", "sss");
/// more as an array ("v"), which costs Redis one more reallocation.
pub fn replicate(ctx: Ctx, cmd: &CStr, args: &[&RStr]) {
    if !targets::get(ctx).any() {
        return;
    }
    let (c, p) = (ctx.as_ptr(), cmd.as_ptr());
    // SAFETY: (every arm) a live context; `cmd` and the format are NUL-terminated; the
    // variadic arguments are as many live strings as the format says ("v": an array of `len`
    // live strings, which `args` keeps alive for the call).
    unsafe {
        let rm = api!(RedisModule_Replicate);
        match args {
            [a] => rm(c, p, c"s".as_ptr(), a.as_ptr()),
            [a, b] => rm(c, p, c"ss".as_ptr(), a.as_ptr(), b.as_ptr()),
            [a, b, d] => rm(c, p, c"sss".as_ptr(), a.as_ptr(), b.as_ptr(), d.as_ptr()),
            _ => {
                let ptrs: Vec<*mut raw::RedisModuleString> =
                    args.iter().map(|a| a.as_ptr()).collect();
                rm(c, p, c"v".as_ptr(), ptrs.as_ptr(), ptrs.len())
            }
        };
    }
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
/// AOF), as Redis's own PUBLISH does. It goes in the command's own MULTI/EXEC with the DEL:
/// sending it from a timer instead saved ~1.3k instructions per release in a pipelined
/// benchmark but cost ~2.8k more per release when each command is its own event-loop turn
/// (docs/DESIGN.md, Replication).
pub fn publish(ctx: Ctx, channel: &RStr, message: &RStr) {
    // SAFETY: a live context and strings.
    unsafe { api!(RedisModule_PublishMessage)(ctx.as_ptr(), channel.as_ptr(), message.as_ptr()) };
    if !targets::get(ctx).replicas {
        return;
    }
    // SAFETY: a live context; the command name and format are NUL-terminated; the variadic
    // arguments are two live strings, as "ssA" says ("A": not to the AOF; takes no argument).
    unsafe {
        api!(RedisModule_Replicate)(
            ctx.as_ptr(),
            c"PUBLISH".as_ptr(),
            c"ssA".as_ptr(),
            channel.as_ptr(),
            message.as_ptr(),
        )
    };
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
