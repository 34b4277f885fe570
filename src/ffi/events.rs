//! Subscriptions to keyspace events and server events.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int};
use std::sync::Mutex;

use redis_module::raw;

use super::string::bytes_of;
use super::{api, cluster, targets, Ctx};

/// Receives keyspace events (of the `Classes` subscribed). One handler takes every class the
/// module listens to: Redis walks its list of keyspace subscribers for every event raised
/// (also a `SET`'s, which no subscriber of dlock wants), so each subscriber costs every write.
pub trait KeyspaceHandler {
    /// Asked first for an event of the generic class, before the event or key is read:
    /// `false` drops it (the cheapest way out, for the many events nobody waits for).
    fn wants_generic() -> bool {
        true
    }
    /// `key` expired (`expired`) or was evicted (`!expired`).
    fn on_gone(ctx: Ctx, expired: bool, key: &[u8]);
    /// An event of the generic class (`del`, `rename_from`, `expire`, ...) about `key`.
    fn on_generic(ctx: Ctx, key: &[u8]);
}

/// Receives the server events dlock needs.
pub trait ServerEventHandler {
    /// FLUSHDB/FLUSHALL finished, or SWAPDB.
    fn on_keyspace_replaced(ctx: Ctx);
    /// An atomic slot migration (Valkey 9+) to or from this node finished: slots changed
    /// owner, and the source's copies of their keys are about to be trimmed.
    fn on_slots_moved(ctx: Ctx);
    /// The server turned replica (a failover demoted it, `REPLICAOF`).
    fn on_demoted(ctx: Ctx);
}

/// Receives the closing of client connections.
pub trait ClientCloseHandler {
    /// The connection of client `id` closed (any reason: QUIT, CLIENT KILL, reset, crash).
    fn on_client_closed(ctx: Ctx, id: u64);
}

/// Receives Redis's cron ticks (`serverCron`, `hz` times a second: the wake-up Redis makes
/// anyway for its own housekeeping).
pub trait CronHandler {
    /// Called at the end of `serverCron`, outside any command (never while a script or a
    /// load blocks the server: Redis's stand-in cron does not fire the event).
    fn on_cron(ctx: Ctx, hz: i32);
}

/// Receives the commands of this node that may give its slots away (`CLUSTER SETSLOT`,
/// `DELSLOTS`, ...), before they run.
pub trait SlotCommandHandler {
    /// Asked first: `false` lets every command through untouched.
    fn interested() -> bool;
    /// `ctx` is the module's own context (a command filter has none): start timers only.
    fn on_slot_command(ctx: Ctx);
}

/// Which keyspace events a subscription receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classes {
    /// `expired` and `evicted` only: commands that write keys (SET, HSET, DEL...) do not
    /// reach the module at all.
    ExpiredEvicted,
    /// `ExpiredEvicted` and the generic class (`g`: del, rename, move, restore, copy,
    /// expire...) in one subscription: SET, HSET and the other type-specific writes do not
    /// reach the module.
    WithGeneric,
    /// The generic class alone (a second subscription, where a first cannot be dropped).
    Generic,
}

/// Subscribes `H` to keyspace events of `classes`, whatever `notify-keyspace-events` says,
/// except the module's own (`notify`). Before Redis 8.2 (and on Valkey) a subscription lasts
/// until the module is unloaded; every event it receives costs Redis a context (~550
/// instructions), every event it does not receive a step of Redis's walk over the
/// subscribers (~15).
pub fn subscribe_keyspace<H: KeyspaceHandler>(ctx: Ctx, classes: Classes) -> Result<(), String> {
    // SAFETY: a live context; the callback has the signature Redis expects.
    let ok = unsafe {
        api!(RedisModule_SubscribeToKeyspaceEvents)(
            ctx.as_ptr(),
            classes.mask(),
            Some(classes.callback::<H>()),
        )
    };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to keyspace events".into());
    }
    Ok(())
}

const GONE: c_int = (raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED) as c_int;
const GENERIC: c_int = raw::REDISMODULE_NOTIFY_GENERIC as c_int;

type Callback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    c_int,
    *const c_char,
    *mut raw::RedisModuleString,
) -> c_int;

impl Classes {
    fn mask(self) -> c_int {
        match self {
            Classes::ExpiredEvicted => GONE,
            Classes::WithGeneric => GONE | GENERIC,
            Classes::Generic => GENERIC,
        }
    }

