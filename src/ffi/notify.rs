//! What the module's own writes tell the rest of the server, as a core command making the
//! same change would: the keyspace event of that command (`hset`, `hdel`, `del`, `expire`,
//! `persist`, `set`) and the modified-key signal that aborts WATCH and invalidates
//! client-side caching.
//!
//! The module declares `NO_IMPLICIT_SIGNAL_MODIFIED` (`module::declare_options`): Redis no
//! longer signals every key the module opened for writing, so a refusal, an error or a read
//! leaves WATCH and client caches alone; `signal_modified` is called on real changes only.
//!
//! The module subscribes to every keyspace event itself (`events`), and Redis delivers a
//! module's own notifications to its subscribers too: `own_event` lets that handler ignore
//! them, so the module is never woken by its own writes.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use super::{api, Ctx, RStr};

/// Set while `keyspace_event` delivers one of the module's own events (main thread only).
static OWN_EVENT: AtomicBool = AtomicBool::new(false);

/// Whether the keyspace event being delivered is the module's own.
pub(super) fn own_event() -> bool {
    OWN_EVENT.load(Ordering::Relaxed)
}

/// The kind of value an event is about (Redis's `notify-keyspace-events` classes).
#[derive(Clone, Copy)]
pub enum Class {
    /// `g`: del, expire, persist...
    Generic,
    /// `$`: set...
    String,
    /// `h`: hset, hdel...
    Hash,
}

/// Sends keyspace event `event` about `key` to keyspace-notification subscribers and to other
/// modules (not to this one).
pub fn keyspace_event(ctx: Ctx, class: Class, event: &CStr, key: &RStr) {
    let class = match class {
        Class::Generic => raw::REDISMODULE_NOTIFY_GENERIC,
        Class::String => raw::REDISMODULE_NOTIFY_STRING,
        Class::Hash => raw::REDISMODULE_NOTIFY_HASH,
    };
    OWN_EVENT.store(true, Ordering::Relaxed);
    // SAFETY: a live context, a NUL-terminated event name and a live key name.
    unsafe {
        api!(RedisModule_NotifyKeyspaceEvent)(
            ctx.as_ptr(),
            class as c_int,
            event.as_ptr(),
            key.as_ptr(),
        )
    };
    OWN_EVENT.store(false, Ordering::Relaxed);
}

/// Signals `key` as modified (aborts the WATCHes on it, invalidates client-side caches).
pub fn signal_modified(ctx: Ctx, key: &RStr) {
    // SAFETY: a live context and key name.
    unsafe { api!(RedisModule_SignalModifiedKey)(ctx.as_ptr(), key.as_ptr()) };
}
