//! The module's one waiter registry: every key's queue, and indexes from each blocked client
//! and each waiting owner to its place. The data (`Registry`) is plain, unit-tested without a
//! server; the module's instance lives behind a lock (`registry()`), and the number of queued
//! clients is readable without it (`waiting()`).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use super::job::Timer;
use super::queue::{Queue, Waiter};
use crate::ffi::blocked::ClientId;
use crate::stats::{Stats, STATS};

/// One row of DLOCK.WAITERS: owner, request, waited ms, time-out left in ms (-1: none).
#[derive(Debug, PartialEq, Eq)]
pub struct WaiterView {
    pub owner: Vec<u8>,
    pub request: String,
    pub waited_ms: i64,
    pub timeout_left_ms: i64,
}

/// What leaving the queue hands back: the waiter, and the key's lease timer when its queue
/// is gone. The caller stops the timers and answers the client.
pub struct Removed {
    pub waiter: Waiter,
    pub lease_timer: Option<Timer>,
}

/// Where a blocked client waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub db: i32,
    pub key: Vec<u8>,
    pub seq: u64,
}

#[derive(Default)]
pub struct Registry {
    queues: HashMap<i32, HashMap<Vec<u8>, Queue>>,
    /// Where each blocked client waits, for disconnects and CLIENT UNBLOCK.
    clients: HashMap<ClientId, Place>,
    /// Where each waiting owner waits (deadlock detection follows owners, not clients).
    by_owner: HashMap<Vec<u8>, Vec<Place>>,
    next_seq: u64,
}

impl Registry {
    // The `queues.is_empty()` checks keep the common no-waiter case free of key hashing;
    // inlined, with the look-up out of line, they cost a few instructions per command.
    #[inline]
    fn queue(&self, db: i32, key: &[u8]) -> Option<&Queue> {
        if self.queues.is_empty() {
            return None;
        }
        self.find(db, key)
    }

    #[inline(never)]
    fn find(&self, db: i32, key: &[u8]) -> Option<&Queue> {
        self.queues.get(&db)?.get(key)
    }

    #[inline]
    fn queue_mut(&mut self, db: i32, key: &[u8]) -> Option<&mut Queue> {
        if self.queues.is_empty() {
            return None;
        }
        self.find_mut(db, key)
    }

    #[inline(never)]
    fn find_mut(&mut self, db: i32, key: &[u8]) -> Option<&mut Queue> {
        self.queues.get_mut(&db)?.get_mut(key)
    }

