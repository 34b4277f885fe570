//! The bookkeeping of what wakes a queue besides a command on its key: the keys that have a
//! queue (and a lock-free filter over them for keyspace events), the keys marked by events
//! since the last recheck, and the poll timer. What a timer does when it fires is in `fire`.
//!
//! Whenever a lock may have become free — a lease running out, expiry/eviction (keyspace
//! events), FLUSHDB/FLUSHALL/SWAPDB (server events), a waiter leaving from the head,
//! DEL/UNLINK/RENAME/MOVE/overwrite by a user's command — the key is marked here and its
//! queue is served from a timer by the unit of work (`fire`, `work::unit_of_work`). Events
//! only mark keys and arm a 0 ms timer: writing from inside a keyspace notification breaks
//! replication order on Redis 7.0 (the write is propagated before the DEL that caused it).
//!
//! Cluster mode: the cluster going down sends no event: the poll also runs there, and every
//! `CLUSTER_POLL_MS` `fire` asks where one waited key is routed.
//!
//! How a DEL/RENAME/MOVE/overwrite of a waited key is seen, at a cost that does not grow with
//! the number of waited keys and is gone once nobody waits:
//! - Redis 7.2+ and Valkey: `RedisModuleEvent_Key` (a key deleted, moved away or
//!   overwritten), subscribed while some key has a queue and dropped when the last queue goes.
//!   No polling.
//! - Generic keyspace events (del, rename, move, expire..., not SET/HSET): on 8.2+ subscribed
//!   and dropped with the key events; before 8.2 and on Valkey, where a keyspace subscription
//!   cannot be dropped, from the first wait on (`events::watch_changes`).
//! - Redis 7.0 (no key event): for overwrites (SET of a string over a waited lock...) a poll
//!   that looks at most at `POLL_BATCH` waited keys' types every `POLL_MS`, in turn.

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use crate::ffi::events::{self, Classes, KeyUnlinkHandler, KeyspaceHandler};
use crate::ffi::{cluster, timer, Ctx};

use super::job::{Job, Timer};

/// Redis 7.0: how often the poll looks for overwritten waited keys. An overwrite of one of
/// `n` waited keys is seen within `POLL_MS * ceil(n / POLL_BATCH)`. Waking the server is
/// most of a tick's cost: ~90 µs of CPU per wake-up on the project's VM against ~11k
/// instructions of work (callgrind). Measured idle with waiters on 1 / 1,000 keys: 20 ms
/// ticks 0.61% / 1.38% of a core, 40 ms ticks under the 1% bound (docs/BENCHMARKS.md, Scale).
const POLL_MS: i64 = 40;

/// Cluster mode: how often the poll asks where a waited key is routed (a key or slot leaving
/// this node, the cluster going down, is seen within this: the promise is 10 ms).
const CLUSTER_POLL_MS: i64 = 5;

/// Redis 7.0: waited keys whose type one poll tick looks at (an open and a type check each,
/// ~0.5k instructions): a tick's cost is bounded whatever the number of waited keys.
const POLL_BATCH: usize = 128;

/// How soon a key whose serving a client pause put off is tried again.
const PAUSE_RETRY_MS: i64 = 1;

/// The server reports keys leaving the keyspace (`RedisModuleEvent_Key`), checked at load.
static KEY_UNLINKS: AtomicBool = AtomicBool::new(false);

/// Subscribed to `RedisModuleEvent_Key` (while some key has a queue).
static LISTENING: AtomicBool = AtomicBool::new(false);

/// Subscribed to generic keyspace events by `start_listening` (8.2+, while some key has a
/// queue).
static GENERIC: AtomicBool = AtomicBool::new(false);

/// At load: whether key events can replace the poll on this server.
pub fn init(key_unlinks: bool) {
    KEY_UNLINKS.store(key_unlinks, Ordering::Relaxed);
}

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
    /// The poll timer (Redis 7.0, and cluster mode), while some key has a queue.
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

