//! What the client knows about the locks it holds: one [`Entry`] per held (key, owner, kind),
//! kept in the client's [`Registry`] while held, renewed by the watchdog, and watched
//! through a [`LostSignal`].

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::LockKind;

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
    /// No successful renewal reached the server before the lease deadline (measured from
    /// the last successful renewal's send time): the server was unreachable or slow.
    LeaseExpired,
    /// This client released it (the last hold).
    Released,
    /// A renewal reached fewer replicas than
    /// [`ClientBuilder::min_replicas`](crate::ClientBuilder::min_replicas) asks for: a
    /// failover now could lose the lock.
    NotReplicated,
}

/// Every lock this client holds: by key, then one entry per (owner, kind). Looked up with
/// borrowed strings, so the acquire/release path allocates no keys.
pub(crate) type Held = HashMap<Arc<str>, Vec<Arc<Entry>>>;

/// The client's [`Held`] map behind its lock.
#[derive(Default)]
pub(crate) struct Registry {
    map: Mutex<Held>,
}

impl Registry {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Held> {
        self.map.lock().unwrap()
    }
}

/// The entry of (key, owner, kind), if held.
pub(crate) fn find(map: &Held, key: &str, owner: &str, kind: LockKind) -> Option<Arc<Entry>> {
    map.get(key)?
        .iter()
        .find(|e| e.kind == kind && &*e.owner == owner)
        .cloned()
}

/// Store `e`, replacing the entry of the same (key, owner, kind).
pub(crate) fn insert(map: &mut Held, e: Arc<Entry>) {
    match map.get_mut(&*e.key) {
        Some(v) => {
            v.retain(|x| !(x.kind == e.kind && x.owner == e.owner));
            v.push(e);
        }
        None => {
            map.insert(e.key.clone(), vec![e]);
        }
    }
}

/// Every entry.
pub(crate) fn entries(map: &Held) -> impl Iterator<Item = &Arc<Entry>> {
    map.values().flatten()
}

#[derive(Clone, Debug)]
pub(crate) struct Status {
    pub(crate) deadline: Instant,
    pub(crate) lost: Option<LostReason>,
}

/// One held (lock, owner) pair: the watchdog's unit of work.
pub(crate) struct Entry {
    pub(crate) key: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) kind: LockKind,
    /// The lease a renewal sets (the client's lease for watched locks).
    pub(crate) lease: Duration,
    pub(crate) state: Mutex<EntryState>,
    active: AtomicBool,
    status: Mutex<Status>,
    /// Woken when the entry is marked lost. A renewal does not wake anyone: a waiter
    /// sleeping until the old deadline finds the new one when it wakes, and sleeps on. (A
    /// plain `Notify` next to a mutex, not a `watch` channel: an acquire+release makes
    /// one entry, and a watch channel's allocation and eight-way notify were a tenth of
    /// the client's CPU per cycle.)
    changed: Notify,
}

pub(crate) struct EntryState {
    pub(crate) holds: u64,
    pub(crate) watched: bool,
}

impl Entry {
    pub(crate) fn new(
        key: Arc<str>,
        owner: Arc<str>,
        kind: LockKind,
        lease: Duration,
        watched: bool,
        deadline: Instant,
    ) -> Entry {
        Entry {
            key,
            owner,
            kind,
            lease,
            state: Mutex::new(EntryState { holds: 0, watched }),
            active: AtomicBool::new(true),
            status: Mutex::new(Status {
                deadline,
                lost: None,
            }),
            changed: Notify::new(),
        }
    }
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }
    /// Stop renewing (the last hold is being released).
    pub(crate) fn deactivate(&self) {
        self.active.store(false, Ordering::Release);
    }
    pub(crate) fn is_watched(&self) -> bool {
        self.is_active() && self.state.lock().unwrap().watched
    }
    pub(crate) fn deadline(&self) -> Instant {
        self.status.lock().unwrap().deadline
    }
    /// A reentrant grant reset the lease on the server: its deadline is `deadline`.
    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.status.lock().unwrap().deadline = deadline;
    }
    /// A renewal sent at `sent` succeeded.
    pub(crate) fn renewed(&self, sent: Instant) {
        if !self.is_active() {
            return;
        }
        let mut s = self.status.lock().unwrap();
        let d = sent + self.lease;
        if s.lost.is_none() && d > s.deadline {
            s.deadline = d;
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
    pub(crate) fn lost_now(&self) -> Option<LostReason> {
        let s = self.status.lock().unwrap();
        if let Some(r) = s.lost {
            return Some(r);
        }
        if Instant::now() >= s.deadline {
            return Some(LostReason::LeaseExpired);
        }
        None
    }
}

/// Drop `e` from the registry (if it is still the entry stored for its key). The key's
/// (now maybe empty) list stays for the next acquire of that key to reuse; the watchdog
/// sweeps empty lists each round.
pub(crate) fn remove_entry(reg: &Registry, e: &Arc<Entry>) {
    let mut map = reg.lock();
    if let Some(v) = map.get_mut(&*e.key) {
        v.retain(|x| !Arc::ptr_eq(x, e));
    }
}

/// How many holds this client believes `owner` has on (key, kind): what a cancelled
/// acquire's clean-up compares with the server's count.
pub(crate) fn local_holds(reg: &Registry, key: &str, owner: &str, kind: LockKind) -> u64 {
    match find(&reg.lock(), key, owner, kind) {
        Some(e) if e.is_active() => e.state.lock().unwrap().holds,
        _ => 0,
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
            let s = entry.status.lock().unwrap().clone();
            if let Some(r) = s.lost {
                return r;
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(s.deadline) => {
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
