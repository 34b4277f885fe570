//! Counting semaphores with a lease per holder: [`Semaphore`] (a handle on one name for one
//! owner) and [`SemaphoreGuard`] (permits held).
//!
//! On the native backend this is the module's `DLOCK.SEMAPHORE`: a waiting acquire joins the
//! key's server-side FIFO queue (strict order, a large request is never starved), and a
//! holder that crashed gives its permits back when its own lease lapses. On the script
//! backend the same hash layout is kept by Lua scripts
//! ([`scripts::SEMAPHORE_ACQUIRE_BODY`](crate::scripts::SEMAPHORE_ACQUIRE_BODY)), and a
//! waiter tries again when a release publishes on the unlock channel, or after at most
//! 100 ms: no FIFO order there (see the crate README, *Semaphores*).
//!
//! A semaphore acquire is a [`Lock`] acquire of kind [`LockKind::Semaphore`] asking for
//! `n` permits: the same waiting, retries, abandon clean-up, registry, watchdog and lost
//! signal as locks.

use std::time::Duration;

use dlock_core::args::MAX_CAPACITY;
use dlock_core::error::LockError;

use crate::backend::{Permits, Wait};
use crate::{Client, Error, Lock, LockGuard, LockKind, LostSignal, Owner, Result};

impl Client {
    /// A semaphore of `capacity` permits on `name`, with its own new owner: every permit
    /// taken through this handle (or its clones) adds up to that owner's count; another
    /// handle from `semaphore(name, ..)` is another owner.
    ///
    /// The capacity is stored by the grant that creates the key and fixed while the key
    /// exists: a handle naming another capacity gets an error (`ERR semaphore capacity is
    /// 3, not 5`) until the last holder has left.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let pool = client.semaphore("db-connections", 4);
    /// let g = pool.acquire(1).await?; // waits for a permit; the watchdog renews its lease
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, capacity: u32) -> Semaphore {
        self.semaphore_as(name, capacity, &self.owner())
    }

    /// A semaphore handle on `name` acting for `owner`.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let owner = client.owner();
    /// let g = client.semaphore_as("pool", 4, &owner).acquire(2).await?;
    /// assert_eq!(g.owner_id(), owner.id());
    /// # Ok(()) }
    /// ```
    pub fn semaphore_as(&self, name: impl Into<String>, capacity: u32, owner: &Owner) -> Semaphore {
        Semaphore {
            base: Lock::new(
                self.clone(),
                name.into(),
                owner.clone(),
                LockKind::Semaphore,
            ),
            capacity,
        }
    }
}

/// A counting semaphore handle: `capacity` permits on one key, for one owner. Cheap to
/// clone; nothing is sent until you call a method.
///
/// Each holder (owner) has its own lease: the watchdog renews it while a guard lives, and
/// a holder that stops renewing (a crash, a lost network) gives its permits back when its
/// lease lapses, even while other holders keep renewing theirs.
///
/// **Cancel safety.** Every acquire call is cancel-safe as [`Lock`]'s are: dropping its
/// future never leaves permits held for longer than the clean-up takes (a grant arriving
/// after the drop is given back in the background).
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// use std::time::Duration;
/// let sem = client.semaphore("exports", 3);
/// if let Some(g) = sem.try_acquire_for(2, Duration::from_millis(500), None).await? {
///     assert_eq!(g.permits(), 2);
///     g.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    /// The name and owner, as a lock handle of kind [`LockKind::Semaphore`].
    base: Lock,
    capacity: u32,
}

