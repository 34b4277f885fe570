//! What wakes a queue besides a command on its key: module timers (a WAIT time-out, a lease
//! deadline, the keys marked by events) and blocked clients leaving on their own.
//!
//! Whenever a lock may have become free — a lease running out, expiry/eviction (keyspace
//! events), FLUSHDB/FLUSHALL/SWAPDB (server events), a waiter leaving from the head,
//! DEL/UNLINK/RENAME/MOVE/overwrite by a user's command — the key's queue is served by the
//! unit of work (`work::with_lock`), which writes the grant like a command would (replicated)
//! and answers the waiter. Events only mark keys dirty and arm a 0 ms timer: writing from
//! inside a keyspace notification breaks replication order on Redis 7.0 (the write is
//! propagated before the DEL that caused it).
//!
//! Cluster mode: a key may leave the node under its queue (MIGRATE, its slot given away, the
//! cluster down). Before a wake-up serves a queue it asks where the server routes the key
//! (`ffi::cluster::route`); a key served elsewhere gets its waiters answered with the redirect
//! a fresh request would get, and nothing is granted or created here. The cluster going down
//! sends no event: in cluster mode the poll also asks, every `CLUSTER_POLL_MS`, where one
//! waited key is routed.
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

use crate::ffi::blocked::{BlockHandler, BlockedClient, ClientId};
use crate::ffi::cluster::{self, Route};
use crate::ffi::events::{self, Classes, KeyUnlinkHandler, KeyspaceHandler};
use crate::ffi::timer::{self, TimerId, TimerJob};
use crate::ffi::key::{Key, KeyKind};
use crate::ffi::{Ctx, RStr, Reply};
use crate::stats::{Stats, STATS};

use super::{registry, work};

/// Redis 7.0: how often the poll looks for overwritten waited keys. An overwrite of one of
/// `n` waited keys is seen within `POLL_MS * ceil(n / POLL_BATCH)`. The wake-up itself is
/// most of a tick's cost (measured: a 5 ms tick kept ~1.8% of a core busy with one waited key,
/// ~2.4% with 1,000): 20 ms keeps an idle server under 1%.
const POLL_MS: i64 = 20;

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
    /// Redis 7.0, every `POLL_MS` while some key has a queue: the next `POLL_BATCH` waited
    /// keys whose value is no longer a hash (overwritten, or gone) are served; in cluster
    /// mode, where one waited key is routed.
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
                let (keys, sample) = {
                    let mut d = dirty();
                    let Some(d) = d.as_mut() else { return };
                    d.poll = None; // fired: must not be stopped
                    if ctx.writes_paused() {
                        // Nobody can write during a pause; the next tick looks again.
                        arm_poll(ctx, d);
                        return;
                    }
                    let sample = d
                        .watched
                        .iter()
                        .find_map(|(db, keys)| Some((*db, keys.iter().next()?.clone())));
                    let keys = if LISTENING.load(Ordering::Relaxed) {
                        vec![]
                    } else {
                        d.next_batch()
                    };
                    (keys, sample)
                };
                // Events report every change of a key, but not the cluster going down: one
                // waited key stands for the cluster's state.
                if let Some((db, key)) = sample.filter(|_| cluster::enabled(ctx) && ctx.may_write()) {
                    ctx.select_db(db);
                    if cluster::route(ctx, &key) != Route::Here {
                        mark_dirty(ctx, db, None);
                    }
                }
                for (db, key) in keys {
                    ctx.select_db(db);
                    // Still a hash: not overwritten (a lock's own changes come with commands).
                    let name = RStr::new(ctx, &key);
                    if Key::open(ctx, &name, false).kind() != KeyKind::Hash {
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
    /// The poll timer (Redis 7.0), while some key has a queue.
    poll: Option<TimerId<Job>>,
    /// Where the next poll batch starts among the waited keys.
    cursor: usize,
}

impl Dirty {
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
fn arm_poll(ctx: Ctx, d: &mut Dirty) {
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
        super::waiting() > 0
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

/// `key` has a queue now (events and, on 7.0, the poll timer wake it).
pub(super) fn watch(ctx: Ctx, db: i32, key: &[u8]) {
    let mut d = dirty();
    let d = d.get_or_insert_with(Dirty::default);
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
        stop_listening(ctx);
    }
}

/// MODULE UNLOAD: frees the dirty set (no timer is armed by then: no queue is left).
pub(super) fn free_all() {
    rebuild_filter(&FxHashMap::default());
    LISTENING.store(false, Ordering::Relaxed);
    GENERIC.store(false, Ordering::Relaxed);
    *dirty() = None;
}
