//! The waiter queues and the one grant path every wake source goes through.
//!
//! A queue per (db, key), strict FIFO by arrival. Whenever a lock may have become free — the
//! last RELEASE (inside that command), a lease running out (a module timer at the deadline),
//! DEL/UNLINK/RENAME/eviction/overwrite (keyspace events), FLUSHDB/FLUSHALL/SWAPDB (server
//! events), a waiter leaving from the head — [`serve`] grants to the head of the queue for as
//! long as the lock allows, writes the grant like a command would (replicated), and answers the
//! waiter. Events only mark keys dirty and arm a 0 ms timer: writing from inside a keyspace
//! notification breaks replication order on Redis 7.0 (PLATFORM-NOTES).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use std::ptr::NonNull;
use std::time::Instant;

use redis_module::{raw, Context};

use crate::blocking::{self, BlockedClient, Outcome, TimerId, TimerJob};
use crate::config;
use crate::stats::{Stats, STATS};
use crate::store::{self, FenceKey, LockKey};
use dlock_core::args::{AcquireArgs, Want};
use dlock_core::error::LockError;
use dlock_core::model::LockValue;
use dlock_core::rules::{self, Grant};

/// One queued client.
struct Waiter {
    bc: BlockedClient,
    owner: Vec<u8>,
    want: Want,
    lease_ms: i64,
    fence: bool,
    /// Its WAIT time-out timer (none for `WAIT 0`).
    timer: Option<TimerId>,
    /// When it joined the queue (for the wait-time percentiles).
    since: Instant,
}

#[derive(Default)]
struct Queue {
    /// By arrival sequence number: the first entry is the head.
    waiters: BTreeMap<u64, Waiter>,
    /// The timer armed for the next lease deadline on the key, and its firing time (unix ms).
    lease_timer: Option<(TimerId, i64)>,
}

#[derive(Default)]
pub struct Registry {
    queues: HashMap<i32, HashMap<Vec<u8>, Queue>>,
    /// Where each blocked client waits, for disconnects and CLIENT UNBLOCK.
    clients: HashMap<BlockedClient, (i32, Vec<u8>, u64)>,
    next_seq: u64,
}

/// Keys touched by events since the last recheck.
#[derive(Default)]
struct Dirty {
    keys: HashSet<(i32, Vec<u8>)>,
    all: bool,
    armed: bool,
}

lazy_static::lazy_static! {
    static ref REGISTRY: Mutex<Registry> = Mutex::new(Registry::default());
    static ref DIRTY: Mutex<Dirty> = Mutex::new(Dirty::default());
}

/// Number of queued clients, readable without the registry lock (event fast path, INFO).
static WAITING: AtomicUsize = AtomicUsize::new(0);

pub fn waiting() -> usize {
    WAITING.load(Ordering::Relaxed)
}

