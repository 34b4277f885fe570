//! Blocking [`Lock`] and [`RwLock`]: the async ones run on the facade's runtime with the
//! calling thread's owner.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::forward::{on_runtime, Facade};
use super::{Client, LockGuard};
use crate::{LockKind, Result};

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
#[doc = example!(r#"let w = client.rwlock("config").write().acquire()?;"#)]
#[derive(Clone)]
pub struct RwLock {
    pub(super) client: Client,
    pub(super) name: String,
}

impl RwLock {
    /// The read side (shared).
    #[doc = example!(r#"let r = client.rwlock("config").read().acquire()?;"#)]
    pub fn read(&self) -> Lock {
        self.side(LockKind::Read)
    }

    /// The write side (exclusive).
    #[doc = example!(r#"let w = client.rwlock("config").write().acquire()?;"#)]
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

impl Facade for Lock {
    type Async = crate::Lock;
    fn for_thread(&self) -> crate::Lock {
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
    fn rt(&self) -> Option<&Arc<Runtime>> {
        Some(&self.client.rt)
    }
}

impl Lock {
    /// The lock key.
    #[doc = example!(r#"assert_eq!(client.lock("k").name(), "k");"#)]
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Ask for fencing tokens (native backend).
    #[doc = example!(
        r#"let g = client.lock("k").fenced().acquire()?;"#,
        r#"println!("token {:?}", g.fencing_token());"#,
    )]
    pub fn fenced(mut self) -> Lock {
        self.fence = true;
        self
    }
    /// A lock-delay after a hold that ends without a release (native backend; exclusive
    /// and write locks): see [`crate::Lock::lock_delay`].
    #[doc = example!(
        r#"let g = client.lock("k").lock_delay(std::time::Duration::from_secs(5)).acquire()?;"#,
        "g.release()?;",
    )]
    pub fn lock_delay(mut self, delay: Duration) -> Lock {
        self.lock_delay = Some(delay);
        self
    }
    on_runtime! {
        /// Wait as long as it takes; watchdog on.
        #[doc = example!(r#"let g = client.lock("k").acquire()?;"#, "g.release()?;")]
        fn acquire(&self) -> Result<LockGuard> = acquire;
        /// One attempt; watchdog on when granted.
        #[doc = example!(r#"if let Some(g) = client.lock("k").try_acquire()? { g.release()?; }"#)]
        fn try_acquire(&self) -> Result<Option<LockGuard>> = try_acquire;
        /// Wait up to `wait`; with `lease`, no watchdog.
        fn try_acquire_for(
            &self,
            wait: Duration,
            lease: Option<Duration>,
        ) -> Result<Option<LockGuard>> = try_acquire_for;
        /// Delete the lock whoever holds it.
        #[doc = example!(r#"client.lock("stuck").force_unlock()?;"#)]
        fn force_unlock(&self) -> Result<bool> = force_unlock;
        /// Whether anyone holds it.
        #[doc = example!(r#"println!("{}", client.lock("k").is_locked()?);"#)]
        fn is_locked(&self) -> Result<bool> = is_locked;
        /// Whether the calling thread holds it.
        /// ```no_run
        /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
        /// let lock = client.lock("k");
        /// let _g = lock.acquire()?;
        /// assert!(lock.is_held_by_current_thread()?);
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        fn is_held_by_current_thread(&self) -> Result<bool> = is_held_by_owner;
        /// Remaining lease (`PTTL`), `None` when not locked.
        #[doc = example!(r#"println!("{:?}", client.lock("k").remaining_lease()?);"#)]
        fn remaining_lease(&self) -> Result<Option<Duration>> = remaining_lease;
    }
}
