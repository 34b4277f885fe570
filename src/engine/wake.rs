//! What wakes a queue besides a command on its key: module timers (a WAIT time-out, a lease
//! deadline, the keys marked by events) and blocked clients leaving on their own.
//!
//! Whenever a lock may have become free — a lease running out, expiry/eviction (keyspace
//! events), FLUSHDB/FLUSHALL/SWAPDB (server events), a waiter leaving from the head,
//! DEL/UNLINK/RENAME/MOVE/overwrite by a user's command (the poll timer, or keyspace events
//! once many keys have queues) — the key's queue is served by the unit of work
//! (`work::with_lock`), which writes the grant like a command would (replicated) and answers
//! the waiter. Events only mark keys dirty and arm a 0 ms timer: writing from inside a
//! keyspace notification breaks replication order on Redis 7.0 (the write is propagated before
//! the DEL that caused it).
//!
//! Cluster mode: a key may leave the node under its queue (MIGRATE, its slot given away, the
//! cluster down). Before a wake-up serves a queue it asks where the server routes the key
//! (`ffi::cluster::route`); a key served elsewhere gets its waiters answered with the redirect
//! a fresh request would get, and nothing is granted or created here.
//!
//! Why poll: a subscription to write events costs Redis a context (~600 instructions) on
//! every write of the server, forever (there is no unsubscribe). Re-examining the few waited
//! keys every `POLL_MS` costs only while some key has a queue, in proportion to those keys.

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use crate::ffi::blocked::{BlockHandler, BlockedClient, ClientId};
use crate::ffi::cluster::{self, Route};
use crate::ffi::timer::{self, TimerId, TimerJob};
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

use super::{registry, work};

/// How often the waited keys are re-examined while some key has a queue: a DEL, RENAME,
/// MOVE or overwrite of a waited key, or (cluster) a key or slot leaving this node, is seen
/// within this (the promise is 10 ms).
const POLL_MS: i64 = 5;

/// Above this many keys with queues, polling gives way to a subscription to every keyspace
/// event (`events::watch_changes`, once per load, permanent). Polling costs ∝ waited keys ×
/// 200 ticks a second (callgrind, 7.0.15: ~12k instructions per tick for the timer and the
/// event-loop wake-up, ~6.7k per waited key); a subscription costs ~600 instructions on every
/// write of the whole server, forever. At 64 keys polling is ~90M instructions/s, what a
/// subscription costs a server doing ~140k writes/s: the bound keeps polling's cost small and
/// known, whatever the server's write rate.
pub const POLL_MAX_KEYS: usize = 64;

/// How soon a key whose serving a client pause put off is tried again.
const PAUSE_RETRY_MS: i64 = 1;

/// Set once keyspace events report every change (see `POLL_MAX_KEYS`): no more polling.
static CHANGES_REPORTED: AtomicBool = AtomicBool::new(false);

/// Why a timer was armed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Job {
    /// The WAIT time-out of waiter `seq` on `key`.
    WaitTimeout { db: i32, key: Vec<u8>, seq: u64 },
    /// A lease on `key` may have run out: serve its queue.
    LeaseCheck { db: i32, key: Vec<u8> },
    /// Keys touched by keyspace/server events: serve their queues.
    Recheck,
    /// Connections with bound holds closed: cut those leases (`bind`).
    CutLeases,
    /// Every `POLL_MS` while some key has a queue: serve every queue (catches DEL, RENAME,
    /// MOVE and overwrites, which no event reports while polling).
    Poll,
}