/// The registry. Lock order: REGISTRY before DIRTY, never the reverse; nothing called while
/// it is held calls back into code that takes it (keyspace events only touch DIRTY).
pub fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    // The `queues.is_empty()` checks keep the common no-waiter case free of key hashing.
    fn queue(&self, db: i32, key: &[u8]) -> Option<&Queue> {
        if self.queues.is_empty() {
            return None;
        }
        self.queues.get(&db)?.get(key)
    }

    fn queue_mut(&mut self, db: i32, key: &[u8]) -> Option<&mut Queue> {
        if self.queues.is_empty() {
            return None;
        }
        self.queues.get_mut(&db)?.get_mut(key)
    }

    pub fn waiters_on(&self, db: i32, key: &[u8]) -> usize {
        self.queue(db, key).map_or(0, |q| q.waiters.len())
    }

    /// Blocks the running command's client at the tail of the queue of `args.key`.
    pub fn enqueue(
        &mut self,
        ctx: &Context,
        db: i32,
        args: &AcquireArgs,
        wait_ms: i64,
    ) -> Result<(), LockError> {
        let cfg = config::get();
        let here = self.waiters_on(db, args.key);
        if cfg.max_waiters_per_key > 0 && here >= cfg.max_waiters_per_key {
            return Err(LockError::TooManyWaitersOnKey(cfg.max_waiters_per_key));
        }
        if cfg.max_waiters > 0 && self.clients.len() >= cfg.max_waiters {
            return Err(LockError::TooManyWaiters(cfg.max_waiters));
        }
        let bc = BlockedClient::block(ctx);
        let seq = self.next_seq;
        self.next_seq += 1;
        let timer = (wait_ms > 0).then(|| {
            blocking::start_timer(
                ctx,
                wait_ms,
                TimerJob::WaitTimeout {
                    db,
                    key: args.key.to_vec(),
                    seq,
                },
            )
        });
        let waiter = Waiter {
            bc,
            owner: args.owner.to_vec(),
            want: args.want,
            lease_ms: args.lease_ms,
            fence: args.fence,
            timer,
            since: Instant::now(),
        };
        self.queues
            .entry(db)
            .or_default()
            .entry(args.key.to_vec())
            .or_default()
            .waiters
            .insert(seq, waiter);
        self.clients.insert(bc, (db, args.key.to_vec(), seq));
        WAITING.store(self.clients.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Takes waiter `seq` out of its queue (stopping its WAIT timer); drops an empty queue.
    fn remove(&mut self, ctx: &Context, db: i32, key: &[u8], seq: u64) -> Option<Waiter> {
        let dbq = self.queues.get_mut(&db)?;
        let queue = dbq.get_mut(key)?;
        let mut waiter = queue.waiters.remove(&seq)?;
        if queue.waiters.is_empty() {
            if let Some((id, _)) = queue.lease_timer.take() {
                blocking::stop_timer(ctx, id);
            }
            dbq.remove(key);
            if dbq.is_empty() {
                self.queues.remove(&db);
            }
        }
        if let Some(id) = waiter.timer.take() {
            blocking::stop_timer(ctx, id);
        }
        self.clients.remove(&waiter.bc);
        WAITING.store(self.clients.len(), Ordering::Relaxed);
        Some(waiter)
    }

    fn all_keys(&self) -> Vec<(i32, Vec<u8>)> {
        self.queues
            .iter()
            .flat_map(|(db, q)| q.keys().map(move |k| (*db, k.clone())))
            .collect()
    }
}

/// Advances or creates the fencing counter for a grant. `Ok(Some(token))` when FENCE was asked.
pub fn fence_on_grant(
    ctx: &Context,
    key: &[u8],
    fresh_exclusive: bool,
    want_fence: bool,
) -> Result<Option<i64>, LockError> {
    if !fresh_exclusive && !want_fence {
        return Ok(None);
    }
    let fence = FenceKey::of(key);
    let current = fence.get(ctx)?;
    let next = match current {
        // Once the counter exists, every fresh exclusive grant advances it.
        Some(n) if fresh_exclusive => Some(n.checked_add(1).ok_or(LockError::FenceOverflow)?),
        None if fresh_exclusive && want_fence => Some(1),
        None if want_fence => Some(0),
        other => other,
    };
    if let Some(n) = next.filter(|n| Some(*n) != current) {
        fence.set(ctx, n);
    }
    Ok(if want_fence { next } else { None })
}

/// One request against the lock: the grant rules, then the fencing counter on a grant.
/// `Ok(Some((count, fence)))` granted (counted in INFO), `Ok(None)` must wait, `Err` refused.
/// A counter error undoes the grant, so an error changes nothing. Shared by the commands and
/// the queue.
#[allow(clippy::too_many_arguments)]
pub fn try_grant(
    ctx: &Context,
    lk: &mut LockKey,
    owner: &[u8],
    want: Want,
    lease_ms: i64,
    now: i64,
    queue_ahead: bool,
    want_fence: bool,
) -> Result<Option<(i64, Option<i64>)>, LockError> {
    // The counter can only fail when a fence is asked for or the grant is fresh, never on an
    // exclusive lock re-entered without FENCE: skip the copy in that (hot) case.
    let undo =
        (want_fence || !matches!(lk.value, LockValue::Exclusive(_))).then(|| lk.value.clone());
    match rules::acquire(&mut lk.value, owner, want, lease_ms, now, queue_ahead) {
        Grant::Granted {
            count,
            fresh_exclusive,
        } => match fence_on_grant(ctx, lk.key, fresh_exclusive, want_fence) {
            Ok(fence) => {
                Stats::add(
                    if count == 1 {
                        &STATS.grants
                    } else {
                        &STATS.reentrant_grants
                    },
                    1,
                );
                Ok(Some((count, fence)))
            }
            Err(e) => {
                if let Some(before) = undo {
                    lk.value = before;
                }
                Err(e)
            }
        },
        Grant::Busy => Ok(None),
        Grant::Refused(e) => Err(e),
    }
}

/// Serves the queue of `lk`: grants to the head while the lock allows it (consecutive readers
/// together), answers waiters the value no longer suits (WRONGTYPE), stops at the first that
/// must keep waiting. The caller saves `lk` afterwards.
pub fn serve(ctx: &Context, reg: &mut Registry, db: i32, lk: &mut LockKey, now: i64) {
    loop {
        let Some(queue) = reg.queue(db, lk.key) else {
            return;
        };
        let Some((&seq, head)) = queue.waiters.first_key_value() else {
            return;
        };
        let outcome = match try_grant(
            ctx,
            lk,
            &head.owner,
            head.want,
            head.lease_ms,
            now,
            false,
            head.fence,
        ) {
            Ok(None) => return,
            Ok(Some((count, fence))) => {
                Stats::add(&STATS.handoffs, 1);
                Outcome::Granted { count, fence }
            }
            Err(e) => Outcome::Error(e.message("dlock")),
        };
        if let Outcome::Error(_) = outcome {
            Stats::add(&STATS.errors, 1);
        }
        let waiter = reg.remove(ctx, db, lk.key, seq).expect("head waiter");
        if let Outcome::Granted { .. } = outcome {
            crate::stats::record_wait(waiter.since.elapsed());
        }
        waiter.bc.unblock(Some(outcome));
    }
}

/// Drops lapsed read-write holders, then serves the queue. Every command that changes a lock
/// starts with this, so commands arriving between an event and its timer respect the queue.
fn prepare(ctx: &Context, reg: &mut Registry, db: i32, lk: &mut LockKey, now: i64) {
    let lapsed = rules::prune_lapsed(&mut lk.value, now);
    Stats::add(&STATS.leases_expired, lapsed as u64);
    serve(ctx, reg, db, lk, now);
}

/// Arms (or moves earlier) the timer that wakes the queue of `lk` when its next lease may run
/// out: a lease that expires with waiters queued is handed on within milliseconds, not on
/// Redis's 100 ms expiry cycle.
fn rearm(ctx: &Context, reg: &mut Registry, db: i32, lk: &LockKey, now: i64) {
    let Some(queue) = reg.queue_mut(db, lk.key) else {
        return;
    };
    // Redis expires a key once now > deadline: wake 1 ms after it.
    let wanted = rules::next_change(&lk.value).map(|at| at.saturating_add(1));
    match (queue.lease_timer, wanted) {
        (Some((_, at)), Some(w)) if at <= w => {} // an earlier timer re-checks and re-arms
        (old, Some(w)) => {
            if let Some((id, _)) = old {
                blocking::stop_timer(ctx, id);
            }
            // At least 1 ms: while clients are paused Redis does not expire keys, and a 0 ms
            // timer would spin until the pause ends.
            let id = blocking::start_timer(
                ctx,
                (w - now).max(1),
                TimerJob::LeaseCheck {
                    db,
                    key: lk.key.to_vec(),
                },
            );
            queue.lease_timer = Some((id, w));
        }
        (Some((id, _)), None) => {
            blocking::stop_timer(ctx, id);
            queue.lease_timer = None;
        }
        (None, None) => {}
    }
}

/// One unit of work on the lock at `key`: open it, serve its queue (lapsed holders, a lock
/// freed behind the module's back), apply `step`, store the result (replicated), re-arm the
/// lease timer. Every writing command and every timer wake goes through here.
pub fn with_lock<R>(
    ctx: &Context,
    db: i32,
    key: &[u8],
    name: Option<NonNull<raw::RedisModuleString>>,
    owner: Option<&[u8]>,
    step: impl FnOnce(&mut Registry, &mut LockKey, i64) -> R,
) -> R {
    let mut lk = LockKey::open(ctx, key, name, true, owner);
    let now = store::now_ms();
    let mut reg = registry();
    prepare(ctx, &mut reg, db, &mut lk, now);
    let result = step(&mut reg, &mut lk, now);
    lk.save();
    rearm(ctx, &mut reg, db, &lk, now);
    result
}

/// Re-examines `key` outside any command (timers): lapsed holders, free lock, overwritten value.
fn wake_key(ctx: &Context, db: i32, key: &[u8]) {
    if !blocking::may_write(ctx) {
        return;
    }
    if registry().waiters_on(db, key) == 0 {
        return;
    }
    store::select_db(ctx, db);
    with_lock(ctx, db, key, None, None, |_, _, _| ());
}

/// A blocked client left on its own (disconnect, CLIENT UNBLOCK, server turned replica).
/// Returns whether it was still queued; the caller then frees its handle.
pub fn client_gone(ctx: &Context, bc: BlockedClient) -> bool {
    let mut reg = registry();
    let Some((db, key, seq)) = reg.clients.get(&bc).cloned() else {
        return false;
    };
    let was_head = reg
        .queue(db, &key)
        .and_then(|q| q.waiters.keys().next().copied())
        == Some(seq);
    reg.remove(ctx, db, &key, seq);
    // The head leaving may let the next waiters in (e.g. readers behind a writer).
    if was_head && reg.waiters_on(db, &key) > 0 {
        mark_dirty(ctx, db, Some(&key));
    }
    true
}

/// Timer entry point.
pub fn on_timer(ctx: &Context, job: TimerJob) {
    match job {
        TimerJob::WaitTimeout { db, key, seq } => {
            let removed = {
                let mut reg = registry();
                // The timer has fired: it must not be stopped again.
                if let Some(w) = reg
                    .queue_mut(db, &key)
                    .and_then(|q| q.waiters.get_mut(&seq))
                {
                    w.timer = None;
                }
                reg.remove(ctx, db, &key, seq)
            };
            if let Some(waiter) = removed {
                Stats::add(&STATS.wait_timeouts, 1);
                waiter.bc.unblock(Some(Outcome::TimedOut));
                wake_key(ctx, db, &key);
            }
        }
        TimerJob::LeaseCheck { db, key } => {
            if let Some(q) = registry().queue_mut(db, &key) {
                q.lease_timer = None;
            }
            wake_key(ctx, db, &key);
        }
        TimerJob::Recheck => {
            let (keys, all) = {
                let mut d = DIRTY.lock().unwrap_or_else(|e| e.into_inner());
                d.armed = false;
                (std::mem::take(&mut d.keys), std::mem::take(&mut d.all))
            };
            let mut keys = keys;
            if all {
                keys.extend(registry().all_keys());
            }
            for (db, key) in keys {
                wake_key(ctx, db, &key);
            }
        }
    }
}

/// Notes that `key` (or, with `None`, every key) may have changed; a 0 ms timer serves it on
/// the next event-loop turn.
pub fn mark_dirty(ctx: &Context, db: i32, key: Option<&[u8]>) {
    let mut d = DIRTY.lock().unwrap_or_else(|e| e.into_inner());
    match key {
        Some(k) => {
            d.keys.insert((db, k.to_vec()));
        }
        None => d.all = true,
    }
    if !d.armed {
        d.armed = true;
        blocking::start_timer(ctx, 0, TimerJob::Recheck);
    }
}
