//! Blocked clients (`RedisModuleBlockedClient`), which redis-module's wrappers do not cover
//! (no reply or disconnect callbacks).
//!
//! Clients are blocked with **no Redis time-out**: the module owns every deadline with its own
//! timers. A [`BlockedClient`] is a move-only handle and [`BlockedClient::unblock`] consumes
//! it, so a client cannot be answered twice; whoever removes a waiter from its queue owns the
//! handle and is the only one that can unblock it.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::raw;

use super::{api, Ctx, Reply};

/// A client this module blocked. Not `Copy` or `Clone`: see the module doc.
#[derive(Debug)]
pub struct BlockedClient(NonNull<raw::RedisModuleBlockedClient>);

// SAFETY: Redis calls the module from its main thread only; the handle never crosses threads,
// but it lives in a global registry behind a Mutex, which needs Send.
unsafe impl Send for BlockedClient {}

/// Names a blocked client (for lookups); does not give the right to unblock it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientId(usize);

/// What the layer above does when a blocked client leaves on its own.
pub trait BlockHandler {
    /// The client disconnected, was unblocked by CLIENT UNBLOCK, or the server turned
    /// replica. Returns the handle if the client was still queued (it is then freed).
    fn client_gone(ctx: Ctx, id: ClientId) -> Option<BlockedClient>;
}

impl BlockedClient {
    /// Blocks the client of the running command until `unblock`; the command must then reply
    /// [`Reply::None`]. Call only when the context may block (`Ctx::may_block`).
    pub fn block<H: BlockHandler>(ctx: Ctx) -> BlockedClient {
        // SAFETY: a live command context; the callbacks match the signatures Redis expects;
        // timeout 0: Redis never times the client out.
        let bc = unsafe {
            let bc = api!(RedisModule_BlockClient)(
                ctx.as_ptr(),
                Some(reply_callback),
                Some(unblocked_by_client_unblock::<H>),
                Some(free_reply),
                0,
            );
            api!(RedisModule_SetDisconnectCallback)(bc, Some(disconnected::<H>));
            bc
        };
        BlockedClient(NonNull::new(bc).expect("RedisModule_BlockClient"))
    }

    /// A handle that names nothing, for unit tests of the structures that store handles
    /// (never unblocked).
    #[cfg(test)]
    pub fn for_test(n: usize) -> BlockedClient {
        BlockedClient(NonNull::new((n + 1) as *mut raw::RedisModuleBlockedClient).unwrap())
    }

    pub fn id(&self) -> ClientId {
        ClientId(self.0.as_ptr() as usize)
    }

    /// Answers the client with `reply` (on Redis's next event-loop turn), or frees the handle
    /// without an answer (`None`: the client is gone or was answered by Redis).
    pub fn unblock(self, reply: Option<Reply>) {
        let privdata = reply.map_or(std::ptr::null_mut(), |r| {
            Box::into_raw(Box::new(r)).cast::<c_void>()
        });
        // SAFETY: the handle is live (unblocked only here, and `self` is consumed); Redis
        // owns `privdata` from now on and hands it to `reply_callback` then `free_reply`.
        unsafe { api!(RedisModule_UnblockClient)(self.0.as_ptr(), privdata) };
    }
}

unsafe extern "C" fn reply_callback(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: Redis passes the reply context of the unblocked client; its private data is the
    // `Reply` boxed by `unblock`, or null.
    unsafe {
        let ctx = Ctx::from_raw(ctx);
        let reply = api!(RedisModule_GetBlockedClientPrivateData)(ctx.as_ptr()).cast::<Reply>();
        match reply.as_ref() {
            Some(r) => r.send(ctx),
            None => Reply::Null.send(ctx),
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// Redis calls this only for CLIENT UNBLOCK (no Redis time-out is ever set): answer null,
/// like BLPOP, and leave the queue.
unsafe extern "C" fn unblocked_by_client_unblock<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: Redis passes a live context of the blocked client.
    let (ctx, id) = unsafe {
        let ctx = Ctx::from_raw(ctx);
        let bc = api!(RedisModule_GetBlockedClientHandle)(ctx.as_ptr());
        (ctx, ClientId(bc as usize))
    };
    if let Some(bc) = H::client_gone(ctx, id) {
        bc.unblock(None);
    }
    Reply::Null.send(ctx);
    raw::REDISMODULE_OK as c_int
}

/// The client disconnected (or CLIENT UNBLOCK ... ERROR, or the server turned replica).
unsafe extern "C" fn disconnected<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    // SAFETY: Redis passes a live context.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    if let Some(bc) = H::client_gone(ctx, ClientId(bc as usize)) {
        bc.unblock(None);
    }
}

unsafe extern "C" fn free_reply(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        // SAFETY: non-null private data is the `Reply` boxed by `unblock`, freed once here.
        drop(unsafe { Box::from_raw(privdata.cast::<Reply>()) });
    }
}
