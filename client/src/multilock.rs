//! Multi-locks: all-or-nothing over several locks, possibly on different servers.
//!
//! ```no_run
//! # async fn demo(a: dlock_client::Client, b: dlock_client::Client) -> dlock_client::Result<()> {
//! use dlock_client::MultiLock;
//! let m = MultiLock::new([a.lock("account:1"), b.lock("account:2")]);
//! let g = m.acquire().await?;      // both, or wait
//! // ... transfer ...
//! g.release().await?;              // releases both
//! # Ok(()) }
//! ```

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, Lock, LockGuard, LostReason, LostSignal, Result};

/// Several locks taken all-or-nothing (Redisson's `RedissonMultiLock`). The members may come
/// from different [`Client`](crate::Client)s (different servers) and may be exclusive locks
/// or sides of read-write locks.
///
/// - Members are acquired one by one in a **canonical order** (server, then key, then
///   kind), whatever order you give them in, so two multi-locks over overlapping sets
///   cannot deadlock each other.
/// - If a member cannot be had in time (or an error occurs), every member already taken is
///   released before the call returns: nothing is left held.
/// - One [`MultiLockGuard`] releases them all; without an explicit lease each member is
///   renewed by its client's watchdog, and [`MultiLockGuard::lost`] fires when any member
///   is lost.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// use std::time::Duration;
/// let m = dlock_client::MultiLock::new([client.lock("a"), client.lock("b"), client.lock("c")]);
/// match m.try_acquire_for(Duration::from_millis(500), None).await? {
///     Some(g) => { g.release().await?; }
///     None => println!("one of them stayed busy: none is held"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    locks: Vec<Lock>,
}

fn order_key(l: &Lock) -> (String, String, u8) {
    (l.client.server_id(), l.name().to_string(), l.kind().rank())
}

impl MultiLock {
    /// A multi-lock over `locks` (sorted into the canonical order).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let m = dlock_client::MultiLock::new([client.lock("b"), client.lock("a")]);
    /// assert_eq!(m.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> MultiLock {
        let mut locks: Vec<Lock> = locks.into_iter().collect();
        locks.sort_by_key(order_key);
        MultiLock { locks }
    }

    /// Number of members.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(dlock_client::MultiLock::new([client.lock("a")]).len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// True when there are no members.
    /// ```
    /// assert!(dlock_client::MultiLock::new([]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// The members, in acquisition order.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let m = dlock_client::MultiLock::new([client.lock("b"), client.lock("a")]);
    /// assert_eq!(m.locks()[0].name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// Wait as long as it takes for all members; watchdog on.
    ///
    /// Cancel safety: cancel-safe: members already taken are released in the background
    /// when the future is dropped, and each member's acquire is cancel-safe.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]).acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<MultiLockGuard> {
        let mut held = Vec::with_capacity(self.locks.len());
        for l in &self.locks {
            match l.acquire().await {
                Ok(g) => held.push(g),
                Err(e) => {
                    rollback(held).await;
                    return Err(e);
                }
            }
        }
        Ok(MultiLockGuard { guards: held })
    }

    /// One attempt at each member, no waiting; all or none.
    ///
    /// Cancel safety: cancel-safe (as [`acquire`](Self::acquire)).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let m = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]);
    /// if let Some(g) = m.try_acquire().await? { g.release().await?; }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<MultiLockGuard>> {
        self.try_acquire_for(Duration::ZERO, None).await
    }

    /// Wait up to `wait` in total for all members. With `lease`, every member lapses after
    /// it (counted from its own grant; the first member taken lapses first), without it the
    /// watchdogs renew them. `Ok(None)` on time-out, with nothing left held.
    /// [`Duration::MAX`] = no limit.
    ///
    /// Cancel safety: cancel-safe (as [`acquire`](Self::acquire)).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let m = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]);
    /// let g = m.try_acquire_for(Duration::from_secs(1), Some(Duration::from_secs(10))).await?;
    /// # let _ = g; Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        // No deadline: no limit.
        let deadline = Instant::now().checked_add(wait);
        let mut held = Vec::with_capacity(self.locks.len());
        for l in &self.locks {
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            match l.try_acquire_for(left, lease).await {
                Ok(Some(g)) => held.push(g),
                Ok(None) => {
                    rollback(held).await;
                    return Ok(None);
                }
                Err(e) => {
                    rollback(held).await;
                    return Err(e);
                }
            }
        }
        Ok(Some(MultiLockGuard { guards: held }))
    }
}

