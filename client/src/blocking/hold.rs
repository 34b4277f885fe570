//! The blocking holds: [`LockGuard`], [`SemaphoreGuard`], [`MultiLockGuard`] and
//! [`RedLockGuard`], each the async hold in one generic [`Held`] (the runtime that runs it;
//! waiting for the lost signal; release, and release on drop), with its methods generated
//! by [`to_hold!`].

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::block_on;
use super::forward::{to_hold, FromAsync};
use super::Rt;
use crate::multilock::GroupLost;
use crate::{LostReason, LostSignal, Result};

/// An async hold as a blocking hold wraps it: its lost signal, and its release.
pub(super) trait AsyncHold: Send + 'static {
    /// The lost reason now, if lost.
    fn lost_now(&self) -> Option<LostReason>;
    /// Resolves when the hold is lost.
    fn when_lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static;
    /// Release it.
    fn give_back(self) -> impl std::future::Future<Output = Result<()>> + Send;
}

/// Every async hold answers the same calls under the same names; each has a blocking hold
/// that wraps it.
macro_rules! holds {
    ($($blocking:ident wraps $async:ty),* $(,)?) => {$(
        impl AsyncHold for $async {
            fn lost_now(&self) -> Option<LostReason> {
                self.lost().check()
            }
            fn when_lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static {
                self.lost().wait()
            }
            fn give_back(self) -> impl std::future::Future<Output = Result<()>> + Send {
                self.release()
            }
        }
        impl FromAsync<$async> for $blocking {
            fn from_async(hold: $async, rt: Option<&Arc<Runtime>>) -> Self {
                $blocking { held: Held { inner: Some(hold), rt: rt.cloned() } }
            }
        }
    )*};
}
holds!(
    LockGuard wraps crate::LockGuard,
    SemaphoreGuard wraps crate::SemaphoreGuard,
    MultiLockGuard wraps crate::MultiLockGuard,
    RedLockGuard wraps crate::RedLockGuard,
);

/// An async hold and the runtime that runs it; dropped outside an async runtime, it
/// releases before `drop` returns (so the release is not lost if the client and its runtime
/// go away right after); inside one the async hold's drop releases in the background.
pub(super) struct Held<G: AsyncHold> {
    inner: Option<G>,
    rt: Rt,
}

impl<G: AsyncHold> Deref for Held<G> {
    type Target = G;
    fn deref(&self) -> &G {
        self.inner.as_ref().expect("hold present until release")
    }
}

impl<G: AsyncHold> Held<G> {
    /// Block up to `timeout` for the hold to be lost; `None` if still held.
    pub(super) fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        let lost = self.when_lost();
        match &self.rt {
            Some(rt) => rt.block_on(async move { tokio::time::timeout(timeout, lost).await.ok() }),
            None => self.lost_now(),
        }
    }
    /// Release it (see the async hold's `release`).
    pub(super) fn release(mut self) -> Result<()> {
        let g = self.inner.take().expect("hold present");
        block_on(self.rt.as_ref(), g.give_back())
    }
}

impl<G: AsyncHold> Drop for Held<G> {
    fn drop(&mut self) {
        if let Some(g) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_err() {
                let _ = block_on(self.rt.as_ref(), g.give_back());
            }
        }
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
    held: Held<crate::LockGuard>,
}

impl LockGuard {
    to_hold! {
        /// The owner's hold count after this acquire.
        #[doc = example!(r#"assert_eq!(client.lock("k").acquire()?.hold_count(), 1);"#)]
        fn hold_count(&self) -> u64;
        /// The fencing token, if asked for.
        #[doc = example!(r#"assert_eq!(client.lock("k").acquire()?.fencing_token(), None);"#)]
        fn fencing_token(&self) -> Option<u64>;
        /// The owner id holding it.
        #[doc = example!(
            r#"let g = client.lock("k").acquire()?;"#,
            "assert_eq!(g.owner_id(), client.thread_owner().id());",
        )]
        fn owner_id(&self) -> &str;
        /// The lost signal: [`check`](LostSignal::check) it, await it in async code, or use
        /// [`wait_lost`](Self::wait_lost).
        /// ```no_run
        /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
        /// let g = client.lock("k").acquire()?;
        /// let signal = g.lost();
        /// std::thread::spawn(move || { /* hand `signal` to async code */ drop(signal) });
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        fn lost(&self) -> LostSignal;
        /// Block up to `timeout` for the lock to be lost; `None` if still held.
        #[doc = example!(
            r#"let g = client.lock("k").acquire()?;"#,
            "assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);",
        )]
        fn wait_lost(&self, timeout: Duration) -> Option<LostReason>;
        /// Release this hold: `Ok(())` if it was still held,
        /// [`Error::NotHeld`](crate::Error::NotHeld) if it had been lost.
        #[doc = example!(r#"let g = client.lock("k").acquire()?;"#, "g.release()?;")]
        fn release(self) -> Result<()>;
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
    held: Held<crate::SemaphoreGuard>,
}

