//! What each engine timer (`job::Job`) does when it fires: a WAIT time-out has its waiter
//! answered (`blocked`), a lease check or the keys marked by events serve their queues, a lease cut
//! shortens the leases of a closed connection's bound holds. Every change goes through the
//! unit of work (`work`), written like a command would (replicated); `Job::Poll` runs the
//! poll's tick (`wake::poll`) where Redis's cron ticks too seldom.
//!
//! Cluster mode: a key may leave the node under its queue (MIGRATE, its slot given away, the
//! cluster down). Before a wake-up serves a queue it asks where the server routes the key
//! (`work::served_here`); a key served elsewhere gets its waiters answered with the redirect
//! a fresh request would get, and nothing is granted or created here.

use dlock_core::error::DEMOTED;
use dlock_core::model::LockValue;
use dlock_core::names;
use dlock_core::rules;

use crate::ffi::cluster::{self, Route};
use crate::ffi::context::now_ms;
use crate::ffi::replicate::publish_unlock_here;
use crate::ffi::timer::TimerJob;
use crate::ffi::{Ctx, RStr};
use crate::stats::{Stats, STATS};

use super::job::Job;
use super::registry::registry;
use super::{bind, blocked, unlock, wake, work};

impl TimerJob for Job {
    fn fire(self, ctx: Ctx) {
        match self {
            Job::WaitTimeout { db, key, seq } => {
                // The waiters behind the one timed out may be served now.
                if blocked::time_out(ctx, db, &key, seq) {
                    wake_key(ctx, db, &key);
                }
            }
            Job::LeaseCheck { db, key } => {
                if let Some(slot) = registry().lease_timer(db, &key) {
                    *slot = None;
                }
                wake_key(ctx, db, &key);
            }
            Job::CutLeases => cut_leases(ctx),
            Job::DelayScan => super::delay_keys::walk_step(ctx),
            Job::Recheck => {
                let (mut keys, all) = wake::take_marked();
                if all {
                    keys.extend(registry().all_keys());
                }
                for (db, key) in keys {
                    wake_key(ctx, db, &key);
                }
            }
            Job::Demoted => answer_demoted(ctx),
            Job::Poll => wake::poll(ctx, wake::poll_timer(ctx)),
            Job::UnlockMessages => super::unlock::timer_fired(ctx),
        }
    }
}

/// The server turned replica (`listen::Server`): nothing may be granted here any more, and
/// every waiter is answered at once, as a fresh request would be (cluster mode: the redirect
/// to the new master) or as Redis answers its own blocked clients (`UNBLOCKED ...`).
fn answer_demoted(ctx: Ctx) {
    if ctx.is_master() {
        return; // promoted again meanwhile: its waiters are served as usual
    }
    // Taken first: the registry must not stay locked through the loop (answering locks it).
    let keys = registry().all_keys();
    for (db, key) in keys {
        ctx.select_db(db);
        let error = match cluster::route(ctx, &key) {
            Route::Elsewhere(redirect) => redirect,
            Route::Here => DEMOTED.into(),
        };
        blocked::answer_all(ctx, &mut registry(), db, &key, &error);
    }
}

/// Re-examines `key` outside any command (timers): lapsed holders, free lock, overwritten value.
fn wake_key(ctx: Ctx, db: i32, key: &[u8]) {
    if !ctx.may_write() {
        return;
    }
    if registry().waiters_on(db, key) == 0 {
        return;
    }
    if ctx.writes_paused() {
        // CLIENT PAUSE or a failover: Redis asserts that nothing is propagated until it ends
        // (a grant would be), so the key is served when the pause is over.
        wake::serve_after_pause(ctx, db, key);
        return;
    }
    ctx.select_db(db);
    if !work::served_here(ctx, db, key) {
        return; // the key left this cluster node: its waiters were redirected
    }
    work::unit_of_work(ctx, db, key, None, None, |_, _, _| ());
}

/// Cuts the leases of the holds whose connection closed (`bind`).
fn cut_leases(ctx: Ctx) {
    let cuts = bind::take_cuts(ctx);
    if cuts.is_empty() || !ctx.may_write() {
        return; // nothing to cut, or turned replica: the new master's data rules
    }
    for (hold, deadline) in cuts {
        let (db, key, owner) = bind::decode(&hold);
        ctx.select_db(db);
        if !work::served_here(ctx, db, key) {
            continue; // the key left this cluster node, and its hold with it
        }
        // No requester: the key is read whole, with its expiry (a cut compares leases).
        let (cut, exclusive) = work::unit_of_work(ctx, db, key, None, None, |_, lk, _| {
            let exclusive = matches!(lk.value, LockValue::Exclusive(_));
            (rules::cut_lease(&mut lk.value, owner, deadline), exclusive)
        });
        if cut {
            Stats::add(&STATS.leases_cut, 1);
        }
        if cut && exclusive {
            // A Redisson waiter sleeps on the TTL it last saw (the uncut lease) and nothing is
            // published when a lease lapses: the unlock message makes it look again and wait
            // for the cut lease instead (it finds the lock still held until then).
            let cfg = crate::config::get();
            if unlock::publish_now(ctx, cfg.publish, key, now_ms()) {
                let channel = RStr::written(ctx, |out| {
                    names::write_unlock_channel(&cfg.channel_prefix, key, out)
                });
                publish_unlock_here(ctx, &channel);
            }
        }
    }
}