/// Release every guard (in reverse order), ignoring errors.
pub(crate) async fn rollback(held: Vec<LockGuard>) {
    for g in held.into_iter().rev() {
        let _ = g.release().await;
    }
}

/// All members of a [`MultiLock`], held. [`release`](Self::release) frees them all;
/// dropping it releases them in the background.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let g = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]).acquire().await?;
/// assert_eq!(g.guards().len(), 2);
/// let lost = g.lost(); // fires when any member is lost
/// # let _ = lost;
/// g.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The member guards, in acquisition order.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
    /// assert_eq!(g.guards()[0].name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The members' fencing tokens (for members acquired [`fenced`](Lock::fenced)).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a").fenced()]).acquire().await?;
    /// assert!(g.fencing_tokens()[0].is_some());
    /// # Ok(()) }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.guards.iter().map(|g| g.fencing_token()).collect()
    }

    /// A signal that fires when any member is lost (or released).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]).acquire().await?;
    /// let lost = g.lost();
    /// tokio::spawn(async move { eprintln!("lost: {:?}", lost.await) });
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> GroupLost {
        GroupLost {
            signals: self.guards.iter().map(|g| g.lost()).collect(),
            tolerate: 0,
            deadline: None,
        }
    }

    /// Release every member: `Ok(())` when all were still held, else the first member's
    /// error ([`Error::NotHeld`] for a member that was lost); every member is released
    /// either way.
    ///
    /// Cancel safety: members not yet released when the future is dropped are released in
    /// the background.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        let mut err: Option<Error> = None;
        for g in self.guards.into_iter().rev() {
            if let Err(e) = g.release().await {
                err.get_or_insert(e);
            }
        }
        err.map_or(Ok(()), Err)
    }
}

/// Fires when more than `tolerate` of a group's locks are lost (multi-lock: any one;
/// RedLock: so many that fewer than a quorum remain), or at the group's validity deadline.
/// Clone it, move it, `.await` it.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
/// let lost: dlock_client::multilock::GroupLost = g.lost();
/// assert!(lost.check().is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct GroupLost {
    pub(crate) signals: Vec<LostSignal>,
    pub(crate) tolerate: usize,
    pub(crate) deadline: Option<Instant>,
}

impl GroupLost {
    /// `Some(reason)` if the group already counts as lost (the first member's reason, or
    /// `LeaseExpired` at the validity deadline).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
    /// assert!(g.lost().check().is_none());
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Option<LostReason> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(LostReason::LeaseExpired);
        }
        let lost: Vec<LostReason> = self.signals.iter().filter_map(|s| s.check()).collect();
        (lost.len() > self.tolerate).then(|| lost[0])
    }

    /// Wait until the group counts as lost.
    ///
    /// Cancel safety: cancel-safe (it only watches).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
    /// let reason = g.lost().wait().await;
    /// # let _ = reason; Ok(()) }
    /// ```
    pub async fn wait(self) -> LostReason {
        let mut pending: Vec<Pin<Box<dyn Future<Output = LostReason> + Send>>> = self
            .signals
            .iter()
            .cloned()
            .map(|s| Box::pin(s.wait()) as Pin<Box<dyn Future<Output = LostReason> + Send>>)
            .collect();
        let mut lost = Vec::new();
        let until = self.deadline;
        loop {
            if lost.len() > self.tolerate || pending.is_empty() {
                return lost.first().copied().unwrap_or(LostReason::Released);
            }
            let next = futures::future::select_all(pending);
            let r = match until {
                Some(d) => match tokio::time::timeout_at(d, next).await {
                    Ok(r) => r,
                    Err(_) => return LostReason::LeaseExpired,
                },
                None => next.await,
            };
            let (reason, _i, rest) = r;
            lost.push(reason);
            pending = rest;
        }
    }
}

impl IntoFuture for GroupLost {
    type Output = LostReason;
    type IntoFuture = Pin<Box<dyn Future<Output = LostReason> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.wait())
    }
}
