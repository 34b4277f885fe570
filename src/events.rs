//! Keyspace and server events: every way a lock can vanish or change behind the module's
//! back. The handlers only mark keys dirty (`engine::wake::mark_dirty`); the grant happens on
//! the next event-loop turn, where writing is safe and replicates in order.
//!
//! Cost to the rest of the server: Redis builds a context for every event it delivers to a
//! subscriber (~600 instructions), and before 8.2 cannot drop a keyspace subscription. So the
//! module hears only `expired` and `evicted` (no command that writes a key reaches it). DEL,
//! RENAME, MOVE, EXPIRE and overwrites of a waited key: on 7.2+ the engine listens to key
//! events while some key has a queue (`engine::wake`); the generic class (del, rename, move,
//! expire...; not SET, HSET or any other type-specific write) is heard while some key has a
//! queue on 8.2+, from the first wait on before; on 7.0 a bounded poll finds overwrites. An
//! event costs only a look-up: only keys with a queue are marked.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::engine::{self, wake};
use crate::ffi::events::{self, Classes, KeyspaceHandler, ServerEventHandler};
use crate::ffi::Ctx;

/// `expired` and `evicted`, from load on.
pub struct Gone;

impl KeyspaceHandler for Gone {
    /// The held-lock bookkeeping behind `leases_expired`, and the queue of the key, if any.
    fn on_key_event(ctx: Ctx, event: &[u8], key: &[u8]) {
        let db = ctx.selected_db();
        engine::held::gone(db, key, event == b"expired");
        if dlock_core::names::is_delay_key(key) {
            engine::delay_keys::gone(db, key);
        }
        if engine::waiting() > 0 {
            wake::mark_dirty(ctx, db, Some(key));
        }
    }
}

impl ServerEventHandler for Gone {
    /// FLUSHDB/FLUSHALL (end), SWAPDB, and a replica's async load replacing the data set
    /// (`repl-diskless-load swapdb`): forget the old keys, re-examine every queued key.
    fn on_keyspace_replaced(ctx: Ctx) {
        engine::held::forget_all();
        engine::delay_keys::arrived(ctx);
        if engine::waiting() > 0 {
            wake::mark_dirty(ctx, 0, None);
        }
    }

    /// Valkey's atomic slot migration finished: every queued key is looked at again, and the
    /// waiters of keys that left get the redirect (`engine::wake`).
    fn on_slots_moved(ctx: Ctx) {
        if engine::waiting() > 0 {
            wake::mark_dirty(ctx, 0, None);
        }
    }
}

/// Client connections closing: the leases of holds bound to them (BIND) are cut.
pub struct Closed;

impl events::ClientCloseHandler for Closed {
    fn on_client_closed(ctx: Ctx, id: u64) {
        engine::bind::client_closed(ctx, id);
    }
}

/// At load: expiries, evictions, the server events and client disconnections. Module subscriptions work whatever
/// `notify-keyspace-events` is set to.
pub fn subscribe(ctx: Ctx) -> Result<(), String> {
    wake::init(events::key_unlinks_supported());
    engine::delay_keys::init(ctx);
    events::subscribe_keyspace::<Gone>(ctx, Classes::ExpiredEvicted)?;
    events::subscribe_server::<Gone>(ctx)?;
    events::subscribe_client_close::<Closed>(ctx)
}

/// Set once the generic class is subscribed for good (until MODULE UNLOAD, which drops
/// subscriptions).
static GENERIC_SUBSCRIBED: AtomicBool = AtomicBool::new(false);

/// Before a client waits, on a server that cannot drop a keyspace subscription (Redis before
/// 8.2, Valkey): the generic keyspace events (del, rename, move, expire...), once per load, so
/// that a DEL or a user's EXPIRE of a waited key wakes its queue at once. From then on each
/// DEL/EXPIRE/RENAME... of any key costs Redis a context (~600 instructions); SET, HSET and
/// the other type-specific writes cost nothing. On 8.2+ `engine::wake` subscribes while some
/// key has a queue and unsubscribes after.
pub fn watch_changes(ctx: Ctx) {
    if events::keyspace_unsubscribe_supported() || GENERIC_SUBSCRIBED.load(Ordering::Relaxed) {
        return;
    }
    match events::subscribe_keyspace::<wake::Unlinks>(ctx, Classes::Generic) {
        Ok(()) => GENERIC_SUBSCRIBED.store(true, Ordering::Relaxed),
        // Key events or the poll still find DEL/RENAME/MOVE.
        Err(line) => ctx.log_warning(&line),
    }
}

/// MODULE UNLOAD dropped every subscription.
pub fn free_all() {
    GENERIC_SUBSCRIBED.store(false, Ordering::Relaxed);
}
