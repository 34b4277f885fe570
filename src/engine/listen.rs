//! What the module listens to, on every supported server, and when: the one place that
//! subscribes to Redis's events (and the handlers, which only mark keys or arm timers).
//!
//! | what happens | how the module hears it | subscribed |
//! |---|---|---|
//! | a key expires or is evicted | keyspace `expired`, `evicted` ([`Keys`]) | from the first unit of work (`work`: a DLOCK command writing or waiting) |
//! | DEL, UNLINK, RENAME, MOVE, EXPIRE, RESTORE, COPY, MIGRATE of a waited key | the generic keyspace class ([`Keys`]) | while some key has a queue (8.2+, which can drop a subscription: one subscription with `expired`/`evicted`, swapped on the first queue and the last); from the first queue on (7.0 to 8.0, Valkey: a second subscription, which cannot be dropped there) |
//! | FLUSHDB/FLUSHALL, SWAPDB, a replica's async load, Valkey 9's atomic slot migration ending, the server turning replica | server events ([`Server`]) | from load |
//! | forks, replicas coming and going, loads (`ffi::targets`) | server events, passed to `targets` | from load |
//! | a connection closing (BIND) | client change ([`Closed`]) | from load |
//! | this node's `CLUSTER SETSLOT` / `DELSLOTS` / `FLUSHSLOTS` / `RESET` | a command filter ([`SlotCommands`]) | cluster mode, while some key has a queue |
//! | a waited key overwritten by another type; the cluster going down, a slot taken in gossip | nothing: `wake`'s poll (every `wake::POLL_MS`), run in Redis's cron tick ([`Cron`]) | while some key has a queue |
//!
//! Why not more: every event Redis delivers to a subscriber costs it a module context (what
//! that costs: docs/DESIGN.md, "What a command costs", keyspace events).
//! `RedisModuleEvent_Key` (7.2+) and the `overwritten`/`type_changed` classes (8.2+) would
//! report overwrites at once, but they fire for every overwrite of any key (a `SET` over an
//! existing string): listening to them while clients waited cost every such
//! write ~20% (Redis 8.2.3). The generic class fires for DEL/EXPIRE/RENAME-like commands
//! only, never for SET, HSET or other type-specific writes. A write thus pays no context for
//! the waiters unless it deletes, renames or expires a key. Before 8.2 (and on Valkey) the
//! generic subscription stays once made, so those writes pay a context each from the first
//! wait on.
//!
//! Why not from load: before a unit of work nothing the module tracks can expire (no lock
//! granted here, no LOCKDELAY companion consulted; a companion from an RDB that expires
//! unheard is found missing by the first unit of work that looks), and a server that only
//! serves Redisson's scripts natively (which keep no state of the module's) never needs the
//! subscription: on 7.0 a single one costs every event raised ~60 instructions, two for a
//! `SET` of a new key (`new`, `set`): +2.5% on that `SET`.
//!
//! What every write pays anyway, waiters or not: Redis tests each keyspace subscription's
//! classes for every event raised (~8 instructions a subscription, after ~38 for having any)
//! and, for an overwrite or deletion on 7.2+, walks every server-event listener (~10 each).
//! Hence one keyspace subscription where the server can drop one (8.2+), and no listener
//! that is not needed (docs/DESIGN.md, "What a command costs": SET with waiters): the cron
//! tick's listener ([`Cron`]) is there only while some key has a queue.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ffi::events::{
    self, Classes, CronHandler, KeyspaceHandler, ServerEventHandler, SlotCommandHandler,
};
use crate::ffi::{cluster, timer, Ctx};

use super::job::Job;
use super::registry::waiting;
use super::{bind, delay_keys, wake};

/// Keyspace events: `expired` and `evicted` from the first unit of work on, the generic
/// class (del, rename, move, expire, restore, copy...: a waited key changed behind the
/// module's back) while clients wait. One handler, one subscription where the server can drop one: Redis walks
/// its subscribers for every event raised, also for each `SET`'s two (8.2).
pub struct Keys;

impl KeyspaceHandler for Keys {
    /// Nobody waits: the event is dropped before anything is read.
    fn wants_generic() -> bool {
        waiting() > 0
    }

    /// The held-lock bookkeeping behind `leases_expired`, and the queue of the key, if any.
    fn on_gone(ctx: Ctx, expired: bool, key: &[u8]) {
        let db = ctx.selected_db();
        super::held::gone(db, key, expired);
        if dlock_core::names::is_delay_key(key) {
            delay_keys::gone(db, key);
        }
        if waiting() > 0 {
            wake::mark_dirty(ctx, db, Some(key));
        }
    }

    fn on_generic(ctx: Ctx, key: &[u8]) {
        // Any key of the server: the filter drops nearly all without a lock.
        if wake::may_be_watched(key) {
            wake::mark_dirty(ctx, ctx.selected_db(), Some(key));
        }
    }
}

/// The server events that touch many keys at once, or the node's role.
pub struct Server;

impl ServerEventHandler for Server {
    /// FLUSHDB/FLUSHALL (end), SWAPDB, and a replica's async load replacing the data set
    /// (`repl-diskless-load swapdb`): forget the old keys, re-examine every queued key.
    fn on_keyspace_replaced(ctx: Ctx) {
        super::held::forget_all();
        delay_keys::arrived(ctx);
        if waiting() > 0 {
            wake::mark_dirty(ctx, 0, None);
        }
    }

    /// Valkey's atomic slot migration finished: every queued key is looked at again, and the
    /// waiters of keys that left get the redirect (`fire`).
    fn on_slots_moved(ctx: Ctx) {
        if waiting() > 0 {
            wake::mark_dirty(ctx, 0, None);
        }
    }

