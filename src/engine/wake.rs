//! The bookkeeping of what wakes a queue besides a command on its key: the keys that have a
//! queue (and a lock-free filter over them for keyspace events), the keys marked by events
//! since the last recheck, and the poll timer. Which events reach the module is decided in
//! `listen`; what a timer does when it fires is in `fire`.
//!
//! Whenever a lock may have become free — a lease running out, expiry/eviction, DEL/UNLINK/
//! RENAME/MOVE/EXPIRE by a user's command (keyspace events), FLUSHDB/FLUSHALL/SWAPDB (server
//! events), a waiter leaving from the head — the key is marked here and its queue is served
//! from a timer by the unit of work (`fire`, `work::unit_of_work`). Events only mark keys and
//! arm a 0 ms timer: writing from inside a keyspace notification breaks replication order on
//! Redis 7.0 (the write is propagated before the DEL that caused it).
//!
//! The poll, every `POLL_MS` while some key has a queue, on every server: the type of at most
//! `POLL_BATCH` waited keys (an overwrite by another type sends no event the module listens
//! to: the events that report it fire for every overwrite of any key, a cost on every write),
//! and in cluster mode where one waited key is routed (the cluster going down, or a slot
//! taken by a newer epoch in gossip, send no event).

use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use crate::ffi::{timer, Ctx};

use super::job::{Job, Timer};

/// How often the poll looks at waited keys (their type; in cluster mode, where one is routed).
/// An overwrite of one of `n` waited keys by another type is seen within
/// `POLL_MS * ceil(n / POLL_BATCH)` (400 ms with 1,000 keys), the cluster going down within
/// `POLL_MS`. Waking the server is most of a tick's cost (~90 µs of CPU on the project's VM):
/// 10 ticks a second keep an idle server with waiters under 1% of a core, a cluster node
/// under 0.5% (docs/BENCHMARKS.md, Scale). Slot changes made on this node (`CLUSTER
/// SETSLOT`, MIGRATE, a failover) are seen at once through `listen`.
pub(super) const POLL_MS: i64 = 100;

/// Waited keys whose type one poll tick looks at (an open and a type check each, ~0.5k
/// instructions): a tick's cost is bounded whatever the number of waited keys.
pub(super) const POLL_BATCH: usize = 256;

/// How soon a key whose serving a client pause put off is tried again.
const PAUSE_RETRY_MS: i64 = 1;

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
    /// The poll timer, while some key has a queue.
    poll: Option<Timer>,
    /// Where the next poll batch starts among the waited keys.
    cursor: usize,
}

impl Watched {
    /// The next `POLL_BATCH` waited keys, in turn (every key within `ceil(n / POLL_BATCH)`
    /// ticks while the set does not change).
    fn next_batch(&mut self) -> Vec<(i32, Vec<u8>)> {
        let total: usize = self.watched.values().map(FxHashSet::len).sum();
        if total == 0 {
            return vec![];
        }
        let start = self.cursor % total;
        self.cursor = start + POLL_BATCH;
        let all = self
            .watched
            .iter()
            .flat_map(|(db, keys)| keys.iter().map(move |k| (*db, k)));
        all.clone()
            .skip(start)
            .chain(all.take(start))
            .take(POLL_BATCH)
            .map(|(db, k)| (db, k.clone()))
            .collect()
    }
}

/// Arms the poll timer if some key has a queue.
fn arm_poll(ctx: Ctx, d: &mut Watched) {
    if d.poll.is_none() && !d.watched.is_empty() {
        d.poll = Some(timer::start(ctx, POLL_MS, Job::Poll));
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

/// One poll tick's work (`poll_keys`).
pub(super) struct PollTick {
    /// The next `POLL_BATCH` waited keys, to look at their type.
    pub batch: Vec<(i32, Vec<u8>)>,
    /// One waited key, standing for the cluster's state (routed elsewhere: the cluster went
    /// down or the slot moved, which sends no event).
    pub sample: Option<(i32, Vec<u8>)>,
}

/// The `Job::Poll` timer fired: the waited keys to look at now, or `None` when there is
/// nothing to do this tick. Call `rearm_poll` after looking.
pub(super) fn poll_keys(ctx: Ctx) -> Option<PollTick> {
    let mut d = state();
    let d = d.as_mut()?;
    d.poll = None; // fired: must not be stopped
    if ctx.writes_paused() {
        // Nobody can write during a pause; the next tick looks again.
        arm_poll(ctx, d);
        return None;
    }
    let sample = d
        .watched
        .iter()
        .find_map(|(db, keys)| Some((*db, keys.iter().next()?.clone())));
    let batch = d.next_batch();
    Some(PollTick { batch, sample })
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

/// `key` has a queue now (events and the poll timer wake it). True for the first such key:
/// the caller (`listen`) then starts listening.
pub(super) fn watch(ctx: Ctx, db: i32, key: &[u8]) -> bool {
    let mut d = state();
    let d = d.get_or_insert_with(Watched::default);
    let first = d.watched.is_empty();
    d.watched.entry(db).or_default().insert(key.to_vec());
    let (word, bit) = filter_bit(key);
    FILTER[word].fetch_or(bit, Ordering::Relaxed);
    arm_poll(ctx, d);
    first
}

/// `key`'s queue is gone. The last one stops the poll timer (MODULE UNLOAD is refused while
/// a timer is armed) and returns true: the caller (`listen`) then stops listening.
pub(super) fn unwatch(ctx: Ctx, db: i32, key: &[u8]) -> bool {
    let mut d = state();
    let Some(d) = d.as_mut() else { return false };
    if let Some(keys) = d.watched.get_mut(&db) {
        keys.remove(key);
        if keys.is_empty() {
            d.watched.remove(&db);
        }
        rebuild_filter(&d.watched);
    }
    if !d.watched.is_empty() {
        return false;
    }
    if let Some(t) = d.poll.take() {
        timer::stop(ctx, t);
    }
    true
}

/// MODULE UNLOAD: frees the watched set (no timer is armed by then: no queue is left).
pub(super) fn free_all() {
    rebuild_filter(&FxHashMap::default());
    *state() = None;
}
