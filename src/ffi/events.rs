//! Subscriptions to keyspace events and server events.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int};

use redis_module::raw;

use super::string::bytes_of;
use super::{api, cluster, Ctx};

/// Receives keyspace events (of the `Classes` subscribed).
pub trait KeyspaceHandler {
    /// Asked first, before the event or key is read: `false` drops the event (the cheapest
    /// way out, for the many events nobody waits for).
    fn interested() -> bool {
        true
    }
    /// `event` is Redis's event name (`del`, `expired`, `hset`, ...).
    fn on_key_event(ctx: Ctx, event: &[u8], key: &[u8]);
}

/// Receives the server events dlock needs.
pub trait ServerEventHandler {
    /// FLUSHDB/FLUSHALL finished, or SWAPDB.
    fn on_keyspace_replaced(ctx: Ctx);
    /// An atomic slot migration (Valkey 9+) to or from this node finished: slots changed
    /// owner, and the source's copies of their keys are about to be trimmed.
    fn on_slots_moved(ctx: Ctx);
}

/// Receives the closing of client connections.
pub trait ClientCloseHandler {
    /// The connection of client `id` closed (any reason: QUIT, CLIENT KILL, reset, crash).
    fn on_client_closed(ctx: Ctx, id: u64);
}

/// Receives `RedisModuleEvent_Key` (Redis 7.2+, Valkey): a key about to leave the keyspace
/// (deleted, renamed or moved away, expired, evicted) or to be overwritten.
pub trait KeyUnlinkHandler {
    fn on_key_unlinked(ctx: Ctx, db: i32, key: &[u8]);
}

/// Which keyspace events a subscription receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classes {
    /// `expired` and `evicted` only: commands that write keys (SET, HSET, DEL...) do not
    /// reach the module at all.
    ExpiredEvicted,
    /// The generic class (`g`: del, rename, move, restore, copy, expire...): SET, HSET and
    /// the other type-specific writes do not reach the module.
    Generic,
}

/// Subscribes `H` to keyspace events of `classes`, whatever `notify-keyspace-events` says,
/// except the module's own (`notify`). Before Redis 8.2 (and on Valkey) a subscription lasts
/// until the module is unloaded; every event it receives costs Redis a context (~550
/// instructions).
pub fn subscribe_keyspace<H: KeyspaceHandler>(ctx: Ctx, classes: Classes) -> Result<(), String> {
    // SAFETY: a live context; the callback has the signature Redis expects.
    let ok = unsafe {
        api!(RedisModule_SubscribeToKeyspaceEvents)(
            ctx.as_ptr(),
            classes.mask(),
            Some(on_keyspace_event::<H>),
        )
    };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to keyspace events".into());
    }
    Ok(())
}

impl Classes {
    fn mask(self) -> c_int {
        (match self {
            Classes::ExpiredEvicted => {
                raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED
            }
            Classes::Generic => raw::REDISMODULE_NOTIFY_GENERIC,
        }) as c_int
    }
}

unsafe extern "C" fn on_keyspace_event<H: KeyspaceHandler>(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    if !H::interested() || super::notify::own_event() {
        // Not wanted, or the module's own write: nothing to wake.
        return raw::REDISMODULE_OK as c_int;
    }
    // SAFETY: Redis passes a live context, a NUL-terminated event name and a live key
    // name, all valid for this call.
    unsafe {
        H::on_key_event(
            Ctx::from_raw(ctx),
            CStr::from_ptr(event).to_bytes(),
            bytes_of(key),
        )
    };
    raw::REDISMODULE_OK as c_int
}

/// Whether keyspace subscriptions can be dropped (`RM_UnsubscribeFromKeyspaceEvents`: Redis
/// 8.2+; not Valkey 9.1).
pub fn keyspace_unsubscribe_supported() -> bool {
    // SAFETY: the API pointer is set once at load; copied, not borrowed.
    unsafe {
        let f = raw::RedisModule_UnsubscribeFromKeyspaceEvents;
        f.is_some()
    }
}

/// Drops the subscription of `H` to `classes` made by [`subscribe_keyspace`].
pub fn unsubscribe_keyspace<H: KeyspaceHandler>(ctx: Ctx, classes: Classes) -> Result<(), String> {
    // SAFETY: a live context; the same mask and callback as the subscription.
    let ok = unsafe {
        api!(RedisModule_UnsubscribeFromKeyspaceEvents)(
            ctx.as_ptr(),
            classes.mask(),
            Some(on_keyspace_event::<H>),
        )
    };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err("cannot unsubscribe from keyspace events".into());
    }
    Ok(())
}

