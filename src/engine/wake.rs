//! The bookkeeping of what wakes a queue besides a command on its key: the keys that have a
//! queue (and a lock-free filter over them for keyspace events), the keys marked by events
//! since the last recheck, and the poll (when it is due, and what it looks at). Which events
//! reach the module is decided in `listen`; what a timer does is in `fire`.
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
//! taken by a newer epoch in gossip, send no event). It runs in Redis's own cron tick
//! (`serverCron`, `hz` times a second, 10 by default), which wakes the server anyway: a timer
//! of its own would double an idle server's wake-ups, and a wake-up costs more than the poll
//! (docs/SCALE.md, *Idle CPU*). Only where the cron runs less often than every `POLL_MS`
//! (`hz` below 10) does a timer (`Job::Poll`) poll in between. The poll only reads: what it
//! finds is marked and served by the 0 ms recheck timer, as events are.

use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use indexmap::{Equivalent, IndexSet};
use rustc_hash::{FxBuildHasher, FxHashSet, FxHasher};

use crate::ffi::cluster::{self, Route};
use crate::ffi::context::now_ms;
use crate::ffi::key::{Key, KeyKind};
use crate::ffi::{timer, Ctx, RStr};

use super::job::{Job, Timer};

/// How often the poll looks at waited keys (their type; in cluster mode, where one is routed).
/// An overwrite of one of `n` waited keys by another type is seen within
/// `POLL_MS * ceil(n / POLL_BATCH)` (100 ms up to 32 keys, 3.2 s with 1,000), the cluster
/// going down within `POLL_MS`. Slot changes made on this node (`CLUSTER SETSLOT`, MIGRATE,
/// a failover) are seen at once through `listen`.
pub(super) const POLL_MS: i64 = 100;

/// Waited keys whose type one poll tick looks at (an open, a type check and a close each,
/// ~1.5k instructions: a tick costs ~65k instructions with 1,000 waited keys, ~0.1% of a
/// core at 10 ticks a second): a tick's cost is bounded whatever the number of waited keys.
pub(super) const POLL_BATCH: usize = 32;

/// The slowest cron that polls often enough by itself (a tick every `POLL_MS`).
const MIN_CRON_HZ: i32 = (1000 / POLL_MS) as i32;

/// How soon a key whose serving a client pause put off is tried again.
const PAUSE_RETRY_MS: i64 = 1;

/// The keys that have a queue: in the order the poll takes them, looked up by key for events.
type WaitedKeys = IndexSet<(i32, Vec<u8>), FxBuildHasher>;

/// A waited key looked up without copying it: hashes as `(i32, Vec<u8>)` does (the database,
/// then the bytes with their length).
#[derive(Hash)]
struct WaitedRef<'a>(i32, &'a [u8]);

impl Equivalent<(i32, Vec<u8>)> for WaitedRef<'_> {
    fn equivalent(&self, key: &(i32, Vec<u8>)) -> bool {
        self.0 == key.0 && self.1 == key.1.as_slice()
    }
}

/// The keys that have a queue, those of them marked by events since the last recheck, and
/// the timers that look at them.
#[derive(Default)]
struct Watched {
    watched: WaitedKeys,
    /// Marked since the last recheck.
    keys: FxHashSet<(i32, Vec<u8>)>,
    /// Every key was marked (a server event).
    all: bool,
    /// The recheck timer is armed.
    armed: bool,
    /// The poll timer, while some key has a queue and the cron is not known to tick often
    /// enough.
    poll: Option<Timer>,
    /// Redis's cron ticks a second, as its last tick said (0: no tick since the first key
    /// was queued).
    cron_hz: i32,
    /// When the poll last looked (ms).
    last_poll: i64,
    /// Where the next poll batch starts among the waited keys (an index of `watched`).
    cursor: usize,
    /// How many waited keys set each bit of [`FILTER`], so that a key leaving clears its bit
    /// when it was the last (no rebuild over every key).
    filter_counts: Vec<u32>,
}

