//! Keyspace and server events: every way a lock can vanish or change behind the module's
//! back. The handlers only mark keys dirty (`engine::wake::mark_dirty`); the grant happens on
//! the next event-loop turn, where writing is safe and replicates in order.
//!
//! Cost to the rest of the server: Redis builds a context for every event it delivers to a
//! subscriber (~600 instructions) and cannot unsubscribe. So the module hears only `expired`
//! and `evicted` (no command that writes a key reaches it); DEL, RENAME, MOVE and overwrites
//! of a waited key are found by the engine's poll timer (`engine::wake`), which runs only
//! while some key has a queue. Only when more than `wake::POLL_MAX_KEYS` keys have queues at
//! once does the module subscribe to every other event (permanently, once per load), and
//! polling stops. Even then an event costs only a look-up: only keys with a queue are marked.

use crate::engine::{self, wake};
use crate::ffi::events::{self, Classes, KeyspaceHandler, ServerEventHandler};
use crate::ffi::Ctx;
use crate::stats;

/// `expired` and `evicted`, from load on.
pub struct Gone;

impl KeyspaceHandler for Gone {
    /// The held-lock bookkeeping behind `leases_expired`, and the queue of the key, if any.
    fn on_key_event(ctx: Ctx, event: &[u8], key: &[u8]) {
        let db = ctx.selected_db();
        stats::on_key_gone(db, key, event == b"expired");
        if engine::waiting() > 0 {
            wake::mark_dirty(ctx, db, Some(key));
        }
    }
}

/// Every other event, once many keys have had queues at once (`watch_changes`): DEL/UNLINK,
/// rename_from, move_from, overwrite by SET/LPUSH/..., HSET/HDEL/PEXPIRE by a Redisson script.
pub struct Changed;

impl KeyspaceHandler for Changed {
    /// Nobody waits: the event is dropped before anything is read.
    fn interested() -> bool {
        engine::waiting() > 0
    }

    fn on_key_event(ctx: Ctx, event: &[u8], key: &[u8]) {
        if !wake::may_be_watched(key) {
            return; // nobody waits on this key
        }
        if event == b"expired" || event == b"evicted" {
            return; // `Gone` has it
        }
        wake::mark_dirty(ctx, ctx.selected_db(), Some(key));
    }
}

impl ServerEventHandler for Gone {
    /// FLUSHDB/FLUSHALL (end), SWAPDB, and a replica's async load replacing the data set
    /// (`repl-diskless-load swapdb`): forget the old keys, re-examine every queued key.
    fn on_keyspace_replaced(ctx: Ctx) {
        stats::forget_held();
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
    events::subscribe_keyspace::<Gone>(ctx, Classes::ExpiredEvicted)?;
    events::subscribe_server::<Gone>(ctx)?;
    events::subscribe_client_close::<Closed>(ctx)
}

/// Before a client waits: once `wake::POLL_MAX_KEYS` keys have queues, every other
/// keyspace event (once per load) instead of polling. Below that, nothing: polling is cheaper.
pub fn watch_changes(ctx: Ctx) {
    // `wake` knows whether `Changed` is subscribed (it stops polling then; MODULE UNLOAD,
    // which drops subscriptions, resets it).
    if wake::changes_are_reported() || wake::watched_keys() < wake::POLL_MAX_KEYS {
        return;
    }
    match events::subscribe_keyspace::<Changed>(ctx, Classes::All) {
        Ok(()) => {
            wake::changes_reported(ctx);
            // Once per load: from now on every write of the server pays for the events.
            ctx.log_warning(&format!(
                "dlock: more than {} keys have waiters at once: listening to every keyspace \
                 event instead of polling them, until MODULE UNLOAD",
                wake::POLL_MAX_KEYS
            ));
        }
        // Polling goes on.
        Err(line) => ctx.log_warning(&line),
    }
}
