//! The holds: what the client knows about the locks it holds, one [`Entry`] per held (key,
//! owner, kind), kept in the client's [`Registry`] while held (its map private behind
//! methods that keep its lock order), renewed by the watchdog, and watched through a
//! [`LostSignal`] (the lost signal, with its [`LostReason`]).

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::kind::LockKind;
use crate::rebind::Bound;
use crate::topology::Stamp;

/// Why a held lock is no longer held (the output of [`LostSignal`]).
///
/// ```
/// use dlock_client::LostReason;
/// assert_ne!(LostReason::NotHeld, LostReason::LeaseExpired);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The server says this owner does not hold the lock (a renewal or release answered
    /// 0/null: deleted, expired, or taken by someone else).
    NotHeld,
    /// The client's deadline passed: no successful renewal reached the server before the
    /// lease's end (measured from the last successful renewal's send time), or, for a hold
    /// bound to its connection, the bind grace passed since the last moment that connection
    /// was known open (the server was unreachable or slow, or the process was paused).
    LeaseExpired,
    /// This client released it (the last hold).
    Released,
    /// A renewal reached fewer replicas than
    /// [`ClientBuilder::min_replicas`](crate::ClientBuilder::min_replicas) asks for: a
    /// failover now could lose the lock.
    NotReplicated,
    /// The client was closed while this was held: nothing renews it any more (close
    /// releases nothing; the server lets the lease or the bind grace run out).
    Closed,
}

/// Every lock this client holds, by key, then one entry per (owner, kind): what the
/// watchdog renews and what a cancelled acquire's clean-up compares with the server.
/// Looked up with borrowed strings, so the acquire/release path allocates no keys.
///
/// **Lock order.** The registry's map, then an entry's `state`, then its `status`; never
/// the other way round. Holding the map while a hold count changes is what makes "find or
/// replace the entry, then count the hold" one step against a concurrent release or sweep.
#[derive(Default)]
pub(crate) struct Registry {
    map: Mutex<HashMap<Arc<str>, Vec<Arc<Entry>>>>,
}

/// What [`Registry::hold`] records: which lock, for whom, and how.
pub(crate) struct NewHold<'a> {
    pub(crate) key: &'a Arc<str>,
    pub(crate) owner: &'a Arc<str>,
    pub(crate) kind: LockKind,
    /// The lease a renewal sets.
    pub(crate) lease: Duration,
    pub(crate) watched: bool,
    /// The lease deadline the grant set on the server (counted from the send time of the
    /// command that set it).
    pub(crate) deadline: Instant,
    /// Holds (1, or a semaphore's permits) the grant stands for.
    pub(crate) count: u64,
    /// The binding, for a bound hold, and the command that bound it.
    pub(crate) bound: Option<(Bound, Stamp)>,
}