impl TimerJob for Job {
    fn fire(self, ctx: Ctx) {
        match self {
            Job::WaitTimeout { db, key, seq } => {
                let removed = {
                    let mut reg = registry();
                    // The timer has fired: it must not be stopped again.
                    reg.clear_wait_timer(db, &key, seq);
                    work::remove(ctx, &mut reg, db, &key, seq)
                };
                if let Some(waiter) = removed {
                    Stats::add(&STATS.wait_timeouts, 1);
                    waiter.client.unblock(Some(Reply::Null));
                    wake_key(ctx, db, &key);
                }
            }
            Job::LeaseCheck { db, key } => {
                if let Some(slot) = registry().lease_timer(db, &key) {
                    *slot = None;
                }
                wake_key(ctx, db, &key);
            }
            Job::CutLeases => super::bind::cut_leases(ctx),
            Job::Recheck => {
                let (mut keys, all) = {
                    let mut d = dirty();
                    let d = d.get_or_insert_with(Dirty::default);
                    d.armed = false;
                    (std::mem::take(&mut d.keys), std::mem::take(&mut d.all))
                };
                if all {
                    keys.extend(registry().all_keys());
                }
                for (db, key) in keys {
                    wake_key(ctx, db, &key);
                }
            }
            Job::Poll => {
                let reported = CHANGES_REPORTED.load(Ordering::Relaxed);
                let keys: Vec<(i32, Vec<u8>)> = {
                    let mut d = dirty();
                    let Some(d) = d.as_mut() else { return };
                    d.poll = None; // fired: must not be stopped
                    if ctx.writes_paused() {
                        // Nobody can write during a pause; the next tick looks again.
                        arm_poll(ctx, d);
                        return;
                    }
                    let watched = d
                        .watched
                        .iter()
                        .flat_map(|(db, keys)| keys.iter().map(|k| (*db, k.clone())));
                    // Events report every change of a key (then this runs in cluster mode
                    // only, see `arm_poll`), but not the cluster going down: one waited key
                    // stands for the cluster's state.
                    watched
                        .take(if reported { 1 } else { usize::MAX })
                        .collect()
                };
                if reported {
                    let sample = keys.first().filter(|_| ctx.may_write());
                    if let Some((db, key)) = sample {
                        ctx.select_db(*db);
                        if cluster::route(ctx, key) != Route::Here {
                            mark_dirty(ctx, *db, None);
                        }
                    }
                } else {
                    for (db, key) in keys {
                        wake_key(ctx, db, &key);
                    }
                }
                if let Some(d) = dirty().as_mut() {
                    arm_poll(ctx, d);
                }
            }
        }
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
        serve_after_pause(ctx, db, key);
        return;
    }
    ctx.select_db(db);
    if !work::served_here(ctx, db, key) {
        return; // the key left this cluster node: its waiters were redirected
    }
    work::with_lock(ctx, db, key, None, None, |_, _, _| ());
}

/// The blocked clients of the engine (the handler the FFI layer calls back).
pub struct Clients;

impl BlockHandler for Clients {
    /// A blocked client left on its own (disconnect, CLIENT UNBLOCK, server turned replica).
    fn client_gone(ctx: Ctx, id: ClientId) -> Option<BlockedClient> {
        let mut reg = registry();
        let place = reg.place_of(id)?.clone();
        let was_head = reg.head(place.db, &place.key).map(|(seq, _)| seq) == Some(place.seq);
        let waiter = work::remove(ctx, &mut reg, place.db, &place.key, place.seq)?;
        // The head leaving may let the next waiters in (e.g. readers behind a writer).
        if was_head && reg.waiters_on(place.db, &place.key) > 0 {
            mark_dirty(ctx, place.db, Some(&place.key));
        }
        Some(waiter.client)
    }
}

/// The keys that have a queue, and those of them touched by events since the last recheck.
#[derive(Default)]
struct Dirty {
    /// Per database, so that an event looks its key up without copying it.
    watched: FxHashMap<i32, FxHashSet<Vec<u8>>>,
    keys: FxHashSet<(i32, Vec<u8>)>,
    all: bool,
    armed: bool,
    /// The poll timer, while some key has a queue and events do not report changes.
    poll: Option<TimerId<Job>>,
}

/// Arms the poll timer if some key has a queue and nothing else reports changes, or, in
/// cluster mode, to notice the cluster going down.
fn arm_poll(ctx: Ctx, d: &mut Dirty) {
    let needed = !CHANGES_REPORTED.load(Ordering::Relaxed) || cluster::enabled(ctx);
    if d.poll.is_none() && !d.watched.is_empty() && needed {
        d.poll = Some(timer::start(ctx, POLL_MS, Job::Poll));
    }
}

/// How many keys have a queue.
pub fn watched_keys() -> usize {
    dirty()
        .as_ref()
        .map_or(0, |d| d.watched.values().map(FxHashSet::len).sum())
}

/// Whether keyspace events report every change of a key (then nothing polls).
pub fn changes_are_reported() -> bool {
    CHANGES_REPORTED.load(Ordering::Relaxed)
}

