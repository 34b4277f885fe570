//! Blocking [`Lock`], [`RwLock`] and [`LockGuard`]: the async ones run on the facade's runtime
//! with the calling thread's owner.

use std::sync::Arc;
use std::time::Duration;

use super::Client;
use crate::backend::Wait;
use crate::{LockKind, LostReason, LostSignal, Result};

/// A blocking lock handle (Redisson's `RLock`).
///
/// ```no_run
/// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// use std::time::Duration;
/// let lock = client.lock("stock");
/// match lock.try_acquire_for(Duration::from_millis(100), Some(Duration::from_secs(2)))? {
///     Some(g) => { g.release()?; }
///     None => println!("busy"),
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    pub(super) client: Client,
    pub(super) name: String,
    pub(super) fence: bool,
    pub(super) lock_delay: Option<Duration>,
    pub(super) kind: LockKind,
}

/// A blocking read-write lock handle: [`read`](RwLock::read) and [`write`](RwLock::write)
/// give [`Lock`] handles with the whole lock API (try, wait, lease or watchdog, `lost()`,
/// fencing on `write`).
/// ```no_run
/// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// let w = client.rwlock("config").write().acquire()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct RwLock {
    pub(super) client: Client,
    pub(super) name: String,
}

impl RwLock {
    /// The read side (shared).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let r = client.rwlock("config").read().acquire()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn read(&self) -> Lock {
        self.side(LockKind::Read)
    }

    /// The write side (exclusive).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let w = client.rwlock("config").write().acquire()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn write(&self) -> Lock {
        self.side(LockKind::Write)
    }

    fn side(&self, kind: LockKind) -> Lock {
        Lock {
            client: self.client.clone(),
            name: self.name.clone(),
            fence: false,
            lock_delay: None,
            kind,
        }
    }
}

impl Lock {
    pub(super) fn handle(&self) -> crate::Lock {
        let owner = self.client.thread_owner();
        let name = self.name.clone();
        let l = match self.kind {
            LockKind::Exclusive => self.client.inner.lock_as(name, &owner),
            LockKind::Read => self.client.inner.rwlock_as(name, &owner).read(),
            LockKind::Write => self.client.inner.rwlock_as(name, &owner).write(),
            LockKind::Semaphore => unreachable!("semaphores have their own handle"),
        };
        let l = if self.fence { l.fenced() } else { l };
        match self.lock_delay {
            Some(d) => l.lock_delay(d),
            None => l,
        }
    }
    fn run(&self, wait: Wait, lease: Option<Duration>) -> Result<Option<LockGuard>> {
        let h = self.handle();
        let g = self
            .client
            .rt
            .block_on(async move { h.acquire_impl(wait, lease).await })?;
        Ok(g.map(|g| LockGuard {
            inner: Some(g),
            rt: self.client.rt.clone(),
        }))
    }
    /// The lock key.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.lock("k").name(), "k");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Ask for fencing tokens (native backend).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").fenced().acquire()?;
    /// println!("token {:?}", g.fencing_token());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn fenced(mut self) -> Lock {
        self.fence = true;
        self
    }
    /// A lock-delay after a hold that ends without a release (native backend; exclusive
    /// and write locks): see [`crate::Lock::lock_delay`].
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").lock_delay(std::time::Duration::from_secs(5)).acquire()?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Lock {
        self.lock_delay = Some(delay);
        self
    }
    /// Wait as long as it takes; watchdog on.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn acquire(&self) -> Result<LockGuard> {
        let h = self.handle();
        let g = self.client.rt.block_on(async move { h.acquire().await })?;
        Ok(LockGuard {
            inner: Some(g),
            rt: self.client.rt.clone(),
        })
    }
    /// One attempt; watchdog on when granted.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// if let Some(g) = client.lock("k").try_acquire()? { g.release()?; }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.run(Wait::No, None)
    }
    /// Wait up to `wait`; with `lease`, no watchdog.
    pub fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        if lease.is_some_and(|l| l.is_zero()) {
            return Err(crate::Error::Config("lease must be > 0".into()));
        }
        self.run(Wait::from_duration(wait), lease)
    }
    /// Delete the lock whoever holds it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// client.lock("stuck").force_unlock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        let h = self.handle();
        self.client
            .rt
            .block_on(async move { h.force_unlock().await })
    }
    /// Whether anyone holds it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// println!("{}", client.lock("k").is_locked()?);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        let h = self.handle();
        self.client.rt.block_on(async move { h.is_locked().await })
    }
    /// Whether the calling thread holds it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let lock = client.lock("k");
    /// let _g = lock.acquire()?;
    /// assert!(lock.is_held_by_current_thread()?);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        let h = self.handle();
        self.client
            .rt
            .block_on(async move { h.is_held_by_owner().await })
    }
    /// Remaining lease (`PTTL`), `None` when not locked.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// println!("{:?}", client.lock("k").remaining_lease()?);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        let h = self.handle();
        self.client
            .rt
            .block_on(async move { h.remaining_lease().await })
    }
}

/// A held lock (blocking). Dropping it releases in the background.
///
/// ```no_run
/// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// let g = client.lock("x").acquire()?;
/// assert!(g.lost().check().is_none());
/// g.release()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
pub struct LockGuard {
    pub(super) inner: Option<crate::LockGuard>,
    pub(super) rt: Arc<tokio::runtime::Runtime>,
}

impl LockGuard {
    fn g(&self) -> &crate::LockGuard {
        self.inner.as_ref().expect("guard present until release")
    }
    /// The owner's hold count after this acquire.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.lock("k").acquire()?.hold_count(), 1);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn hold_count(&self) -> u64 {
        self.g().hold_count()
    }
    /// The fencing token, if asked for.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.lock("k").acquire()?.fencing_token(), None);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.g().fencing_token()
    }
    /// The owner id holding it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// assert_eq!(g.owner_id(), client.thread_owner().id());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner_id(&self) -> &str {
        self.g().owner_id()
    }
    /// The lost signal: [`check`](LostSignal::check) it, await it in async code, or use
    /// [`wait_lost`](Self::wait_lost).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// let signal = g.lost();
    /// std::thread::spawn(move || { /* hand `signal` to async code */ drop(signal) });
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lost(&self) -> LostSignal {
        self.g().lost()
    }
    /// Block up to `timeout` for the lock to be lost; `None` if still held.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        let s = self.lost();
        self.rt
            .block_on(async move { tokio::time::timeout(timeout, s.wait()).await.ok() })
    }
    /// Release this hold: `Ok(())` if it was still held, [`Error::NotHeld`](crate::Error::NotHeld)
    /// if it had been lost.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn release(mut self) -> Result<()> {
        let g = self.inner.take().expect("guard present");
        self.rt.block_on(g.release())
    }
}

impl Drop for LockGuard {
    /// Outside an async runtime the release is sent before `drop` returns (so it is not lost
    /// if the client and its runtime go away right after); inside one it goes in the background.
    fn drop(&mut self) {
        if let Some(g) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_err() {
                let _ = self.rt.block_on(g.release());
            }
        }
    }
}