impl Registry {
    fn map(&self) -> MutexGuard<'_, HashMap<Arc<str>, Vec<Arc<Entry>>>> {
        self.map.lock().unwrap()
    }

    /// Count a grant: the live entry of (key, owner, kind) gets `count` more holds, or (none,
    /// or one whose lease ran out) a new entry is stored. Answers the entry and the owner's
    /// holds after it.
    pub(crate) fn hold(&self, h: NewHold<'_>) -> (Arc<Entry>, u64) {
        let now = Instant::now();
        let mut map = self.map();
        let bound_at = h.bound.as_ref().map(|b| b.1);
        let found = map.get(&**h.key).and_then(|v| {
            v.iter()
                .find(|e| e.kind == h.kind && e.owner == *h.owner)
                .cloned()
        });
        let entry = match found {
            Some(e) if e.is_active() && e.deadline() > now => e,
            old => {
                if let Some(o) = old {
                    o.mark(LostReason::LeaseExpired);
                }
                let e = Arc::new(Entry::new(
                    h.key.clone(),
                    h.owner.clone(),
                    h.kind,
                    h.lease,
                    h.watched,
                    h.deadline,
                    h.bound,
                ));
                let v = map.entry(h.key.clone()).or_default();
                v.retain(|x| !(x.kind == e.kind && x.owner == e.owner));
                v.push(e.clone());
                e
            }
        };
        let holds = {
            let mut st = entry.state.lock().unwrap();
            st.holds += h.count;
            st.watched |= h.watched;
            st.holds
        };
        drop(map);
        if holds > h.count {
            // A reentrant acquire reset the lease on the server (and rebound the hold).
            entry.set_deadline(h.deadline, bound_at);
        }
        (entry, holds)
    }

    /// Take `count` holds off `entry` before its release is sent; true when it was the last
    /// (then the entry stops being renewed and leaves the registry, so a renewal racing
    /// with the release cannot be mistaken for a loss).
    pub(crate) fn give_back(&self, entry: &Arc<Entry>, count: u64) -> bool {
        let mut map = self.map();
        let last = {
            let mut st = entry.state.lock().unwrap();
            st.holds = st.holds.saturating_sub(count);
            st.holds == 0
        };
        if last {
            entry.deactivate();
            Self::remove(&mut map, entry);
        }
        last
    }

    /// Drop `e` (if it is still the entry stored for its key). The key's (maybe now empty)
    /// list stays for the next acquire of that key to reuse; [`watched`](Self::watched)
    /// sweeps empty lists.
    pub(crate) fn forget(&self, e: &Arc<Entry>) {
        Self::remove(&mut self.map(), e);
    }

    fn remove(map: &mut HashMap<Arc<str>, Vec<Arc<Entry>>>, e: &Arc<Entry>) {
        if let Some(v) = map.get_mut(&*e.key) {
            v.retain(|x| !Arc::ptr_eq(x, e));
        }
    }

    /// The client was closed: every entry is lost ([`LostReason::Closed`]) and forgotten.
    pub(crate) fn close_all(&self) {
        let all: Vec<Arc<Entry>> = self.map().drain().flat_map(|(_, v)| v).collect();
        for e in all {
            e.mark(LostReason::Closed);
        }
    }

    /// The watchdog's round: sweep entries no longer active (and keys left with none), and
    /// answer the ones to renew.
    pub(crate) fn watched(&self) -> Vec<Arc<Entry>> {
        let mut map = self.map();
        for v in map.values_mut() {
            v.retain(|e| e.is_active());
        }
        map.retain(|_, v| !v.is_empty());
        map.values()
            .flatten()
            .filter(|e| e.is_watched())
            .cloned()
            .collect()
    }

    /// How many locks the watchdog renews.
    pub(crate) fn watched_count(&self) -> usize {
        self.map()
            .values()
            .flatten()
            .filter(|e| e.is_watched())
            .count()
    }

    /// How many holds (permits) this client believes `owner` has on (key, kind).
    pub(crate) fn holds_of(&self, key: &str, owner: &str, kind: LockKind) -> u64 {
        let map = self.map();
        let found = map
            .get(key)
            .and_then(|v| v.iter().find(|e| e.kind == kind && &*e.owner == owner));
        match found {
            Some(e) if e.is_active() => e.state.lock().unwrap().holds,
            _ => 0,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Status {
    /// The lease's end: the send time of the last command that set it, plus the lease.
    pub(crate) deadline: Instant,
    /// For a bound hold: the last command that bound it (answered).
    pub(crate) bound_at: Option<Stamp>,
    pub(crate) lost: Option<LostReason>,
}

/// One held (lock, owner) pair: the watchdog's unit of work.
pub(crate) struct Entry {
    pub(crate) key: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) kind: LockKind,
    /// The lease a renewal sets (the client's lease for watched locks).
    pub(crate) lease: Duration,
    /// Set for a hold bound to the shared connection (native backend, watched).
    pub(crate) bound: Option<Bound>,
    state: Mutex<EntryState>,
    active: AtomicBool,
    status: Mutex<Status>,
    /// Woken when the entry is marked lost. A renewal does not wake anyone: a waiter
    /// sleeping until the old deadline finds the new one when it wakes, and sleeps on. (A
    /// plain `Notify` next to a mutex, not a `watch` channel: an acquire+release makes
    /// one entry, and a watch channel's allocation and eight-way notify were a tenth of
    /// the client's CPU per cycle.)
    changed: Notify,
}

struct EntryState {
    holds: u64,
    watched: bool,
}

impl Entry {
    pub(crate) fn new(
        key: Arc<str>,
        owner: Arc<str>,
        kind: LockKind,
        lease: Duration,
        watched: bool,
        deadline: Instant,
        bound: Option<(Bound, Stamp)>,
    ) -> Entry {
        let (bound, bound_at) = match bound {
            Some((b, at)) => (Some(b), Some(at)),
            None => (None, None),
        };
        Entry {
            key,
            owner,
            kind,
            lease,
            bound,
            state: Mutex::new(EntryState { holds: 0, watched }),
            active: AtomicBool::new(true),
            status: Mutex::new(Status {
                deadline,
                bound_at,
                lost: None,
            }),
            changed: Notify::new(),
        }
    }
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }
    /// Stop renewing (the last hold is being released).
    fn deactivate(&self) {
        self.active.store(false, Ordering::Release);
    }
    pub(crate) fn is_watched(&self) -> bool {
        self.is_active() && self.state.lock().unwrap().watched
    }
    /// The client's deadline for the hold, as the contract counts it: the lease's end, or
    /// for a bound hold the bind grace after the last moment its connection is known open,
    /// whichever comes first. Computed when asked, so it never waits for a task to run.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline_of(&self.status.lock().unwrap())
    }
    fn deadline_of(&self, s: &Status) -> Instant {
        match (&self.bound, s.bound_at) {
            (Some(b), Some(at)) => s.deadline.min(b.deadline(at)),
            _ => s.deadline,
        }
    }
    /// A reentrant grant reset the lease on the server (and bound the hold again).
    fn set_deadline(&self, deadline: Instant, bound_at: Option<Stamp>) {
        let mut s = self.status.lock().unwrap();
        s.deadline = deadline;
        if let Some(b) = bound_at {
            if s.bound_at.is_some_and(|old| old.sent < b.sent) {
                s.bound_at = Some(b);
            }
        }
    }
    /// A renewal sent at `sent` succeeded (and, for a bound hold, rebound it to the
    /// connection that carried it, as `stamp` says).
    pub(crate) fn renewed(&self, sent: Instant, stamp: Stamp) {
        if !self.is_active() {
            return;
        }
        let mut s = self.status.lock().unwrap();
        let d = sent + self.lease;
        if s.lost.is_none() && d > s.deadline {
            s.deadline = d;
        }
        if s.lost.is_none() && s.bound_at.is_some_and(|b| b.sent < stamp.sent) {
            s.bound_at = Some(stamp);
        }
    }
    /// Mark lost (first reason wins) and stop renewing.
    pub(crate) fn mark(&self, reason: LostReason) {
        self.deactivate();
        let first = {
            let mut s = self.status.lock().unwrap();
            s.lost.is_none() && {
                s.lost = Some(reason);
                true
            }
        };
        if first {
            self.changed.notify_waiters();
        }
    }
    /// Lost now? A deadline found passed marks the entry lost: once reported lost it stays
    /// lost (a renewal sent before the deadline and answered after it, e.g. by a server that
    /// hung, does not bring it back: the client contract's rule 1).
    pub(crate) fn lost_now(&self) -> Option<LostReason> {
        {
            let s = self.status.lock().unwrap();
            if let Some(r) = s.lost {
                return Some(r);
            }
            if Instant::now() < self.deadline_of(&s) {
                return None;
            }
        }
        self.mark(LostReason::LeaseExpired);
        self.status.lock().unwrap().lost
    }
}