    /// Clients queued in all.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn waiters_on(&self, db: i32, key: &[u8]) -> usize {
        self.queue(db, key).map_or(0, |q| q.waiters.len())
    }

    /// The first `limit` clients waiting on `key`, in FIFO order, as of `now`
    /// (DLOCK.WAITERS).
    pub fn view(&self, db: i32, key: &[u8], limit: usize, now: Instant) -> Vec<WaiterView> {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let Some(q) = self.queue(db, key) else {
            return vec![];
        };
        q.waiters
            .values()
            .take(limit)
            .map(|w| WaiterView {
                owner: w.terms.owner.clone(),
                request: w.terms.want.describe(),
                waited_ms: ms(now.saturating_duration_since(w.since)),
                timeout_left_ms: w
                    .until
                    .map_or(-1, |until| ms(until.saturating_duration_since(now))),
            })
            .collect()
    }

    /// The head of the queue of `key` and its sequence number.
    pub fn head(&self, db: i32, key: &[u8]) -> Option<(u64, &Waiter)> {
        let (seq, w) = self.queue(db, key)?.waiters.first_key_value()?;
        Some((*seq, w))
    }

    /// Puts `waiter` at the tail of the queue of `key`; returns its sequence number.
    pub fn push(&mut self, db: i32, key: &[u8], waiter: Waiter) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let place = Place {
            db,
            key: key.to_vec(),
            seq,
        };
        self.by_owner
            .entry(waiter.terms.owner.clone())
            .or_default()
            .push(place.clone());
        self.clients.insert(waiter.client.id(), place);
        self.queues
            .entry(db)
            .or_default()
            .entry(key.to_vec())
            .or_default()
            .waiters
            .insert(seq, waiter);
        seq
    }

    /// The sequence number the next `push` will give (for the WAIT timer armed before it).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Takes waiter `seq` out of the queue of `key`; drops the queue once empty.
    pub fn remove(&mut self, db: i32, key: &[u8], seq: u64) -> Option<Removed> {
        let dbq = self.queues.get_mut(&db)?;
        let queue = dbq.get_mut(key)?;
        let waiter = queue.waiters.remove(&seq)?;
        let mut lease_timer = None;
        if queue.waiters.is_empty() {
            lease_timer = queue.lease_timer.take().map(|(t, _)| t);
            dbq.remove(key);
            if dbq.is_empty() {
                self.queues.remove(&db);
            }
        }
        self.clients.remove(&waiter.client.id());
        if let Some(places) = self.by_owner.get_mut(&waiter.terms.owner) {
            places.retain(|p| !(p.seq == seq && p.db == db));
            if places.is_empty() {
                self.by_owner.remove(&waiter.terms.owner);
            }
        }
        Some(Removed {
            waiter,
            lease_timer,
        })
    }

    /// Where `owner` waits (any of its clients), oldest first.
    pub fn places_of_owner(&self, owner: &[u8]) -> &[Place] {
        self.by_owner.get(owner).map_or(&[], Vec::as_slice)
    }

    /// The waiter at `place`, and the requests queued ahead of it on its key.
    pub fn waiter_at(
        &self,
        place: &Place,
    ) -> Option<(&Waiter, impl DoubleEndedIterator<Item = &Waiter>)> {
        let q = self.queue(place.db, &place.key)?;
        let w = q.waiters.get(&place.seq)?;
        Some((w, q.waiters.range(..place.seq).map(|(_, w)| w)))
    }

    /// Every request queued on `key`, head first (a new request would join behind them).
    pub fn queued_on(&self, db: i32, key: &[u8]) -> impl DoubleEndedIterator<Item = &Waiter> {
        self.queue(db, key)
            .into_iter()
            .flat_map(|q| q.waiters.values())
    }

    /// Where client `id` waits.
    pub fn place_of(&self, id: ClientId) -> Option<&Place> {
        self.clients.get(&id)
    }

    /// Forgets the WAIT timer of waiter `seq` (it fired: it must not be stopped again).
    pub fn clear_wait_timer(&mut self, db: i32, key: &[u8], seq: u64) {
        if let Some(w) = self
            .queue_mut(db, key)
            .and_then(|q| q.waiters.get_mut(&seq))
        {
            w.timer = None;
        }
    }

    /// The lease timer of the queue of `key` (`None`: no queue).
    pub fn lease_timer(&mut self, db: i32, key: &[u8]) -> Option<&mut Option<(Timer, i64)>> {
        self.queue_mut(db, key).map(|q| &mut q.lease_timer)
    }

    /// Every key that has a queue.
    pub fn all_keys(&self) -> Vec<(i32, Vec<u8>)> {
        self.queues
            .iter()
            .flat_map(|(db, q)| q.keys().map(move |k| (*db, k.clone())))
            .collect()
    }
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// Number of queued clients, readable without the registry lock (event fast path, INFO):
/// the registry keeps it in `STATS.waiters`.
pub fn waiting() -> usize {
    Stats::get(&STATS.waiters) as usize
}

/// The registry, locked. Dereferences to [`Registry`]; stores the waiter count on drop.
pub struct RegistryGuard(MutexGuard<'static, Option<Registry>>);

impl std::ops::Deref for RegistryGuard {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        self.0.as_ref().expect("set in registry()")
    }
}
impl std::ops::DerefMut for RegistryGuard {
    fn deref_mut(&mut self) -> &mut Registry {
        self.0.as_mut().expect("set in registry()")
    }
}
impl Drop for RegistryGuard {
    fn drop(&mut self) {
        let n = self.0.as_ref().map_or(0, Registry::len);
        Stats::set(&STATS.waiters, n as u64);
    }
}

/// The waiter registry (created on first use).
pub fn registry() -> RegistryGuard {
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    guard.get_or_insert_with(Registry::default);
    RegistryGuard(guard)
}

