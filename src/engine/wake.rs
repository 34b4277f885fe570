//! The bookkeeping of what wakes a queue besides a command on its key: the keys that have a
//! queue (and a lock-free filter over them for keyspace events), the keys marked by events
//! since the last recheck, and the poll timer. What a timer does when it fires is in `fire`.
//!
//! Whenever a lock may have become free — a lease running out, expiry/eviction (keyspace
//! events), FLUSHDB/FLUSHALL/SWAPDB (server events), a waiter leaving from the head,
//! DEL/UNLINK/RENAME/MOVE/overwrite by a user's command (the poll timer, or keyspace events
//! once many keys have queues) — the key is marked here and its queue is served from a timer
//! by the unit of work (`fire`, `work::unit_of_work`). Events only mark keys and arm a 0 ms timer:
//! writing from inside a keyspace notification breaks replication order on Redis 7.0 (the
//! write is propagated before the DEL that caused it).
//!
//! Why poll: a subscription to write events costs Redis a context (~600 instructions) on
//! every write of the server, forever (there is no unsubscribe). Re-examining the few waited
//! keys every `POLL_MS` costs only while some key has a queue, in proportion to those keys.

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use crate::ffi::{cluster, timer, Ctx};

use super::job::{Job, Timer};

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

/// Set once keyspace events report every change (see `POLL_MAX_KEYS`): no more polling
/// (except the cluster-state sample, see `poll_keys`).
static CHANGES_REPORTED: AtomicBool = AtomicBool::new(false);

/// The keys that have a queue, those of them marked by events since the last recheck, and
/// the timers that look at them.
#[derive(Default)]
struct Watched {
    /// Per database, so that an event looks its key up without copying it.
    watched: FxHashMap<i32, FxHashSet<Vec<u8>>>,
    /// Marked since the last recheck.
    keys: FxHashSet<(i32, Vec<u8>)>,
    /// Every key was marked (a server event).
    all: bool,
    /// The recheck timer is armed.
    armed: bool,
    /// The poll timer, while some key has a queue and events do not report changes.
    poll: Option<Timer>,
}

/// Arms the poll timer if some key has a queue and nothing else reports changes, or, in
/// cluster mode, to notice the cluster going down.
fn arm_poll(ctx: Ctx, d: &mut Watched) {
    let needed = !CHANGES_REPORTED.load(Ordering::Relaxed) || cluster::enabled(ctx);
    if d.poll.is_none() && !d.watched.is_empty() && needed {
        d.poll = Some(timer::start(ctx, POLL_MS, Job::Poll));
    }
}

/// How many keys have a queue.
pub fn watched_keys() -> usize {
    state()
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
    if let Some(t) = state().as_mut().and_then(|d| d.poll.take()) {
        timer::stop(ctx, t);
    }
}

static WATCHED: Mutex<Option<Watched>> = Mutex::new(None);

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

fn state() -> std::sync::MutexGuard<'static, Option<Watched>> {
    WATCHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes that `key` (or, with `None`, every key) may have changed; a 0 ms timer serves it on
/// the next event-loop turn. A key without a queue is ignored (no copy, no timer): this runs
/// for keyspace events on any key of the server.
pub fn mark_dirty(ctx: Ctx, db: i32, key: Option<&[u8]>) {
    let mut d = state();
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
fn arm_recheck(ctx: Ctx, d: &mut Watched, delay_ms: i64) {
    if !d.armed {
        d.armed = true;
        timer::start(ctx, delay_ms, Job::Recheck);
    }
}

/// The `Job::Recheck` timer fired: the keys marked since, and whether every key was.
pub(super) fn take_marked() -> (FxHashSet<(i32, Vec<u8>)>, bool) {
    let mut d = state();
    let d = d.get_or_insert_with(Watched::default);
    d.armed = false;
    (std::mem::take(&mut d.keys), std::mem::take(&mut d.all))
}

/// The `Job::Poll` timer fired: the waited keys to look at now (all of them, or one standing
/// for the cluster's state once events report every change), or `None` when there is nothing
/// to do this tick. Call `rearm_poll` after looking.
pub(super) fn poll_keys(ctx: Ctx) -> Option<Vec<(i32, Vec<u8>)>> {
    let reported = CHANGES_REPORTED.load(Ordering::Relaxed);
    let mut d = state();
    let d = d.as_mut()?;
    d.poll = None; // fired: must not be stopped
    if ctx.writes_paused() {
        // Nobody can write during a pause; the next tick looks again.
        arm_poll(ctx, d);
        return None;
    }
    let watched = d
        .watched
        .iter()
        .flat_map(|(db, keys)| keys.iter().map(|k| (*db, k.clone())));
    // Events report every change of a key (then this runs in cluster mode only, see
    // `arm_poll`), but not the cluster going down: one waited key stands for the cluster's
    // state.
    Some(
        watched
            .take(if reported { 1 } else { usize::MAX })
            .collect(),
    )
}

/// Arms the next poll tick if it is still needed.
pub(super) fn rearm_poll(ctx: Ctx) {
    if let Some(d) = state().as_mut() {
        arm_poll(ctx, d);
    }
}

/// Serves `key` again in 1 ms (a 0 ms timer would spin through a pause).
pub(super) fn serve_after_pause(ctx: Ctx, db: i32, key: &[u8]) {
    let mut d = state();
    let Some(d) = d.as_mut() else { return };
    d.keys.insert((db, key.to_vec()));
    arm_recheck(ctx, d, PAUSE_RETRY_MS);
}

/// `key` has a queue now (events and the poll timer wake it).
pub(super) fn watch(ctx: Ctx, db: i32, key: &[u8]) {
    let mut d = state();
    let d = d.get_or_insert_with(Watched::default);
    d.watched.entry(db).or_default().insert(key.to_vec());
    let (word, bit) = filter_bit(key);
    FILTER[word].fetch_or(bit, Ordering::Relaxed);
    arm_poll(ctx, d);
}

/// `key`'s queue is gone. The last one stops the poll timer (MODULE UNLOAD is refused while
/// a timer is armed).
pub(super) fn unwatch(ctx: Ctx, db: i32, key: &[u8]) {
    let mut d = state();
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

/// MODULE UNLOAD: frees the watched set (no timer is armed by then: no queue is left).
pub(super) fn free_all() {
    rebuild_filter(&FxHashMap::default());
    CHANGES_REPORTED.store(false, Ordering::Relaxed);
    *state() = None;
}