/// Tells when a held lock stops being held. Clone it, move it to another task, `.await` it:
/// it resolves with the [`LostReason`] once the lock is lost (renewal answered 0, the lease
/// ran out without a successful renewal, a release found it gone) or released.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let guard = client.lock("report").acquire().await?;
/// let lost = guard.lost();
/// let watcher = tokio::spawn(async move { lost.await });
/// guard.release().await?;
/// assert_eq!(watcher.await.unwrap(), dlock_client::LostReason::Released);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LostSignal {
    pub(crate) entry: Arc<Entry>,
}

impl LostSignal {
    /// `Some(reason)` if the lock is already lost or released, without waiting.
    ///
    /// The answer compares the client's deadline for the hold with the clock **at the
    /// moment of asking**: the lease's end (the send time of the last command that set
    /// the lease, plus the lease) and, for a hold bound to its connection, the bind grace
    /// after the last moment that connection is known to have been open (the send time of
    /// the last command answered on it). It never depends on the watchdog having run since
    /// the process resumed from a pause, so a process that was stopped while the server
    /// cut its hold answers `Some(LeaseExpired)` at once.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert!(g.lost().check().is_none());
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Option<LostReason> {
        self.entry.lost_now()
    }

    /// Wait until the lock is lost or released.
    ///
    /// Cancel safety: cancel-safe (it only watches; dropping it changes nothing).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// let reason = g.lost().wait().await; // when someone deletes it, the lease runs out, ...
    /// # let _ = reason;
    /// # Ok(()) }
    /// ```
    pub async fn wait(self) -> LostReason {
        let entry = &self.entry;
        loop {
            // Registered before the status is read, so a `mark` in between still wakes it.
            let changed = entry.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (lost, deadline) = {
                let s = entry.status.lock().unwrap();
                (s.lost, entry.deadline_of(&s))
            };
            if let Some(r) = lost {
                return r;
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {
                    // Deadline passed with no renewal in between: lost.
                    if self.entry.deadline() <= Instant::now() {
                        self.entry.mark(LostReason::LeaseExpired);
                    }
                }
            }
        }
    }
}