impl Watched {
    /// Removes waited key `i` in O(1) without taking a turn from any other key: the keys at
    /// and after `cursor` have not been looked at in this round and stay at or after it.
    /// (A shift would keep the order but move every later key.)
    fn remove_keeping_turns(&mut self, i: usize) {
        if i < self.cursor {
            // Looked at already: trade places with the last key looked at, so that the key
            // moved in from the end lands where the round continues.
            self.watched.swap_indices(i, self.cursor - 1);
            self.cursor -= 1;
            self.watched.swap_remove_index(self.cursor);
        } else {
            self.watched.swap_remove_index(i);
        }
        if self.cursor >= self.watched.len() {
            self.cursor = 0;
        }
    }

    /// Counts `key` in the filter (`add`) or takes it out, setting or clearing its bit.
    fn count_in_filter(&mut self, key: &[u8], add: bool) {
        if self.filter_counts.is_empty() {
            self.filter_counts = vec![0; FILTER.len() * 64];
        }
        let (word, bit) = filter_bit(key);
        let n = &mut self.filter_counts[word * 64 + bit.trailing_zeros() as usize];
        if add {
            *n += 1;
            FILTER[word].fetch_or(bit, Ordering::Relaxed);
        } else {
            *n -= 1;
            if *n == 0 {
                FILTER[word].fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    /// The next `POLL_BATCH` waited keys, in turn: every key within `ceil(n / POLL_BATCH)`
    /// ticks (a key leaving keeps the others' order). Costs the batch, not the set.
    fn next_batch(&mut self) -> Vec<(i32, Vec<u8>)> {
        let n = self.watched.len();
        if n == 0 {
            return vec![];
        }
        let take = POLL_BATCH.min(n);
        let start = self.cursor % n;
        self.cursor = (start + take) % n;
        (start..start + take)
            .filter_map(|i| self.watched.get_index(i % n).cloned())
            .collect()
    }
}

/// Arms the poll timer if some key has a queue and the cron is not known to poll often
/// enough.
fn arm_poll(ctx: Ctx, d: &mut Watched) {
    if d.poll.is_none() && !d.watched.is_empty() && d.cron_hz < MIN_CRON_HZ {
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

fn clear_filter() {
    for slot in &FILTER {
        slot.store(0, Ordering::Relaxed);
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
            if !may_be_watched(k) || !d.watched.contains(&WaitedRef(db, k)) {
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

/// Redis's cron ticked (`hz` times a second) while some key has a queue: the waited keys to
/// look at if the poll is due, else `None`. Due when waiting for the next cron tick would
/// make the poll later than `POLL_MS` (every tick at `hz` 10, every tenth at 100). Below
/// `MIN_CRON_HZ` the timer polls instead.
pub(super) fn cron_tick(ctx: Ctx, hz: i32) -> Option<PollTick> {
    let mut d = state();
    let d = d.as_mut()?;
    d.cron_hz = hz;
    if hz < MIN_CRON_HZ {
        arm_poll(ctx, d);
        return None;
    }
    if now_ms() - d.last_poll + 1000 / i64::from(hz) <= POLL_MS {
        return None;
    }
    poll_keys(ctx, d)
}

/// The `Job::Poll` timer fired: the waited keys to look at now, or `None` when there is
/// nothing to do this tick; armed again while the cron ticks too seldom.
pub(super) fn poll_timer(ctx: Ctx) -> Option<PollTick> {
    let mut d = state();
    let d = d.as_mut()?;
    d.poll = None; // fired: must not be stopped
    arm_poll(ctx, d);
    poll_keys(ctx, d)
}

fn poll_keys(ctx: Ctx, d: &mut Watched) -> Option<PollTick> {
    if d.watched.is_empty() || ctx.writes_paused() {
        // Nobody can write during a pause; the next tick looks again.
        return None;
    }
    d.last_poll = now_ms();
    let sample = d.watched.first().cloned();
    let batch = d.next_batch();
    Some(PollTick { batch, sample })
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
    if d.watched.insert((db, key.to_vec())) {
        d.count_in_filter(key, true);
    }
    arm_poll(ctx, d);
    first
}

/// `key`'s queue is gone. The last one stops the poll timer (MODULE UNLOAD is refused while
/// a timer is armed) and returns true: the caller (`listen`) then stops listening.
pub(super) fn unwatch(ctx: Ctx, db: i32, key: &[u8]) -> bool {
    let mut d = state();
    let Some(d) = d.as_mut() else { return false };
    if let Some(i) = d.watched.get_index_of(&WaitedRef(db, key)) {
        d.remove_keeping_turns(i);
        d.count_in_filter(key, false);
    }
    if !d.watched.is_empty() {
        return false;
    }
    if let Some(t) = d.poll.take() {
        timer::stop(ctx, t);
    }
    // The cron is heard again from the next first queue on (`hz` may change meanwhile).
    d.cron_hz = 0;
    true
}

/// MODULE UNLOAD: frees the watched set (no timer is armed by then: no queue is left).
pub(super) fn free_all() {
    clear_filter();
    *state() = None;
}

/// One tick of the poll (run by Redis's cron, `listen::Cron`, or by `Job::Poll` where the cron
/// is too slow). Reads only: a key found changed is marked, and served by the recheck timer.
pub(super) fn poll(ctx: Ctx, tick: Option<PollTick>) {
    let Some(tick) = tick else { return };
    // The cluster going down, or a slot taken by a newer epoch heard in gossip, sends no
    // event: one waited key stands for the cluster's state.
    let sample = tick
        .sample
        .filter(|_| cluster::enabled(ctx) && ctx.may_write());
    if let Some((db, key)) = sample {
        ctx.select_db(db);
        if cluster::route(ctx, &key) != Route::Here {
            mark_dirty(ctx, db, None);
        }
    }
    for (db, key) in tick.batch {
        ctx.select_db(db);
        // Still a hash: not overwritten by another type (a lock's own changes come with
        // commands, its deletion with an event).
        let name = RStr::new(ctx, &key);
        if Key::open(ctx, &name, false).kind() != KeyKind::Hash {
            mark_dirty(ctx, db, Some(&key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(n: usize) -> Watched {
        let mut d = Watched::default();
        // Not counted in the filter, which is global: only the filter's own test touches it.
        for k in 0..n {
            d.watched.insert((0, format!("k{k}").into_bytes()));
        }
        d
    }

    /// The keys not yet looked at in this round are all looked at in the rest of the round
    /// after another key left, wherever that key and the cursor were (a plain swap removal
    /// would move the last key behind the cursor, a whole round late).
    #[test]
    fn a_key_leaving_takes_no_turn_from_the_others() {
        for n in [2usize, 3, 31, 32, 33, 100] {
            for start in [0, 1, n / 2, n - 1] {
                for gone in [0, 1, n / 2, n - 1] {
                    let mut d = watched(n);
                    d.cursor = start;
                    let gone_key = (0, format!("k{gone}").into_bytes());
                    let not_yet: Vec<_> = (start..n)
                        .map(|i| d.watched[i].clone())
                        .filter(|k| *k != gone_key)
                        .collect();
                    d.remove_keeping_turns(gone);
                    // The rest of the round: the keys from the cursor to the end.
                    let rest = d.watched.len() - d.cursor;
                    let batches = d.watched.len().div_ceil(POLL_BATCH);
                    let order: Vec<_> = (0..batches).flat_map(|_| d.next_batch()).collect();
                    let seen: FxHashSet<_> = order.into_iter().take(rest).collect();
                    for k in &not_yet {
                        assert!(
                            seen.contains(k),
                            "n {n}, cursor {start}, removed {gone}: {k:?} not looked at in the rest of the round"
                        );
                    }
                    assert!(!seen.contains(&gone_key));
                }
            }
        }
    }

    #[test]
    fn the_filter_clears_a_bit_only_with_its_last_key() {
        clear_filter();
        let mut d = watched(0);
        // Two keys on one bit: find a pair.
        let a = b"a".to_vec();
        let bit = filter_bit(&a);
        let b = (0..100_000)
            .map(|i| format!("b{i}").into_bytes())
            .find(|k| filter_bit(k) == bit)
            .expect("a second key on the same bit");
        d.count_in_filter(&a, true);
        d.count_in_filter(&b, true);
        d.count_in_filter(&a, false);
        assert!(may_be_watched(&b), "b still waits");
        d.count_in_filter(&b, false);
        assert!(!may_be_watched(&b), "nobody on that bit");
    }
}
