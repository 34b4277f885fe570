//! Blocking semaphores (and the blocking view of who waits): the async
//! [`Semaphore`](crate::Semaphore) run on the facade's runtime, with the calling thread's
//! owner, so a thread's permits add up across its guards.

use std::time::Duration;

use super::{Client, LockGuard};
use crate::{LostReason, LostSignal, Result, Waiter};

impl Client {
    /// A semaphore of `capacity` permits on `name`; its owner is the calling thread's at
    /// each call (see [`crate::Client::semaphore`]).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let pool = client.semaphore("db-connections", 4);
    /// let g = pool.acquire(1)?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, capacity: u32) -> Semaphore {
        Semaphore {
            client: self.clone(),
            name: name.into(),
            capacity,
        }
    }

    /// The clients waiting on lock `name`, first in line first (see
    /// [`crate::Client::waiters`]; native backend only).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// println!("{} waiting", client.waiters("pool")?.len());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn waiters(&self, name: &str) -> Result<Vec<Waiter>> {
        let c = self.inner.clone();
        let name = name.to_string();
        self.rt.block_on(async move { c.waiters(&name).await })
    }
}

/// A blocking semaphore handle (see [`crate::Semaphore`]).
///
/// ```no_run
/// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// use std::time::Duration;
/// let sem = client.semaphore("exports", 3);
/// if let Some(g) = sem.try_acquire_for(2, Duration::from_millis(100), None)? {
///     g.release()?;
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Client,
    name: String,
    capacity: u32,
}

impl Semaphore {
    /// The async handle for the calling thread's owner.
    fn handle(&self) -> crate::Semaphore {
        let owner = self.client.thread_owner();
        self.client
            .inner
            .semaphore_as(self.name.clone(), self.capacity, &owner)
    }

    fn guard(&self, g: crate::SemaphoreGuard) -> SemaphoreGuard {
        let (inner, permits) = g.into_parts();
        SemaphoreGuard {
            guard: LockGuard {
                inner: Some(inner),
                rt: self.client.rt.clone(),
            },
            permits,
        }
    }

    /// The semaphore key.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.semaphore("s", 2).name(), "s");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of permits this handle says the semaphore has.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.semaphore("s", 2).capacity(), 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Take `n` permits, waiting as long as it takes; watchdog on.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.semaphore("s", 4).acquire(2)?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn acquire(&self, n: u32) -> Result<SemaphoreGuard> {
        let h = self.handle();
        let g = self.client.rt.block_on(async move { h.acquire(n).await })?;
        Ok(self.guard(g))
    }

    /// One attempt at `n` permits; watchdog on when granted.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// if let Some(g) = client.semaphore("s", 4).try_acquire(1)? { g.release()?; }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_acquire(&self, n: u32) -> Result<Option<SemaphoreGuard>> {
        self.try_acquire_for(n, Duration::ZERO, None)
    }

    /// Wait up to `wait` for `n` permits (zero: one attempt; [`Duration::MAX`]: no limit);
    /// with `lease`, no watchdog. `Ok(None)` on time-out.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// use std::time::Duration;
    /// let g = client.semaphore("s", 4).try_acquire_for(1, Duration::from_secs(1), None)?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_acquire_for(
        &self,
        n: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<SemaphoreGuard>> {
        let h = self.handle();
        let g = self
            .client
            .rt
            .block_on(async move { h.try_acquire_for(n, wait, lease).await })?;
        Ok(g.map(|g| self.guard(g)))
    }

    /// The permits the calling thread holds.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let sem = client.semaphore("s", 4);
    /// let _g = sem.acquire(2)?;
    /// assert_eq!(sem.held_by_current_thread()?, 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn held_by_current_thread(&self) -> Result<u32> {
        let h = self.handle();
        self.client
            .rt
            .block_on(async move { h.held_by_owner().await })
    }

    /// Delete the semaphore whoever holds it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// client.semaphore("stuck", 4).force_delete()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn force_delete(&self) -> Result<bool> {
        let h = self.handle();
        self.client
            .rt
            .block_on(async move { h.force_delete().await })
    }
}

/// Permits held (blocking). Dropping it releases them (see [`LockGuard`]'s drop).
///
/// ```no_run
/// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// let g = client.semaphore("s", 3).acquire(2)?;
/// assert_eq!(g.permits(), 2);
/// g.release()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
pub struct SemaphoreGuard {
    guard: LockGuard,
    permits: u32,
}

impl SemaphoreGuard {
    /// The permits this guard holds.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.semaphore("s", 3).acquire(2)?.permits(), 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }
    /// The owner's permits on the server right after this grant.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let sem = client.semaphore("s", 3);
    /// let _a = sem.acquire(1)?;
    /// assert_eq!(sem.acquire(1)?.owner_permits(), 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner_permits(&self) -> u64 {
        self.guard.hold_count()
    }
    /// The owner id holding them (the calling thread's at acquire).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.semaphore("s", 3).acquire(1)?;
    /// assert_eq!(g.owner_id(), client.thread_owner().id());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner_id(&self) -> &str {
        self.guard.owner_id()
    }
    /// The lost signal (see [`LockGuard::lost`]).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert!(client.semaphore("s", 3).acquire(1)?.lost().check().is_none());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lost(&self) -> LostSignal {
        self.guard.lost()
    }
    /// Block up to `timeout` for the permits to be lost; `None` if still held.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.semaphore("s", 3).acquire(1)?;
    /// assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        self.guard.wait_lost(timeout)
    }
    /// Give the permits back: `Ok(())` if the owner still held them,
    /// [`Error::NotHeld`](crate::Error::NotHeld) if they had been lost.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// client.semaphore("s", 3).acquire(1)?.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn release(self) -> Result<()> {
        self.guard.release()
    }
}
