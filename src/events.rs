//! Keyspace and server events: every way a lock can vanish or change behind the module's
//! back. The callbacks only mark keys dirty (see `waiters::mark_dirty`); the grant happens on
//! the next event-loop turn, where writing is safe and replicates in order.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int};

use redis_module::{raw, Context};

use crate::stats;
use crate::store;
use crate::waiters;

/// Any keyspace event on a key with waiters: DEL/UNLINK, expired, evicted, rename_from,
/// move_from, overwrite by SET/LPUSH/..., HSET/HDEL/PEXPIRE by a Redisson script.
unsafe extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    let ctx = Context::new(ctx);
    let db = store::selected_db(&ctx);
    let expired = CStr::from_ptr(event).to_bytes() == b"expired";
    stats::on_key_event(db, store::bytes_of(key), expired);
    if waiters::waiting() > 0 {
        waiters::mark_dirty(&ctx, db, Some(store::bytes_of(key)));
    }
    raw::REDISMODULE_OK as c_int
}

/// FLUSHDB/FLUSHALL (end) and SWAPDB: re-examine every queued key.
unsafe extern "C" fn on_server_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    let flush_done = event.id == raw::REDISMODULE_EVENT_FLUSHDB
        && subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END;
    if flush_done || event.id == raw::REDISMODULE_EVENT_SWAPDB {
        stats::forget_held();
        if waiters::waiting() > 0 {
            waiters::mark_dirty(&Context::new(ctx), 0, None);
        }
    }
}

/// Subscribes to the events above. Module subscriptions work whatever
/// `notify-keyspace-events` is set to.
pub fn subscribe(ctx: &Context) -> Result<(), String> {
    let raw_ctx = ctx.get_raw();
    unsafe {
        let ok = raw::REDISMODULE_OK as c_int;
        if raw::RedisModule_SubscribeToKeyspaceEvents.unwrap()(
            raw_ctx,
            raw::REDISMODULE_NOTIFY_ALL,
            Some(on_keyspace_event),
        ) != ok
        {
            return Err("cannot subscribe to keyspace events".into());
        }
        for id in [
            raw::REDISMODULE_EVENT_FLUSHDB,
            raw::REDISMODULE_EVENT_SWAPDB,
        ] {
            let event = raw::RedisModuleEvent { id, dataver: 1 };
            if raw::RedisModule_SubscribeToServerEvent.unwrap()(
                raw_ctx,
                event,
                Some(on_server_event),
            ) != ok
            {
                return Err(format!("cannot subscribe to server event {id}"));
            }
        }
    }
    Ok(())
}