impl Semaphore {
    /// The semaphore key.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.semaphore("s", 2).name(), "s");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.base.name()
    }

    /// The owner this handle acts for.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let o = client.owner();
    /// assert_eq!(client.semaphore_as("s", 2, &o).owner(), &o);
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &Owner {
        self.base.owner()
    }

    /// The number of permits this handle says the semaphore has.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.semaphore("s", 2).capacity(), 2);
    /// # Ok(()) }
    /// ```
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The same semaphore acting for another owner.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let o = client.owner();
    /// assert_eq!(client.semaphore("s", 2).with_owner(&o).owner(), &o);
    /// # Ok(()) }
    /// ```
    pub fn with_owner(mut self, owner: &Owner) -> Semaphore {
        self.base = self.base.with_owner(owner);
        self
    }

    /// The lock handle that takes `n` permits, once `n` and the capacity are checked.
    fn take(&self, n: u32) -> Result<Lock> {
        let capacity = i64::from(self.capacity);
        if self.capacity == 0 || capacity > MAX_CAPACITY {
            return Err(Error::Config(format!(
                "semaphore capacity must be 1 to {MAX_CAPACITY}, not {capacity}"
            )));
        }
        if n == 0 {
            return Err(Error::Config("take at least 1 permit".into()));
        }
        if n > self.capacity {
            // The module's own answer, given here for both backends.
            return Err(Error::Server(
                LockError::CountOverCapacity {
                    count: i64::from(n),
                    capacity,
                }
                .message(""),
            ));
        }
        Ok(self.base.clone().with_permits(Permits {
            capacity: self.capacity,
            count: n,
        }))
    }

    /// Take `n` permits, waiting as long as it takes; the watchdog keeps the owner's lease
    /// alive until the guard is released.
    ///
    /// On the native backend the wait is one `DLOCK.SEMAPHORE ... WAIT 0` on a dedicated
    /// connection with no client-side time-out: the request keeps its FIFO place for the
    /// whole wait. Connection failures are retried per [`Retry`](crate::Retry).
    ///
    /// Cancel safety: cancel-safe (see [`Semaphore`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.semaphore("s", 4).acquire(3).await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, n: u32) -> Result<SemaphoreGuard> {
        let lock = self.take(n)?;
        let guard = lock.acquire().await?;
        Ok(SemaphoreGuard::new(guard, n))
    }

    /// Take `n` permits, waiting as long as it takes, then hold them for `lease` (no
    /// watchdog). [`Duration::MAX`] = no limit (the module's maximum lease).
    ///
    /// Cancel safety: cancel-safe (see [`Semaphore`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let g = client.semaphore("s", 4).acquire_with_lease(1, Duration::from_secs(10)).await?;
    /// assert!(!g.is_watched());
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with_lease(&self, n: u32, lease: Duration) -> Result<SemaphoreGuard> {
        let lock = self.take(n)?;
        let guard = lock.acquire_with_lease(lease).await?;
        Ok(SemaphoreGuard::new(guard, n))
    }

    /// One attempt at `n` permits, no waiting; watchdog on when granted. On the native
    /// backend it is refused while others wait, even if the permits are free (strict FIFO).
    ///
    /// Cancel safety: cancel-safe (see [`Semaphore`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// match client.semaphore("s", 4).try_acquire(1).await? {
    ///     Some(g) => { g.release().await?; }
    ///     None => println!("no permit free"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, n: u32) -> Result<Option<SemaphoreGuard>> {
        self.try_acquire_for(n, Duration::ZERO, None).await
    }

    /// Wait up to `wait` for `n` permits (zero: one attempt; [`Duration::MAX`]: no limit).
    /// With `lease` the permits lapse after it (no watchdog; must be > 0; [`Duration::MAX`]
    /// = the module's maximum), without it the watchdog renews them until release.
    /// `Ok(None)` on time-out; a time-out leaves no waiter behind.
    ///
    /// Cancel safety: cancel-safe (see [`Semaphore`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let g = client.semaphore("s", 4).try_acquire_for(2, Duration::from_secs(1), None).await?;
    /// # let _ = g;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        n: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<SemaphoreGuard>> {
        if lease.is_some_and(|l| l.is_zero()) {
            return Err(Error::Config("lease must be > 0".into()));
        }
        let lock = self.take(n)?;
        let guard = lock.acquire_impl(Wait::from_duration(wait), lease).await?;
        Ok(guard.map(|g| SemaphoreGuard::new(g, n)))
    }

    /// The permits this handle's owner holds (`HGET key permits:<owner>`; 0 when none). A
    /// holder whose lease lapsed still counts until the next command on the key removes it.
    ///
    /// Cancel safety: cancel-safe (read only).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let sem = client.semaphore("s", 4);
    /// let _g = sem.acquire(2).await?;
    /// assert_eq!(sem.held_by_owner().await?, 2);
    /// # Ok(()) }
    /// ```
    pub async fn held_by_owner(&self) -> Result<u32> {
        let field = LockKind::Semaphore.field(self.owner().id());
        let mut conn = self.base.client.inner.link.shared().clone();
        let n: Option<u32> = redis::cmd("HGET")
            .arg(self.name())
            .arg(field)
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(self.name(), e))?;
        Ok(n.unwrap_or(0))
    }

    /// Delete the semaphore whoever holds it (native: plain `DEL`, which wakes the
    /// module's waiters; script: `DEL` and a message on the unlock channel). Every holder
    /// loses its permits (their [`lost`](SemaphoreGuard::lost) signals fire at the next
    /// renewal). True if there was a key.
    ///
    /// Cancel safety: the delete may or may not have happened when the future is dropped.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// client.semaphore("stuck", 4).force_delete().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_delete(&self) -> Result<bool> {
        self.base.force_unlock().await
    }
}

