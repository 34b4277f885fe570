//! The lock keys this server granted and that still exist, so that an `expired` keyspace event
//! (which Redis raises after the value is gone) can be told apart from any other key's: a held
//! lock's lease running out counts in `leases_expired`.

use std::hash::Hasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rustc_hash::{FxHashSet, FxHasher};

use crate::stats::{Stats, STATS};

/// The set of held lock keys. Bounded by the number of held locks; never locked while calling
/// Redis.
///
/// Keys are kept as 64-bit fingerprints (db, FxHash of the name): no copy of the name, no
/// allocation per grant, a fast hash. Two held keys sharing a fingerprint (odds about n²/2⁶⁴)
/// would only blur the `leases_expired` counter.
#[derive(Default)]
struct Held {
    keys: FxHashSet<(i32, u64)>,
    count: usize,
}

fn fingerprint(key: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(key);
    h.finish()
}

impl Held {
    fn remove(&mut self, db: i32, key: &[u8]) -> bool {
        let removed = self.keys.remove(&(db, fingerprint(key)));
        self.count -= removed as usize;
        removed
    }
}

/// `None` until the first grant and after MODULE UNLOAD.
static HELD: Mutex<Option<Held>> = Mutex::new(None);
static HELD_COUNT: AtomicUsize = AtomicUsize::new(0);

fn with_held<R>(f: impl FnOnce(&mut Held) -> R) -> R {
    let mut h = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let h = h.get_or_insert_with(Held::default);
    let r = f(h);
    HELD_COUNT.store(h.count, Ordering::Relaxed);
    r
}

/// A lock key went from free to held (`true`) or back (`false`) through dlock.
pub fn track(db: i32, key: &[u8], is_held: bool) {
    with_held(|h| {
        if is_held {
            let added = h.keys.insert((db, fingerprint(key)));
            h.count += added as usize;
        } else {
            h.remove(db, key);
        }
    });
}

/// `key` expired (`expired`) or was evicted: an expiry of a held lock counts. (A held lock
/// deleted or overwritten behind the module's back stays in the set until its name is
/// granted and freed again, or expires: the module does not hear writes before a client
/// waits, see `crate::events`.)
pub fn gone(db: i32, key: &[u8], expired: bool) {
    if HELD_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    if with_held(|h| h.remove(db, key)) && expired {
        Stats::add(&STATS.leases_expired, 1);
    }
}

/// FLUSHDB/FLUSHALL/SWAPDB: forget what was held.
pub fn forget_all() {
    with_held(|h| *h = Held::default());
}

/// MODULE UNLOAD: frees the held set.
pub(super) fn free() {
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = None;
    HELD_COUNT.store(0, Ordering::Relaxed);
}