impl SemaphoreGuard {
    to_hold! {
        /// The permits this guard holds.
        #[doc = example!(r#"assert_eq!(client.semaphore("s", 3).acquire(2)?.permits(), 2);"#)]
        fn permits(&self) -> u32;
        /// The owner's permits on the server right after this grant.
        /// ```no_run
        /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
        /// let sem = client.semaphore("s", 3);
        /// let _a = sem.acquire(1)?;
        /// assert_eq!(sem.acquire(1)?.owner_permits(), 2);
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        fn owner_permits(&self) -> u64;
        /// The owner id holding them (the calling thread's at acquire).
        #[doc = example!(
            r#"let g = client.semaphore("s", 3).acquire(1)?;"#,
            "assert_eq!(g.owner_id(), client.thread_owner().id());",
        )]
        fn owner_id(&self) -> &str;
        /// The lost signal (see [`LockGuard::lost`]).
        #[doc = example!(
            r#"assert!(client.semaphore("s", 3).acquire(1)?.lost().check().is_none());"#,
        )]
        fn lost(&self) -> LostSignal;
        /// Block up to `timeout` for the permits to be lost; `None` if still held.
        #[doc = example!(
            r#"let g = client.semaphore("s", 3).acquire(1)?;"#,
            "assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);",
        )]
        fn wait_lost(&self, timeout: Duration) -> Option<LostReason>;
        /// Give the permits back: `Ok(())` if the owner still held them,
        /// [`Error::NotHeld`](crate::Error::NotHeld) if they had been lost.
        #[doc = example!(r#"client.semaphore("s", 3).acquire(1)?.release()?;"#)]
        fn release(self) -> Result<()>;
    }
}

/// All members of a blocking [`MultiLock`](super::MultiLock), held. Dropping it releases
/// them (before `drop` returns, outside an async runtime).
pub struct MultiLockGuard {
    held: Held<crate::MultiLockGuard>,
}

impl MultiLockGuard {
    /// Members held.
    #[doc = example!(c:
        r#"assert_eq!(dlock_client::blocking::MultiLock::new([c.lock("a")]).acquire()?.len(), 1);"#,
    )]
    pub fn len(&self) -> usize {
        self.held.guards().len()
    }
    /// True when no member is held (an empty multi-lock).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    to_hold! {
        /// The members' fencing tokens.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::MultiLockGuard) {
        /// println!("{:?}", g.fencing_tokens());
        /// # }
        /// ```
        fn fencing_tokens(&self) -> Vec<Option<u64>>;
        /// The signal that fires when any member is lost.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::MultiLockGuard) {
        /// assert!(g.lost().check().is_none());
        /// # }
        /// ```
        fn lost(&self) -> GroupLost;
        /// Block up to `timeout` for a member to be lost; `None` if all are still held.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::MultiLockGuard) {
        /// assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);
        /// # }
        /// ```
        fn wait_lost(&self, timeout: Duration) -> Option<LostReason>;
        /// Release every member (see [`crate::MultiLockGuard::release`]).
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::MultiLockGuard) -> dlock_client::Result<()> {
        /// g.release()?;
        /// # Ok(()) }
        /// ```
        fn release(self) -> Result<()>;
    }
}

/// A blocking RedLock held on a quorum of servers (see [`crate::RedLockGuard`]). Dropping it
/// releases (before `drop` returns, outside an async runtime).
pub struct RedLockGuard {
    held: Held<crate::RedLockGuard>,
}

impl RedLockGuard {
    /// How long the validity still lasts (zero once it is over).
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) { println!("{:?}", g.remaining()); }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.held
            .valid_until()
            .saturating_duration_since(tokio::time::Instant::now())
    }
    to_hold! {
        /// The validity computed at grant: `lease - elapsed - drift`.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::RedLockGuard) { println!("{:?}", g.validity()); }
        /// ```
        fn validity(&self) -> Duration;
        /// Still within the validity?
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::RedLockGuard) { assert!(g.is_valid()); }
        /// ```
        fn is_valid(&self) -> bool;
        /// Servers that granted it.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::RedLockGuard) { assert!(g.granted() >= 1); }
        /// ```
        fn granted(&self) -> usize;
        /// The per-server fencing tokens.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::RedLockGuard) {
        /// println!("{:?}", g.fencing_tokens());
        /// # }
        /// ```
        fn fencing_tokens(&self) -> Vec<Option<u64>>;
        /// The signal that fires at the validity deadline or when a quorum is lost.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::RedLockGuard) {
        /// assert!(g.lost().check().is_none());
        /// # }
        /// ```
        fn lost(&self) -> GroupLost;
        /// Block up to `timeout` for the lock to count as lost; `None` if still held.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::RedLockGuard) {
        /// assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);
        /// # }
        /// ```
        fn wait_lost(&self, timeout: Duration) -> Option<LostReason>;
        /// Release on every server: `Ok(())` if a quorum still held it.
        /// ```no_run
        /// # fn demo(g: dlock_client::blocking::RedLockGuard) -> dlock_client::Result<()> {
        /// g.release()?;
        /// # Ok(()) }
        /// ```
        fn release(self) -> Result<()>;
    }
}