/// Permits held by one owner on a semaphore. Release them with
/// [`release`](SemaphoreGuard::release); dropping the guard releases them in the
/// background. While it lives (and was acquired without an explicit lease) the client's
/// watchdog renews the owner's lease.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let sem = client.semaphore("workers", 5);
/// let a = sem.acquire(2).await?;
/// let b = sem.acquire(1).await?;            // the same owner: its permits add up
/// assert_eq!((a.permits(), b.owner_permits()), (2, 3));
/// b.release().await?;
/// drop(a);                                  // released in the background
/// # Ok(()) }
/// ```
pub struct SemaphoreGuard {
    inner: LockGuard,
    permits: u32,
}

impl std::fmt::Debug for SemaphoreGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreGuard")
            .field("key", &self.name())
            .field("owner", &self.owner_id())
            .field("permits", &self.permits)
            .finish()
    }
}

impl SemaphoreGuard {
    fn new(inner: LockGuard, permits: u32) -> SemaphoreGuard {
        SemaphoreGuard { inner, permits }
    }

    /// The semaphore key.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.semaphore("s", 2).acquire(1).await?.name(), "s");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The owner id holding the permits.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.semaphore("s", 2).acquire(1).await?;
    /// assert!(g.owner_id().starts_with(client.owner_prefix()));
    /// # Ok(()) }
    /// ```
    pub fn owner_id(&self) -> &str {
        self.inner.owner_id()
    }

    /// The permits this guard holds (and gives back on release).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.semaphore("s", 4).acquire(3).await?.permits(), 3);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The owner's permits on the server right after this grant (its earlier permits
    /// included).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let sem = client.semaphore("s", 4);
    /// let _a = sem.acquire(1).await?;
    /// assert_eq!(sem.acquire(2).await?.owner_permits(), 3);
    /// # Ok(()) }
    /// ```
    pub fn owner_permits(&self) -> u64 {
        self.inner.hold_count()
    }

    /// Whether the watchdog renews the owner's lease.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert!(client.semaphore("s", 2).acquire(1).await?.is_watched());
    /// # Ok(()) }
    /// ```
    pub fn is_watched(&self) -> bool {
        self.inner.is_watched()
    }

    /// A signal that resolves when the permits are lost (the key was deleted, the lease
    /// lapsed, a renewal found the owner gone) or released; its
    /// [`check`](LostSignal::check) tells without waiting.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.semaphore("s", 2).acquire(1).await?;
    /// let lost = g.lost();
    /// tokio::spawn(async move { eprintln!("permits lost: {:?}", lost.await) });
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> LostSignal {
        self.inner.lost()
    }

    /// Renew the owner's lease on its permits now (see [`LockGuard::renew`]).
    ///
    /// Cancel safety: as [`LockGuard::renew`].
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.semaphore("s", 2).acquire(1).await?;
    /// g.renew().await?;
    /// # Ok(()) }
    /// ```
    pub async fn renew(&self) -> Result<()> {
        self.inner.renew().await
    }

    /// Give back this guard's permits (`DLOCK.RELEASE key owner COUNT n`): `Ok(())` when the
    /// owner still held them, [`Error::NotHeld`] when it no longer held any (its lease
    /// lapsed, the key was deleted).
    ///
    /// Cancel safety: not cancel-safe in the sense that the release may or may not have
    /// reached the server when the future is dropped; the watchdog has stopped renewing
    /// either way (when this was the owner's last guard), so the permits come back at the
    /// latest when the lease ends.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.semaphore("s", 2).acquire(2).await?;
    /// g.release().await?; // Err(Error::NotHeld(..)) if the permits were lost
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        self.inner.release().await
    }
}
