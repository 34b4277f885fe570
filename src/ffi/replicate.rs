//! Propagation to replicas and the AOF (`RedisModule_Replicate`). Redis wraps what one command
//! or one timer callback propagates in MULTI/EXEC. A key write is propagated as the core
//! command that makes the same change, and announced with that command's keyspace event.

use std::ffi::CStr;

use redis_module::raw;

use super::notify::{self, Class};
use super::{api, Ctx, RStr};

/// Propagates `cmd args...` (format "v": an array of strings, so the strings already made for
/// the key API are reused).
pub fn replicate(ctx: Ctx, cmd: &CStr, args: &[&RStr]) {
    // At most 1 + 2 * fields of a read-write lock; 16 on the stack covers every dlock write
    // but a read-write lock with many readers.
    let mut small = [std::ptr::null_mut::<raw::RedisModuleString>(); 16];
    let heap: Vec<*mut raw::RedisModuleString>;
    let ptrs: &[*mut raw::RedisModuleString] = if args.len() <= small.len() {
        for (slot, a) in small.iter_mut().zip(args) {
            *slot = a.as_ptr();
        }
        &small[..args.len()]
    } else {
        heap = args.iter().map(|a| a.as_ptr()).collect();
        &heap
    };
    // SAFETY: a live context; `cmd` and "v" are NUL-terminated; "v" takes an array of
    // `len` live strings, which `args` keeps alive for the call.
    unsafe {
        api!(RedisModule_Replicate)(
            ctx.as_ptr(),
            cmd.as_ptr(),
            c"v".as_ptr(),
            ptrs.as_ptr(),
            ptrs.len(),
        );
    }
}

/// PUBLISHes `message` on `channel` here, and propagates the PUBLISH.
pub fn publish(ctx: Ctx, channel: &RStr, message: &RStr) {
    // SAFETY: a live context and strings.
    unsafe { api!(RedisModule_PublishMessage)(ctx.as_ptr(), channel.as_ptr(), message.as_ptr()) };
    replicate(ctx, c"PUBLISH", &[channel, message]);
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

/// Propagates `write key args...` (already applied through the key API) and sends its
/// keyspace event about `key`. The caller signals the key as modified once per save.
pub fn propagate(ctx: Ctx, write: CoreWrite, key_and_args: &[&RStr]) {
    replicate(ctx, write.command(), key_and_args);
    let (class, event) = write.event();
    notify::keyspace_event(ctx, class, event, key_and_args[0]);
}
