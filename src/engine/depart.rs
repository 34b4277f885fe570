//! Waiters leaving their queue: taken out with their timers stopped and their key unwatched
//! once its queue is empty, whether granted, timed out, redirected or gone on their own (a
//! disconnect, CLIENT UNBLOCK, the server turned replica: `DepartingClients`).

use crate::ffi::blocked::{BlockHandler, BlockedClient, ClientId};
use crate::ffi::{timer, Ctx, Reply};
use crate::stats::{Stats, STATS};

use super::queue::Waiter;
use super::registry::registry;
use super::registry::{Registry, Removed};
use super::wake;

/// Takes waiter `seq` out of its queue, stopping its timers; the caller answers the client.
pub fn remove(ctx: Ctx, reg: &mut Registry, db: i32, key: &[u8], seq: u64) -> Option<Waiter> {
    let Removed {
        mut waiter,
        lease_timer,
    } = reg.remove(db, key, seq)?;
    for t in lease_timer.into_iter().chain(waiter.timer.take()) {
        timer::stop(ctx, t);
    }
    if reg.waiters_on(db, key) == 0 {
        super::listen::unwatch(ctx, db, key);
    }
    Some(waiter)
}

/// Answers every waiter of `key` with `error` and takes them out of the queue (the key is not
/// served here any more: a redirect, or the server turned replica). Returns how many.
pub fn answer_all(ctx: Ctx, reg: &mut Registry, db: i32, key: &[u8], error: &str) -> u64 {
    let mut answered = 0;
    while let Some((seq, _)) = reg.head(db, key) {
        let waiter = remove(ctx, reg, db, key, seq).expect("head waiter");
        Stats::add(&STATS.errors, 1);
        waiter.client.unblock(Some(Reply::Error(error.to_string())));
        answered += 1;
    }
    answered
}

/// The engine's blocked clients leaving on their own (the handler the FFI layer calls back).
pub struct DepartingClients;

impl BlockHandler for DepartingClients {
    /// A blocked client left on its own (disconnect, CLIENT UNBLOCK, server turned replica).
    fn client_gone(ctx: Ctx, id: ClientId) -> Option<BlockedClient> {
        let mut reg = registry();
        let place = reg.place_of(id)?.clone();
        let was_head = reg.head(place.db, &place.key).map(|(seq, _)| seq) == Some(place.seq);
        let waiter = remove(ctx, &mut reg, place.db, &place.key, place.seq)?;
        // The head leaving may let the next waiters in (e.g. readers behind a writer).
        if was_head && reg.waiters_on(place.db, &place.key) > 0 {
            wake::mark_dirty(ctx, place.db, Some(&place.key));
        }
        Some(waiter.client)
    }
}