impl IntoFuture for LostSignal {
    type Output = LostReason;
    type IntoFuture = Pin<Box<dyn Future<Output = LostReason> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.wait())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(r: &Registry, key: &Arc<str>, owner: &Arc<str>, watched: bool) -> (Arc<Entry>, u64) {
        r.hold(NewHold {
            key,
            owner,
            kind: LockKind::Exclusive,
            lease: Duration::from_secs(30),
            watched,
            deadline: Instant::now() + Duration::from_secs(30),
            count: 1,
            bound: None,
        })
    }

    #[test]
    fn registry_counts_reentrant_holds_and_forgets_the_last() {
        let r = Registry::default();
        let (k, o) = (Arc::from("k"), Arc::from("o"));
        let (e1, n1) = hold(&r, &k, &o, false);
        let (e2, n2) = hold(&r, &k, &o, true);
        assert!(Arc::ptr_eq(&e1, &e2));
        assert_eq!((n1, n2), (1, 2));
        assert_eq!(r.holds_of("k", "o", LockKind::Exclusive), 2);
        assert_eq!(r.holds_of("k", "o", LockKind::Read), 0);
        // One watched hold makes the entry watched.
        assert_eq!(r.watched_count(), 1);
        assert!(!r.give_back(&e1, 1));
        assert!(r.give_back(&e1, 1));
        assert!(!e1.is_active());
        assert_eq!(r.holds_of("k", "o", LockKind::Exclusive), 0);
        assert!(r.watched().is_empty());
    }

    #[test]
    fn a_lapsed_entry_is_replaced_and_marked_lost() {
        let r = Registry::default();
        let (k, o) = (Arc::from("k"), Arc::from("o"));
        let (old, _) = r.hold(NewHold {
            key: &k,
            owner: &o,
            kind: LockKind::Exclusive,
            lease: Duration::from_millis(1),
            watched: false,
            deadline: Instant::now(),
            count: 1,
            bound: None,
        });
        let (new, n) = hold(&r, &k, &o, false);
        assert!(!Arc::ptr_eq(&old, &new));
        assert_eq!(n, 1);
        assert_eq!(old.lost_now(), Some(LostReason::LeaseExpired));
    }
}
