//! What wakes a queue besides a command on its key: module timers (a WAIT time-out, a lease
//! deadline, the keys marked by events) and blocked clients leaving on their own.
//!
//! Whenever a lock may have become free — a lease running out, DEL/UNLINK/RENAME/eviction/
//! overwrite (keyspace events), FLUSHDB/FLUSHALL/SWAPDB (server events), a waiter leaving from
//! the head — the key's queue is served by the unit of work (`work::with_lock`), which writes
//! the grant like a command would (replicated) and answers the waiter. Events only mark keys
//! dirty and arm a 0 ms timer: writing from inside a keyspace notification breaks replication
//! order on Redis 7.0 (PLATFORM-NOTES).

use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use crate::ffi::blocked::{BlockHandler, BlockedClient, ClientId};
use crate::ffi::timer::{self, TimerJob};
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

use super::{registry, work};

/// Why a timer was armed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Job {
    /// The WAIT time-out of waiter `seq` on `key`.
    WaitTimeout { db: i32, key: Vec<u8>, seq: u64 },
    /// A lease on `key` may have run out: serve its queue.
    LeaseCheck { db: i32, key: Vec<u8> },
    /// Keys touched by keyspace/server events: serve their queues.
    Recheck,
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
    ctx.select_db(db);
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
    if !d.armed {
        d.armed = true;
        timer::start(ctx, 0, Job::Recheck);
    }
}

/// `key` has a queue now (events on it wake it).
pub(super) fn watch(db: i32, key: &[u8]) {
    let mut d = dirty();
    let d = d.get_or_insert_with(Dirty::default);
    d.watched.entry(db).or_default().insert(key.to_vec());
    let (word, bit) = filter_bit(key);
    FILTER[word].fetch_or(bit, Ordering::Relaxed);
}

/// `key`'s queue is gone.
pub(super) fn unwatch(db: i32, key: &[u8]) {
    let mut d = dirty();
    if let Some(keys) = d.as_mut().and_then(|d| d.watched.get_mut(&db)) {
        keys.remove(key);
        if keys.is_empty() {
            d.as_mut().unwrap().watched.remove(&db);
        }
        rebuild_filter(&d.as_ref().unwrap().watched);
    }
}

/// MODULE UNLOAD: frees the dirty set.
pub(super) fn free_all() {
    rebuild_filter(&FxHashMap::default());
    *dirty() = None;
}