/// MODULE UNLOAD.
pub(super) fn free() {
    *REGISTRY.lock().unwrap_or_else(|e| e.into_inner()) = None;
    Stats::set(&STATS.waiters, 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::blocked::BlockedClient;
    use dlock_core::model::Want;
    use dlock_core::terms::Terms;

    fn waiter(n: usize) -> Waiter {
        Waiter {
            client: BlockedClient::for_test(n),
            terms: Terms::new(format!("o{n}").into_bytes(), Want::Exclusive, 100),
            connection: None,
            timer: None,
            since: Instant::now(),
            until: None,
        }
    }

    #[test]
    fn view_lists_in_order_with_times() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        let mut a = waiter(1);
        a.since = t0;
        let mut b = waiter(2);
        b.since = t0 + std::time::Duration::from_millis(40);
        b.terms.want = Want::Permits {
            capacity: 4,
            count: 3,
        };
        b.until = Some(t0 + std::time::Duration::from_millis(1040));
        r.push(0, b"k", a);
        r.push(0, b"k", b);
        let now = t0 + std::time::Duration::from_millis(100);
        let rows = r.view(0, b"k", usize::MAX, now);
        let got: Vec<(&[u8], &str, i64, i64)> = rows
            .iter()
            .map(|w| {
                (
                    w.owner.as_slice(),
                    w.request.as_str(),
                    w.waited_ms,
                    w.timeout_left_ms,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (&b"o1"[..], "lock", 100, -1),
                (&b"o2"[..], "permits:3", 60, 940)
            ]
        );
        assert_eq!(r.view(0, b"k", 1, now).len(), 1);
        assert!(r.view(0, b"none", 5, now).is_empty());
    }

    #[test]
    fn fifo_per_key() {
        let mut r = Registry::default();
        assert_eq!(r.waiters_on(0, b"k"), 0);
        assert!(r.head(0, b"k").is_none());
        let s1 = r.push(0, b"k", waiter(1));
        let s2 = r.push(0, b"k", waiter(2));
        let s3 = r.push(0, b"other", waiter(3));
        r.push(1, b"k", waiter(4));
        assert!(s1 < s2 && s2 < s3);
        assert_eq!(
            (r.waiters_on(0, b"k"), r.waiters_on(1, b"k"), r.len()),
            (2, 1, 4)
        );
        assert_eq!(r.head(0, b"k").unwrap().1.terms.owner, b"o1");
        let out = r.remove(0, b"k", s1).unwrap();
        assert_eq!(out.waiter.terms.owner, b"o1");
        assert_eq!(r.head(0, b"k").unwrap().0, s2);
        assert!(r.remove(0, b"k", s1).is_none(), "a waiter leaves once");
        let mut keys = r.all_keys();
        keys.sort();
        assert_eq!(
            keys,
            vec![
                (0, b"k".to_vec()),
                (0, b"other".to_vec()),
                (1, b"k".to_vec())
            ]
        );
    }

    #[test]
    fn clients_are_found_and_queues_dropped_when_empty() {
        let mut r = Registry::default();
        let seq = r.push(3, b"k", waiter(7));
        let place = r
            .place_of(BlockedClient::for_test(7).id())
            .cloned()
            .unwrap();
        assert_eq!(
            place,
            Place {
                db: 3,
                key: b"k".to_vec(),
                seq
            }
        );
        assert!(r.lease_timer(3, b"k").is_some());
        r.remove(3, b"k", seq).unwrap();
        assert!(r.place_of(BlockedClient::for_test(7).id()).is_none());
        assert!(r.lease_timer(3, b"k").is_none(), "no queue left");
        assert_eq!(r.len(), 0);
        assert!(r.all_keys().is_empty());
    }

    #[test]
    fn owners_are_indexed_while_they_wait() {
        let mut r = Registry::default();
        let s1 = r.push(0, b"k1", waiter(1));
        let mut other = waiter(2);
        other.terms.owner = b"o1".to_vec(); // the same owner on a second connection
        let s2 = r.push(0, b"k2", other);
        r.push(0, b"k1", waiter(3));
        let places: Vec<&[u8]> = r
            .places_of_owner(b"o1")
            .iter()
            .map(|p| &p.key[..])
            .collect();
        assert_eq!(places, [&b"k1"[..], &b"k2"[..]]);
        let third = r.places_of_owner(b"o3")[0].clone();
        let (w, ahead) = r.waiter_at(&third).unwrap();
        assert_eq!(w.terms.owner, b"o3");
        assert_eq!(
            ahead.map(|w| w.terms.owner.clone()).collect::<Vec<_>>(),
            [b"o1".to_vec()]
        );
        assert_eq!(r.queued_on(0, b"k1").count(), 2);
        r.remove(0, b"k1", s1);
        r.remove(0, b"k2", s2);
        assert!(r.places_of_owner(b"o1").is_empty());
        assert_eq!(r.places_of_owner(b"o3").len(), 1);
    }

    #[test]
    fn next_seq_is_the_pushed_one() {
        let mut r = Registry::default();
        let expected = r.next_seq();
        assert_eq!(r.push(0, b"k", waiter(1)), expected);
    }
}