/// Subscribes `H` to FLUSHDB (end), SWAPDB, the end of a replica's async load and (Valkey
/// 9+) the end of an atomic slot migration.
pub fn subscribe_server<H: ServerEventHandler>(ctx: Ctx) -> Result<(), String> {
    unsafe extern "C" fn on_event<H: ServerEventHandler>(
        ctx: *mut raw::RedisModuleCtx,
        event: raw::RedisModuleEvent,
        subevent: u64,
        _data: *mut c_void,
    ) {
        let flush_done = event.id == raw::REDISMODULE_EVENT_FLUSHDB
            && subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END;
        // A `repl-diskless-load swapdb` replica swapped in the data set it loaded.
        let async_load_done = event.id == raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD
            && subevent == raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED;
        if flush_done || async_load_done || event.id == raw::REDISMODULE_EVENT_SWAPDB {
            // SAFETY: Redis passes a live context.
            H::on_keyspace_replaced(unsafe { Ctx::from_raw(ctx) });
        }
        let slots_moved = event.id == cluster::EVENT_ATOMIC_SLOT_MIGRATION
            && (subevent == cluster::SUBEVENT_IMPORT_COMPLETED
                || subevent == cluster::SUBEVENT_EXPORT_COMPLETED);
        if slots_moved {
            // SAFETY: Redis passes a live context.
            H::on_slots_moved(unsafe { Ctx::from_raw(ctx) });
        }
    }
    // The atomic slot migration event exists on Valkey 9+ only (older servers refuse it).
    let slot_migration = cluster::server_has_atomic_slot_migration(ctx)
        .then_some(cluster::EVENT_ATOMIC_SLOT_MIGRATION);
    for id in [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD,
    ]
    .into_iter()
    .chain(slot_migration)
    {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: a live context; the callback has the signature Redis expects.
        let ok = unsafe {
            api!(RedisModule_SubscribeToServerEvent)(ctx.as_ptr(), event, Some(on_event::<H>))
        };
        if ok != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot subscribe to server event {id}"));
        }
    }
    Ok(())
}

const KEY_EVENT: raw::RedisModuleEvent = raw::RedisModuleEvent {
    id: raw::REDISMODULE_EVENT_KEY,
    dataver: 1,
};

/// Whether the server reports keys leaving the keyspace (`RedisModuleEvent_Key`: 7.2+).
pub fn key_unlinks_supported() -> bool {
    // SAFETY: the API pointers are set once at load, before any command; copied, not
    // borrowed. `IsSubEventSupported` only reads the server's event table.
    unsafe {
        let (supported, name, db) = (
            raw::RedisModule_IsSubEventSupported,
            raw::RedisModule_GetKeyNameFromModuleKey,
            raw::RedisModule_GetDbIdFromModuleKey,
        );
        name.is_some()
            && db.is_some()
            && supported.is_some_and(|f| f(KEY_EVENT, raw::REDISMODULE_SUBEVENT_KEY_DELETED) != 0)
    }
}

/// Subscribes `H` to `RedisModuleEvent_Key` (`on`), or unsubscribes (`!on`): unlike keyspace
/// events before 8.2, a server event can be dropped, so nothing is left once nobody waits.
/// While subscribed, every deletion or overwrite of any key costs Redis a context; writes
/// that create a key or change it in place (HSET, INCR, SET of a new key) cost nothing.
pub fn listen_key_unlinks<H: KeyUnlinkHandler>(ctx: Ctx, on: bool) -> Result<(), String> {
    unsafe extern "C" fn on_event<H: KeyUnlinkHandler>(
        ctx: *mut raw::RedisModuleCtx,
        _event: raw::RedisModuleEvent,
        _subevent: u64,
        data: *mut c_void,
    ) {
        // SAFETY: for this event Redis passes a live `RedisModuleKeyInfoV1` whose key handle
        // (and its name) stay valid for this call; the context is live.
        unsafe {
            let info = &*(data as *const raw::RedisModuleKeyInfo);
            let name = api!(RedisModule_GetKeyNameFromModuleKey)(info.key);
            if name.is_null() {
                return;
            }
            let db = api!(RedisModule_GetDbIdFromModuleKey)(info.key);
            H::on_key_unlinked(Ctx::from_raw(ctx), db, bytes_of(name));
        }
    }
    let callback: raw::RedisModuleEventCallback = if on { Some(on_event::<H>) } else { None };
    // SAFETY: a live context; the callback has the signature Redis expects (or is none).
    let ok = unsafe { api!(RedisModule_SubscribeToServerEvent)(ctx.as_ptr(), KEY_EVENT, callback) };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to key events".into());
    }
    Ok(())
}

/// Subscribes `H` to client disconnections (`RedisModuleEvent_ClientChange`). Redis fires it
/// for every connection that closes; the handler returns at once when it has nothing to do.
pub fn subscribe_client_close<H: ClientCloseHandler>(ctx: Ctx) -> Result<(), String> {
    unsafe extern "C" fn on_event<H: ClientCloseHandler>(
        ctx: *mut raw::RedisModuleCtx,
        event: raw::RedisModuleEvent,
        subevent: u64,
        data: *mut c_void,
    ) {
        if event.id != raw::REDISMODULE_EVENT_CLIENT_CHANGE
            || subevent != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED
            || data.is_null()
        {
            return;
        }
        // SAFETY: for this event Redis passes a live context and a `RedisModuleClientInfo`
        // valid for the call.
        unsafe {
            let info = &*data.cast::<raw::RedisModuleClientInfo>();
            H::on_client_closed(Ctx::from_raw(ctx), info.id);
        }
    }
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CLIENT_CHANGE,
        dataver: 1,
    };
    // SAFETY: a live context; the callback has the signature Redis expects.
    let ok = unsafe {
        api!(RedisModule_SubscribeToServerEvent)(ctx.as_ptr(), event, Some(on_event::<H>))
    };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to client disconnections".into());
    }
    Ok(())
}