/// Arms the poll timer if some key has a queue and key events do not report overwrites, or,
/// in cluster mode, to notice the cluster going down.
fn arm_poll(ctx: Ctx, d: &mut Watched) {
    let clustered = cluster::enabled(ctx);
    let needed = !LISTENING.load(Ordering::Relaxed) || clustered;
    if d.poll.is_none() && !d.watched.is_empty() && needed {
        let ms = if clustered { CLUSTER_POLL_MS } else { POLL_MS };
        d.poll = Some(timer::start(ctx, ms, Job::Poll));
    }
}

/// What tells the engine that a waited key changed behind its back: key events (7.2+: a key
/// deleted, moved away or overwritten) and generic keyspace events (del, rename, move,
/// expire...: on 7.0 from the first wait on, on 8.2+ while some key has a queue).
pub struct Unlinks;

impl KeyUnlinkHandler for Unlinks {
    fn on_key_unlinked(ctx: Ctx, db: i32, key: &[u8]) {
        // Any key of the server deleted or overwritten: the filter drops nearly all.
        if may_be_watched(key) {
            mark_dirty(ctx, db, Some(key));
        }
    }
}

impl KeyspaceHandler for Unlinks {
    /// Nobody waits: the event is dropped before anything is read.
    fn interested() -> bool {
        super::registry::waiting() > 0
    }

    fn on_key_event(ctx: Ctx, event: &[u8], key: &[u8]) {
        if !may_be_watched(key) || event == b"expired" || event == b"evicted" {
            return; // nobody waits on this key, or `events::Gone` has it
        }
        mark_dirty(ctx, ctx.selected_db(), Some(key));
    }
}

/// The first key with a queue: listen to key events where the server has them, and to
/// generic keyspace events where they can be dropped again (8.2+: a user's EXPIRE of a
/// waited key).
fn start_listening(ctx: Ctx) {
    if !KEY_UNLINKS.load(Ordering::Relaxed) || LISTENING.load(Ordering::Relaxed) {
        return;
    }
    match events::listen_key_unlinks::<Unlinks>(ctx, true) {
        Ok(()) => LISTENING.store(true, Ordering::Relaxed),
        Err(line) => return ctx.log_warning(&line), // the poll serves instead
    }
    if events::keyspace_unsubscribe_supported() {
        match events::subscribe_keyspace::<Unlinks>(ctx, Classes::Generic) {
            Ok(()) => GENERIC.store(true, Ordering::Relaxed),
            Err(line) => ctx.log_warning(&line),
        }
    }
}

/// The last queue is gone: nothing stays subscribed.
fn stop_listening(ctx: Ctx) {
    if LISTENING.swap(false, Ordering::Relaxed) {
        if let Err(line) = events::listen_key_unlinks::<Unlinks>(ctx, false) {
            ctx.log_warning(&line);
        }
    }
    if GENERIC.swap(false, Ordering::Relaxed) {
        if let Err(line) = events::unsubscribe_keyspace::<Unlinks>(ctx, Classes::Generic) {
            ctx.log_warning(&line);
        }
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
    /// Redis 7.0 (no key events): the next `POLL_BATCH` waited keys, to look at their type.
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
    let batch = if LISTENING.load(Ordering::Relaxed) {
        vec![]
    } else {
        d.next_batch()
    };
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

/// `key` has a queue now (events and, on 7.0, the poll timer wake it).
pub(super) fn watch(ctx: Ctx, db: i32, key: &[u8]) {
    let mut d = state();
    let d = d.get_or_insert_with(Watched::default);
    if d.watched.is_empty() {
        start_listening(ctx);
    }
    d.watched.entry(db).or_default().insert(key.to_vec());
    let (word, bit) = filter_bit(key);
    FILTER[word].fetch_or(bit, Ordering::Relaxed);
    arm_poll(ctx, d);
}

/// `key`'s queue is gone. The last one stops the poll timer (MODULE UNLOAD is refused while
/// a timer is armed) and the key events.
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
        stop_listening(ctx);
    }
}

/// MODULE UNLOAD: frees the watched set (no timer is armed by then: no queue is left).
pub(super) fn free_all() {
    rebuild_filter(&FxHashMap::default());
    LISTENING.store(false, Ordering::Relaxed);
    GENERIC.store(false, Ordering::Relaxed);
    *state() = None;
}