    /// One callback per subscription, so that dropping one (Redis 8.2 matches the callback)
    /// can never drop another.
    fn callback<H: KeyspaceHandler>(self) -> Callback {
        match self {
            Classes::ExpiredEvicted => on_keyspace_event::<H, GONE>,
            Classes::WithGeneric => on_keyspace_event::<H, { GONE | GENERIC }>,
            Classes::Generic => on_keyspace_event::<H, GENERIC>,
        }
    }
}

unsafe extern "C" fn on_keyspace_event<H: KeyspaceHandler, const MASK: c_int>(
    ctx: *mut raw::RedisModuleCtx,
    type_: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    // Read through `MASK`, so that each subscription's callback has a body (and an address)
    // of its own: identical functions may be merged into one.
    let generic = type_ & MASK & GENERIC != 0;
    let gone = type_ & MASK & GONE != 0;
    if !(gone || generic && H::wants_generic()) || super::notify::own_event() {
        // Not wanted, or the module's own write: nothing to wake.
        return raw::REDISMODULE_OK as c_int;
    }
    // SAFETY: Redis passes a live context, a NUL-terminated event name and a live key
    // name, all valid for this call.
    unsafe {
        let (ctx, key) = (Ctx::from_raw(ctx), bytes_of(key));
        if generic {
            H::on_generic(ctx, key);
        } else {
            H::on_gone(ctx, CStr::from_ptr(event).to_bytes() == b"expired", key);
        }
    }
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
            Some(classes.callback::<H>()),
        )
    };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err("cannot unsubscribe from keyspace events".into());
    }
    Ok(())
}

