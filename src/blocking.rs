//! A small safe layer over the raw blocking and timer API, which redis-module's wrappers do
//! not cover (no reply/timeout callbacks, no disconnect callback).
//!
//! Design (see docs/DESIGN.md): clients are blocked with **no Redis time-out**; the module
//! owns every deadline with its own millisecond timers. A waiter leaves the queue in exactly
//! one place (grant, time-out, disconnect, CLIENT UNBLOCK, key overwritten), and only the path
//! that removed it calls `RM_UnblockClient`, so "granted" and "timed out" cannot both happen.

use std::ffi::c_void;
use std::os::raw::c_int;

use redis_module::raw;
use redis_module::Context;

/// What a blocked client is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Granted: the hold count, and the fencing token when FENCE was asked.
    Granted { count: i64, fence: Option<i64> },
    /// The WAIT time-out passed: null.
    TimedOut,
    /// An error reply (e.g. WRONGTYPE when the key was overwritten).
    Error(String),
}

/// A client this module blocked (`RedisModuleBlockedClient *`). Only the main thread uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockedClient(*mut raw::RedisModuleBlockedClient);

// Redis calls the module from its main thread only; the handle never crosses threads, but it
// lives in a global registry behind a Mutex, which needs Send.
unsafe impl Send for BlockedClient {}

impl BlockedClient {
    /// Blocks the client of the running command until `unblock`; the command must then return
    /// without a reply. Call only when the context may block (see `may_block`).
    pub fn block(ctx: &Context) -> BlockedClient {
        unsafe {
            let bc = raw::RedisModule_BlockClient.unwrap()(
                ctx.get_raw(),
                Some(reply_callback),
                Some(unblocked_by_client_unblock),
                Some(free_outcome),
                0, // no Redis time-out: the module's timers own the deadlines
            );
            raw::RedisModule_SetDisconnectCallback.unwrap()(bc, Some(disconnected));
            BlockedClient(bc)
        }
    }

    /// Answers the client with `outcome` (on Redis's next event-loop turn), or frees the handle
    /// without an answer (`None`: the client is gone or was answered by Redis).
    pub fn unblock(self, outcome: Option<Outcome>) {
        let privdata = outcome.map_or(std::ptr::null_mut(), |o| {
            Box::into_raw(Box::new(o)).cast::<c_void>()
        });
        unsafe { raw::RedisModule_UnblockClient.unwrap()(self.0, privdata) };
    }
}

/// Whether the running command may block its client: not inside MULTI/EXEC, a script, or
/// another context that forbids blocking (then WAIT behaves as if absent, like BLPOP).
pub fn may_block(ctx: &Context) -> bool {
    let flags = unsafe { raw::RedisModule_GetContextFlags.unwrap()(ctx.get_raw()) } as u32;
    let forbid = raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING;
    flags & forbid == 0
}

/// Whether this server may grant locks on its own (timers, events): a master that is not
/// loading. A replica with the module must leave the master's replicated deletes alone.
pub fn may_write(ctx: &Context) -> bool {
    let flags = unsafe { raw::RedisModule_GetContextFlags.unwrap()(ctx.get_raw()) } as u32;
    flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
        && flags & raw::REDISMODULE_CTX_FLAGS_LOADING == 0
}

unsafe extern "C" fn reply_callback(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let outcome = raw::RedisModule_GetBlockedClientPrivateData.unwrap()(ctx).cast::<Outcome>();
    match outcome.as_ref() {
        Some(Outcome::Granted {
            count,
            fence: Some(token),
        }) => {
            raw::RedisModule_ReplyWithArray.unwrap()(ctx, 2);
            raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, *count);
            raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, *token);
        }
        Some(Outcome::Granted { count, fence: None }) => {
            raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, *count);
        }
        Some(Outcome::Error(msg)) => {
            let c = crate::store::cstring(msg);
            raw::RedisModule_ReplyWithError.unwrap()(ctx, c.as_ptr());
        }
        Some(Outcome::TimedOut) | None => {
            raw::RedisModule_ReplyWithNull.unwrap()(ctx);
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// Redis calls this only for CLIENT UNBLOCK (we never give Redis a time-out): answer null,
/// like BLPOP, and leave the queue.
unsafe extern "C" fn unblocked_by_client_unblock(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let bc = BlockedClient(raw::RedisModule_GetBlockedClientHandle.unwrap()(ctx));
    if crate::waiters::client_gone(&Context::new(ctx), bc) {
        bc.unblock(None);
    }
    raw::RedisModule_ReplyWithNull.unwrap()(ctx);
    raw::REDISMODULE_OK as c_int
}

/// The client disconnected (or CLIENT UNBLOCK ... ERROR, or the server turned replica).
unsafe extern "C" fn disconnected(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let bc = BlockedClient(bc);
    if crate::waiters::client_gone(&Context::new(ctx), bc) {
        bc.unblock(None);
    }
}

unsafe extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        drop(Box::from_raw(privdata.cast::<Outcome>()));
    }
}

/// A module timer id.
pub type TimerId = raw::RedisModuleTimerID;

/// Why a timer was armed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimerJob {
    /// The WAIT time-out of waiter `seq` on `key`.
    WaitTimeout { db: i32, key: Vec<u8>, seq: u64 },
    /// A lease on `key` may have run out: serve its queue.
    LeaseCheck { db: i32, key: Vec<u8> },
    /// Keys touched by keyspace/server events: serve their queues.
    Recheck,
}

/// Arms a one-shot timer that runs `waiters::on_timer(job)` after `delay_ms`.
pub fn start_timer(ctx: &Context, delay_ms: i64, job: TimerJob) -> TimerId {
    let data = Box::into_raw(Box::new(job)).cast::<c_void>();
    unsafe {
        raw::RedisModule_CreateTimer.unwrap()(ctx.get_raw(), delay_ms.max(0), Some(on_timer), data)
    }
}

/// Stops a timer that has not fired yet.
pub fn stop_timer(ctx: &Context, id: TimerId) {
    let mut data: *mut c_void = std::ptr::null_mut();
    let ok = unsafe { raw::RedisModule_StopTimer.unwrap()(ctx.get_raw(), id, &mut data) };
    if ok == raw::REDISMODULE_OK as c_int && !data.is_null() {
        drop(unsafe { Box::from_raw(data.cast::<TimerJob>()) });
    }
}

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let job = *Box::from_raw(data.cast::<TimerJob>());
    let ctx = Context::new(ctx);
    crate::waiters::on_timer(&ctx, job);
}
