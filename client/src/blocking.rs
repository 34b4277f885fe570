//! Blocking facade for threads without async: the same locks, reentrant **per thread**
//! like Redisson (owner `<prefix>:<thread number>`).
//!
//! The facade runs its own small tokio runtime (2 worker threads) for the connection and
//! the watchdog. Do not call it from inside an async task (it blocks the thread).
//!
//! ```no_run
//! use std::time::Duration;
//! let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
//! let lock = client.lock("nightly-report");
//! let g = lock.acquire()?;                     // this thread's owner
//! let again = lock.try_acquire()?.unwrap();    // reentrant on the same thread
//! assert_eq!(again.hold_count(), 2);
//! again.release()?;
//! g.release()?;
//! # Ok::<(), dlock_client::Error>(())
//! ```

use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

mod semaphore;
pub use semaphore::{Semaphore, SemaphoreGuard};

use crate::backend::Wait;
use crate::owner::next_owner_number;
use crate::{ClientBuilder, LockKind, LostReason, LostSignal, Owner, Result};

/// A blocking client: wraps an async [`crate::Client`] and its own runtime.
///
/// ```no_run
/// let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
    rt: Arc<tokio::runtime::Runtime>,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("dlock-client")
        .enable_all()
        .build()
        .map_err(|e| crate::Error::Config(format!("cannot start a runtime: {e}")))
}

impl Client {
    /// Connect with default settings.
    pub fn open(url: impl Into<String>) -> Result<Client> {
        Client::build(crate::Client::builder(url))
    }

    /// Connect with an async [`ClientBuilder`]'s settings.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let b = dlock_client::Client::builder("redis://127.0.0.1:6379/").lease(Duration::from_secs(5));
    /// let c = dlock_client::blocking::Client::build(b)?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn build(builder: ClientBuilder) -> Result<Client> {
        let rt = Arc::new(runtime()?);
        let inner = rt.block_on(builder.build())?;
        Ok(Client { inner, rt })
    }

    /// The async client underneath (shares connection and watchdog).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert!(client.async_client().watched_locks() == 0);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn async_client(&self) -> &crate::Client {
        &self.inner
    }

    /// A lock handle on `name`; its owner is the calling thread's at each call.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let lock = client.lock("k");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            client: self.clone(),
            name: name.into(),
            fence: false,
            kind: LockKind::Exclusive,
        }
    }

    /// A read-write lock handle on `name` (`DLOCK.RWLOCK`); its owner is the calling
    /// thread's at each call, so a thread that writes may also read.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let config = client.rwlock("config");
    /// let r = config.read().acquire()?;
    /// r.release()?;
    /// let w = config.write().acquire()?;
    /// w.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock {
            client: self.clone(),
            name: name.into(),
        }
    }

    /// The owner the calling thread uses: `<prefix>:<thread number>`.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let me = client.thread_owner();
    /// let g = client.lock("k").acquire()?;
    /// assert_eq!(g.owner_id(), me.id());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn thread_owner(&self) -> Owner {
        thread_local! {
            static N: OnceLock<u64> = const { OnceLock::new() };
        }
        let n = N.with(|n| *n.get_or_init(next_owner_number));
        self.inner.owner_numbered(n)
    }
}

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
#[derive(Clone)]
pub struct Lock {
    client: Client,
    name: String,
    fence: bool,
    kind: LockKind,
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
    client: Client,
    name: String,
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
            kind,
        }
    }
}

impl Lock {
    fn handle(&self) -> crate::Lock {
        let owner = self.client.thread_owner();
        let name = self.name.clone();
        let l = match self.kind {
            LockKind::Exclusive => self.client.inner.lock_as(name, &owner),
            LockKind::Read => self.client.inner.rwlock_as(name, &owner).read(),
            LockKind::Write => self.client.inner.rwlock_as(name, &owner).write(),
            LockKind::Semaphore => unreachable!("semaphores have their own handle"),
        };
        if self.fence {
            l.fenced()
        } else {
            l
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
    inner: Option<crate::LockGuard>,
    rt: Arc<tokio::runtime::Runtime>,
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
