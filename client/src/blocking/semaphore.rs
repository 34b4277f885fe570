//! Blocking semaphores (and the blocking view of who waits): the async
//! [`Semaphore`](crate::Semaphore) run on the facade's runtime, with the calling thread's
//! owner, so a thread's permits add up across its guards.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::forward::{on_runtime, Facade};
use super::{Client, SemaphoreGuard};
use crate::{Result, Waiter};

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

    on_runtime! {
        /// The clients waiting on lock `name`, first in line first (see
        /// [`crate::Client::waiters`]; native backend only).
        #[doc = example!(r#"println!("{} waiting", client.waiters("pool")?.len());"#)]
        fn waiters(&self, name: &str) -> Result<Vec<Waiter>> = waiters;
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

impl Facade for Semaphore {
    type Async = crate::Semaphore;
    fn for_thread(&self) -> crate::Semaphore {
        let owner = self.client.thread_owner();
        self.client
            .inner
            .semaphore_as(self.name.clone(), self.capacity, &owner)
    }
    fn rt(&self) -> Option<&Arc<Runtime>> {
        Some(&self.client.rt)
    }
}

impl Semaphore {
    /// The semaphore key.
    #[doc = example!(r#"assert_eq!(client.semaphore("s", 2).name(), "s");"#)]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of permits this handle says the semaphore has.
    #[doc = example!(r#"assert_eq!(client.semaphore("s", 2).capacity(), 2);"#)]
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    on_runtime! {
        /// Take `n` permits, waiting as long as it takes; watchdog on.
        #[doc = example!(r#"let g = client.semaphore("s", 4).acquire(2)?;"#, "g.release()?;")]
        fn acquire(&self, n: u32) -> Result<SemaphoreGuard> = acquire;
        /// One attempt at `n` permits; watchdog on when granted.
        #[doc = example!(
            r#"if let Some(g) = client.semaphore("s", 4).try_acquire(1)? { g.release()?; }"#,
        )]
        fn try_acquire(&self, n: u32) -> Result<Option<SemaphoreGuard>> = try_acquire;
        /// Wait up to `wait` for `n` permits (zero: one attempt; [`Duration::MAX`]: no limit);
        /// with `lease`, no watchdog. `Ok(None)` on time-out.
        #[doc = example!(
            "use std::time::Duration;",
            r#"let g = client.semaphore("s", 4).try_acquire_for(1, Duration::from_secs(1), None)?;"#,
        )]
        fn try_acquire_for(
            &self,
            n: u32,
            wait: Duration,
            lease: Option<Duration>,
        ) -> Result<Option<SemaphoreGuard>> = try_acquire_for;
        /// The permits the calling thread holds.
        /// ```no_run
        /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
        /// let sem = client.semaphore("s", 4);
        /// let _g = sem.acquire(2)?;
        /// assert_eq!(sem.held_by_current_thread()?, 2);
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        fn held_by_current_thread(&self) -> Result<u32> = held_by_owner;
        /// Delete the semaphore whoever holds it.
        #[doc = example!(r#"client.semaphore("stuck", 4).force_delete()?;"#)]
        fn force_delete(&self) -> Result<bool> = force_delete;
    }
}