/// Subscribes `H` to FLUSHDB (end), SWAPDB, the end of a replica's async load, a change of
/// replication role and (Valkey 9+) the end of an atomic slot migration. Redis keeps one
/// callback per event and module, so the events `targets` needs (forks, replicas coming and
/// going, loads) arrive here too and are passed on to it first.
pub fn subscribe_server<H: ServerEventHandler>(ctx: Ctx) -> Result<(), String> {
    unsafe extern "C" fn on_event<H: ServerEventHandler>(
        ctx: *mut raw::RedisModuleCtx,
        event: raw::RedisModuleEvent,
        subevent: u64,
        _data: *mut c_void,
    ) {
        targets::on_server_event(event.id);
        // SAFETY: Redis passes a live context, valid for this call.
        let ctx = unsafe { Ctx::from_raw(ctx) };
        let flush_done = event.id == raw::REDISMODULE_EVENT_FLUSHDB
            && subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END;
        // A `repl-diskless-load swapdb` replica swapped in the data set it loaded.
        let async_load_done = event.id == raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD
            && subevent == raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED;
        if flush_done || async_load_done || event.id == raw::REDISMODULE_EVENT_SWAPDB {
            H::on_keyspace_replaced(ctx);
        }
        let slots_moved = event.id == cluster::EVENT_ATOMIC_SLOT_MIGRATION
            && (subevent == cluster::SUBEVENT_IMPORT_COMPLETED
                || subevent == cluster::SUBEVENT_EXPORT_COMPLETED);
        if slots_moved {
            H::on_slots_moved(ctx);
        }
        if event.id == raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED
            && subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA
        {
            H::on_demoted(ctx);
        }
    }
    targets::forget();
    // The atomic slot migration event exists on Valkey 9+ only (older servers refuse it).
    let slot_migration = cluster::server_has_atomic_slot_migration(ctx)
        .then_some(cluster::EVENT_ATOMIC_SLOT_MIGRATION);
    for id in [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
    ]
    .into_iter()
    .chain(targets::EVENTS)
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

/// The registered command filter (while some key has a queue in cluster mode) and the
/// module's own context its callback starts timers with.
struct Filter {
    filter: *mut raw::RedisModuleCommandFilter,
    ctx: *mut raw::RedisModuleCtx,
}

// SAFETY: Redis calls modules on its main thread only; the pointers are used there alone.
unsafe impl Send for Filter {}

static FILTER: Mutex<Option<Filter>> = Mutex::new(None);

/// The subcommands of `CLUSTER` that may take a slot from this node (or give it one).
const SLOT_SUBCOMMANDS: [&[u8]; 6] = [
    b"setslot",
    b"delslots",
    b"delslotsrange",
    b"flushslots",
    b"reset",
    b"addslots",
];

/// Filters this node's commands for `CLUSTER SETSLOT`/`DELSLOTS`/... (`on`), or stops (`!on`).
/// A command filter runs for every command, so it is registered only while needed: the
/// callback compares the command's name and returns.
pub fn filter_slot_commands<H: SlotCommandHandler>(ctx: Ctx, on: bool) {
    unsafe extern "C" fn on_command<H: SlotCommandHandler>(
        fctx: *mut raw::RedisModuleCommandFilterCtx,
    ) {
        if !H::interested() {
            return;
        }
        // SAFETY: Redis passes a live filter context; the arguments it returns are live
        // strings for this call.
        let (name, sub) = unsafe {
            if api!(RedisModule_CommandFilterArgsCount)(fctx) < 2 {
                return;
            }
            (
                bytes_of(api!(RedisModule_CommandFilterArgGet)(fctx, 0)),
                bytes_of(api!(RedisModule_CommandFilterArgGet)(fctx, 1)),
            )
        };
        if !name.eq_ignore_ascii_case(b"cluster")
            || !SLOT_SUBCOMMANDS.iter().any(|s| sub.eq_ignore_ascii_case(s))
        {
            return;
        }
        let own = FILTER.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = own.as_ref() {
            // SAFETY: the module's detached context, live until the filter is unregistered.
            H::on_slot_command(unsafe { Ctx::from_raw(f.ctx) });
        }
    }
    let mut own = FILTER.lock().unwrap_or_else(|e| e.into_inner());
    match (on, own.take()) {
        (true, None) => {
            // SAFETY: a live context; the callback has the signature Redis expects. The
            // detached context only serves to start timers from the callback.
            *own = unsafe {
                let filter = api!(RedisModule_RegisterCommandFilter)(
                    ctx.as_ptr(),
                    Some(on_command::<H>),
                    raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
                );
                let detached = api!(RedisModule_GetDetachedThreadSafeContext)(ctx.as_ptr());
                (!filter.is_null()).then_some(Filter {
                    filter,
                    ctx: detached,
                })
            };
        }
        (false, Some(f)) => {
            // SAFETY: the filter registered above and its context, each freed once.
            unsafe {
                api!(RedisModule_UnregisterCommandFilter)(ctx.as_ptr(), f.filter);
                api!(RedisModule_FreeThreadSafeContext)(f.ctx);
            }
        }
        (_, keep) => *own = keep,
    }
}

/// Subscribes `H` to Redis's cron ticks (`on`), or drops the subscription (`!on`). Each tick
/// delivered costs a module context, `hz` times a second (docs/DESIGN.md, "What a command
/// costs": keyspace events say what a context costs); on
/// 7.2+ every server-event listener also costs a step of Redis's walk for each key deleted or
/// overwritten (~10 instructions), hence subscribed only while needed. Never drop it from
/// inside a server-event callback (this one's included): Redis walks its listener list while
/// it fires an event and touches the firing listener after the callback returns, so a
/// listener freed under it is read after free. The engine drops it when the last queue goes,
/// which happens in commands, timers and disconnect callbacks, never in an event handler
/// (they only mark keys and arm timers).
pub fn subscribe_cron<H: CronHandler>(ctx: Ctx, on: bool) -> Result<(), String> {
    unsafe extern "C" fn on_event<H: CronHandler>(
        ctx: *mut raw::RedisModuleCtx,
        event: raw::RedisModuleEvent,
        _subevent: u64,
        data: *mut c_void,
    ) {
        if event.id != raw::REDISMODULE_EVENT_CRON_LOOP || data.is_null() {
            return;
        }
        // SAFETY: for this event Redis passes a live context and a `RedisModuleCronLoopV1`
        // valid for the call.
        unsafe {
            let info = &*data.cast::<raw::RedisModuleCronLoopV1>();
            H::on_cron(Ctx::from_raw(ctx), info.hz);
        }
    }
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CRON_LOOP,
        dataver: 1,
    };
    // A null callback drops the module's subscription to the event.
    let callback: raw::RedisModuleEventCallback = if on { Some(on_event::<H>) } else { None };
    // SAFETY: a live context; the callback has the signature Redis expects.
    let ok = unsafe { api!(RedisModule_SubscribeToServerEvent)(ctx.as_ptr(), event, callback) };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err(format!(
            "cannot {} Redis's cron ticks",
            if on {
                "subscribe to"
            } else {
                "unsubscribe from"
            }
        ));
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
