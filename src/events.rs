//! Keyspace and server events: every way a lock can vanish or change behind the module's
//! back. The handlers only mark keys dirty (`engine::wake::mark_dirty`); the grant happens on
//! the next event-loop turn, where writing is safe and replicates in order.

use crate::engine::{self, wake};
use crate::ffi::events::{self, KeyspaceHandler, ServerEventHandler};
use crate::ffi::Ctx;
use crate::stats;

pub struct Events;

impl KeyspaceHandler for Events {
    /// Any keyspace event on a key with waiters: DEL/UNLINK, expired, evicted, rename_from,
    /// move_from, overwrite by SET/LPUSH/..., HSET/HDEL/PEXPIRE by a Redisson script.
    fn on_key_event(ctx: Ctx, event: &[u8], key: &[u8]) {
        let db = ctx.selected_db();
        stats::on_key_event(db, key, event == b"expired");
        if engine::waiting() > 0 {
            wake::mark_dirty(ctx, db, Some(key));
        }
    }
}

impl ServerEventHandler for Events {
    /// FLUSHDB/FLUSHALL (end), SWAPDB, and a replica's async load replacing the data set
    /// (`repl-diskless-load swapdb`): forget the old keys, re-examine every queued key.
    fn on_keyspace_replaced(ctx: Ctx) {
        stats::forget_held();
        if engine::waiting() > 0 {
            wake::mark_dirty(ctx, 0, None);
        }
    }
}

/// Subscribes to the events above. Module subscriptions work whatever
/// `notify-keyspace-events` is set to.
pub fn subscribe(ctx: Ctx) -> Result<(), String> {
    events::subscribe_keyspace::<Events>(ctx)?;
    events::subscribe_server::<Events>(ctx)
}