    /// The server turned replica: its waiters are answered on the next event-loop turn
    /// (`Job::Demoted`). Redis 7.0 and 8.x unblock them itself before this event (the
    /// registry is empty by then); Valkey 9 in cluster mode leaves them blocked.
    fn on_demoted(ctx: Ctx) {
        if waiting() > 0 {
            timer::start(ctx, 0, Job::Demoted);
        }
    }
}

/// Client connections closing: the leases of holds bound to them (BIND) are cut.
pub struct Closed;

impl events::ClientCloseHandler for Closed {
    fn on_client_closed(ctx: Ctx, id: u64) {
        bind::client_closed(ctx, id);
    }
}

/// This node's `CLUSTER SETSLOT`/`DELSLOTS`/...: every queued key is looked at once the
/// command has run (the recheck timer fires on the next event-loop turn), so a waiter whose
/// slot left gets its redirect at once.
pub struct SlotCommands;

impl SlotCommandHandler for SlotCommands {
    fn interested() -> bool {
        waiting() > 0
    }

    fn on_slot_command(ctx: Ctx) {
        wake::mark_dirty(ctx, 0, None);
    }
}

/// Redis's cron tick, while some key has a queue: the poll runs in it when due (`wake`), so
/// that an idle server with waiters wakes no more often than without.
pub struct Cron;

impl CronHandler for Cron {
    fn on_cron(ctx: Ctx, hz: i32) {
        wake::poll(ctx, wake::cron_tick(ctx, hz));
    }
}

/// Subscribed to the generic keyspace class (by [`watch`]).
static GENERIC: AtomicBool = AtomicBool::new(false);
/// Subscribed to `expired`/`evicted` (by [`hear_expiries`]; with the generic class in one
/// subscription while clients wait on 8.2+).
static EXPIRIES: AtomicBool = AtomicBool::new(false);

/// Starts the `expired`/`evicted` subscription, once: called by every unit of work, before
/// anything it grants or sees can expire (see the file doc).
#[inline]
pub(super) fn hear_expiries(ctx: Ctx) {
    if !EXPIRIES.load(Ordering::Relaxed) {
        subscribe_expiries(ctx);
    }
}

#[cold]
#[inline(never)]
fn subscribe_expiries(ctx: Ctx) {
    // Tried once: a failure is logged, and the module then works as it would without the
    // events (leases_expired does not count; waiters are found by the poll).
    EXPIRIES.store(true, Ordering::Relaxed);
    if let Err(line) = events::subscribe_keyspace::<Keys>(ctx, Classes::ExpiredEvicted) {
        ctx.log_warning(&line);
    }
}

/// Swaps the keyspace subscription `from` for `to` (Redis 8.2+, which can drop one): the new
/// one first, so that no event is missed if it fails.
fn resubscribe(ctx: Ctx, from: Classes, to: Classes) -> Result<(), String> {
    events::subscribe_keyspace::<Keys>(ctx, to)?;
    events::unsubscribe_keyspace::<Keys>(ctx, from)
}

/// At load: what the module hears whether or not clients wait (keyspace events come later:
/// [`hear_expiries`]). Module subscriptions work whatever `notify-keyspace-events` is set to.
pub fn subscribe(ctx: Ctx) -> Result<(), String> {
    delay_keys::init(ctx);
    events::subscribe_server::<Server>(ctx)?;
    events::subscribe_client_close::<Closed>(ctx)
}

/// `key` has a queue now. The first queued key starts what is heard only while clients wait.
pub(super) fn watch(ctx: Ctx, db: i32, key: &[u8]) {
    if !wake::watch(ctx, db, key) {
        return;
    }
    // The swap below (8.2+) drops the `expired`/`evicted` subscription: it must exist.
    hear_expiries(ctx);
    if !GENERIC.load(Ordering::Relaxed) {
        // Where no subscription can be dropped, the generic class is a second one, for good.
        let subscribed = if events::keyspace_unsubscribe_supported() {
            resubscribe(ctx, Classes::ExpiredEvicted, Classes::WithGeneric)
        } else {
            events::subscribe_keyspace::<Keys>(ctx, Classes::Generic)
        };
        match subscribed {
            Ok(()) => GENERIC.store(true, Ordering::Relaxed),
            // The poll still finds what changed the key's type; DEL/RENAME would wait for
            // the lease.
            Err(line) => ctx.log_warning(&line),
        }
    }
    if let Err(line) = events::subscribe_cron::<Cron>(ctx, true) {
        // The poll timer keeps polling (the cron's pace is never heard).
        ctx.log_warning(&line);
    }
    if cluster::enabled(ctx) {
        events::filter_slot_commands::<SlotCommands>(ctx, true);
    }
}

/// `key`'s queue is gone. With the last one, what can be dropped is dropped.
pub(super) fn unwatch(ctx: Ctx, db: i32, key: &[u8]) {
    if !wake::unwatch(ctx, db, key) {
        return;
    }
    if events::keyspace_unsubscribe_supported() && GENERIC.swap(false, Ordering::Relaxed) {
        if let Err(line) = resubscribe(ctx, Classes::WithGeneric, Classes::ExpiredEvicted) {
            ctx.log_warning(&line);
        }
    }
    if let Err(line) = events::subscribe_cron::<Cron>(ctx, false) {
        ctx.log_warning(&line);
    }
    events::filter_slot_commands::<SlotCommands>(ctx, false);
}

/// MODULE UNLOAD dropped every subscription (no queue is left by then: the filter is gone).
pub(super) fn free_all() {
    GENERIC.store(false, Ordering::Relaxed);
    EXPIRIES.store(false, Ordering::Relaxed);
}
