//! A waiter's life, from blocking to its answer (the model is Redis's own `blocked.c`): the
//! only engine file that blocks or unblocks a client. A request that must wait is blocked at
//! the tail of its key's queue (the limits checked, its WAIT timer armed, its key watched);
//! it leaves the queue in one of these ways, each answered here: granted or refused at its
//! turn ([`answer_head`], the answer made by the grant step), timed out ([`time_out`]),
//! redirected because the key is not served here any more ([`answer_all`]), or gone on its
//! own: a disconnect, CLIENT UNBLOCK, the server turned replica ([`DepartingClients`]).
//! Whichever way, its timers are stopped and its key unwatched once the queue is empty.

use std::time::{Duration, Instant};

use dlock_core::error::LockError;
use dlock_core::terms::Terms;

use crate::ffi::blocked::{BlockHandler, BlockedClient, ClientId};
use crate::ffi::{timer, Ctx, Reply};
use crate::stats::{Stats, STATS};

use super::job::Job;
use super::queue::Waiter;
use super::registry::registry;
use super::registry::{Registry, Removed};
use super::{listen, wake};

/// Blocks the running command's client at the tail of the queue of `key`, asking `terms`,
/// for up to `wait_ms` (0: no limit); refused when a waiter limit is reached.
pub fn enqueue(
    ctx: Ctx,
    reg: &mut Registry,
    db: i32,
    key: &[u8],
    terms: &Terms<&[u8]>,
    wait_ms: i64,
) -> Result<(), LockError> {
    let cfg = crate::config::get();
    if cfg.max_waiters_per_key > 0 && reg.waiters_on(db, key) >= cfg.max_waiters_per_key {
        return Err(LockError::TooManyWaitersOnKey(cfg.max_waiters_per_key));
    }
    if cfg.max_waiters > 0 && reg.len() >= cfg.max_waiters {
        return Err(LockError::TooManyWaiters(cfg.max_waiters));
    }
    let client = BlockedClient::block::<DepartingClients>(ctx);
    let seq = reg.next_seq();
    let limited = wait_ms > 0;
    let timer = limited.then(|| {
        let job = Job::WaitTimeout {
            db,
            key: key.to_vec(),
            seq,
        };
        timer::start(ctx, wait_ms, job)
    });
    let since = Instant::now();
    let waiter = Waiter {
        client,
        terms: terms.owned(),
        connection: terms.bind.and_then(|_| ctx.connection()),
        timer,
        since,
        until: limited.then(|| since + Duration::from_millis(wait_ms as u64)),
    };
    if reg.waiters_on(db, key) == 0 {
        listen::watch(ctx, db, key);
    }
    reg.push(db, key, waiter);
    Ok(())
}

/// Answers the head waiter of `key` with what `answer` makes of it (its grant, or its
/// error), and takes it out of the queue. The caller knows there is a head.
pub fn answer_head(
    ctx: Ctx,
    reg: &mut Registry,
    db: i32,
    key: &[u8],
    answer: impl FnOnce(&Waiter) -> Reply,
) {
    let (seq, _) = reg.head(db, key).expect("a served waiter");
    let waiter = remove(ctx, reg, db, key, seq).expect("head waiter");
    let reply = answer(&waiter);
    waiter.client.unblock(Some(reply));
}

/// Waiter `seq`'s WAIT time-out fired: it is answered null and leaves the queue. Whether it
/// was still queued (then the waiters behind it may be served).
pub fn time_out(ctx: Ctx, db: i32, key: &[u8], seq: u64) -> bool {
    let removed = {
        let mut reg = registry();
        // The timer has fired: it must not be stopped again.
        reg.clear_wait_timer(db, key, seq);
        remove(ctx, &mut reg, db, key, seq)
    };
    let Some(waiter) = removed else {
        return false;
    };
    Stats::add(&STATS.wait_timeouts, 1);
    waiter.client.unblock(Some(Reply::Null));
    true
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

/// Takes waiter `seq` out of its queue, stopping its timers and unwatching its key once the
/// queue is empty; the caller answers the client (or frees it, when it left on its own).
fn remove(ctx: Ctx, reg: &mut Registry, db: i32, key: &[u8], seq: u64) -> Option<Waiter> {
    let Removed {
        mut waiter,
        lease_timer,
    } = reg.remove(db, key, seq)?;
    for t in lease_timer.into_iter().chain(waiter.timer.take()) {
        timer::stop(ctx, t);
    }
    if reg.waiters_on(db, key) == 0 {
        listen::unwatch(ctx, db, key);
    }
    Some(waiter)
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