/// Keyspace events now report every change of a key (`events::watch_changes`): polling stops.
pub fn changes_reported(ctx: Ctx) {
    CHANGES_REPORTED.store(true, Ordering::Relaxed);
    if cluster::enabled(ctx) {
        return; // the poll goes on, looking at one key (`Job::Poll`)
    }
    if let Some(t) = dirty().as_mut().and_then(|d| d.poll.take()) {
        timer::stop(ctx, t);
    }
}

static DIRTY: Mutex<Option<Dirty>> = Mutex::new(None);

/// A lock-free filter over the watched keys: bit `FxHash(key) % 1024` is set for each. A
/// keyspace event on a key whose bit is clear (nearly every key of the server while few keys
/// have queues) is dropped without taking a lock or calling Redis.
static FILTER: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];

fn filter_bit(key: &[u8]) -> (usize, u64) {
    let mut h = FxHasher::default();
    h.write(key);
    let n = (h.finish() >> 54) as usize; // top 10 bits: 0..1024
    (n / 64, 1 << (n % 64))
}

/// Whether `key` may have a queue (no false negatives).
pub fn may_be_watched(key: &[u8]) -> bool {
    let (word, bit) = filter_bit(key);
    FILTER[word].load(Ordering::Relaxed) & bit != 0
}

fn rebuild_filter(watched: &FxHashMap<i32, FxHashSet<Vec<u8>>>) {
    let mut words = [0u64; 16];
    for key in watched.values().flatten() {
        let (word, bit) = filter_bit(key);
        words[word] |= bit;
    }
    for (slot, w) in FILTER.iter().zip(words) {
        slot.store(w, Ordering::Relaxed);
    }
}

fn dirty() -> std::sync::MutexGuard<'static, Option<Dirty>> {
    DIRTY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes that `key` (or, with `None`, every key) may have changed; a 0 ms timer serves it on
/// the next event-loop turn. A key without a queue is ignored (no copy, no timer): this runs
/// for keyspace events on any key of the server.
pub fn mark_dirty(ctx: Ctx, db: i32, key: Option<&[u8]>) {
    let mut d = dirty();
    let Some(d) = d.as_mut() else {
        return; // no queue was ever made
    };
    match key {
        Some(k) => {
            if !may_be_watched(k) || !d.watched.get(&db).is_some_and(|keys| keys.contains(k)) {
                return;
            }
            d.keys.insert((db, k.to_vec()));
        }
        None => d.all = true,
    }
    arm_recheck(ctx, d, 0);
}

/// Arms the timer that serves the dirty keys in `delay_ms`, unless one is armed.
fn arm_recheck(ctx: Ctx, d: &mut Dirty, delay_ms: i64) {
    if !d.armed {
        d.armed = true;
        timer::start(ctx, delay_ms, Job::Recheck);
    }
}

/// Serves `key` again in 1 ms (a 0 ms timer would spin through a pause).
fn serve_after_pause(ctx: Ctx, db: i32, key: &[u8]) {
    let mut d = dirty();
    let Some(d) = d.as_mut() else { return };
    d.keys.insert((db, key.to_vec()));
    arm_recheck(ctx, d, PAUSE_RETRY_MS);
}

/// `key` has a queue now (events and the poll timer wake it).
pub(super) fn watch(ctx: Ctx, db: i32, key: &[u8]) {
    let mut d = dirty();
    let d = d.get_or_insert_with(Dirty::default);
    d.watched.entry(db).or_default().insert(key.to_vec());
    let (word, bit) = filter_bit(key);
    FILTER[word].fetch_or(bit, Ordering::Relaxed);
    arm_poll(ctx, d);
}

/// `key`'s queue is gone. The last one stops the poll timer (MODULE UNLOAD is refused while
/// a timer is armed).
pub(super) fn unwatch(ctx: Ctx, db: i32, key: &[u8]) {
    let mut d = dirty();
    let Some(d) = d.as_mut() else { return };
    if let Some(keys) = d.watched.get_mut(&db) {
        keys.remove(key);
        if keys.is_empty() {
            d.watched.remove(&db);
        }
        rebuild_filter(&d.watched);
    }
    if d.watched.is_empty() {
        if let Some(t) = d.poll.take() {
            timer::stop(ctx, t);
        }
    }
}

/// MODULE UNLOAD: frees the dirty set (no timer is armed by then: no queue is left).
pub(super) fn free_all() {
    rebuild_filter(&FxHashMap::default());
    CHANGES_REPORTED.store(false, Ordering::Relaxed);
    *dirty() = None;
}
