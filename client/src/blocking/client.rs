//! The blocking [`Client`]: an async client and the runtime that drives it.

use std::sync::{Arc, OnceLock};

use tokio::runtime::Runtime;

use super::forward::{on_runtime, Facade};
use super::runtime;
use super::{Lock, RwLock};
use crate::owner::next_owner_number;
use crate::{ClientBuilder, LockKind, Owner, Result};

/// A blocking client: wraps an async [`crate::Client`] and its own runtime.
///
/// ```no_run
/// let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    pub(super) inner: crate::Client,
    pub(super) rt: Arc<tokio::runtime::Runtime>,
}

impl Facade for Client {
    type Async = crate::Client;
    fn for_thread(&self) -> crate::Client {
        self.inner.clone()
    }
    fn rt(&self) -> Option<&Arc<Runtime>> {
        Some(&self.rt)
    }
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

    on_runtime! {
        /// Close the client (see [`crate::Client::close`]): every call afterwards answers
        /// [`Error::Closed`](crate::Error::Closed), holds are reported lost, nothing is
        /// released.
        #[doc = example!("client.close();", r#"assert!(client.lock("k").try_acquire().is_err());"#)]
        fn close(&self) = close;
    }

    /// The async client underneath (shares connection and watchdog).
    #[doc = example!("assert!(client.async_client().watched_locks() == 0);")]
    pub fn async_client(&self) -> &crate::Client {
        &self.inner
    }

    /// A lock handle on `name`; its owner is the calling thread's at each call.
    #[doc = example!(r#"let lock = client.lock("k");"#)]
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            client: self.clone(),
            name: name.into(),
            fence: false,
            lock_delay: None,
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
        self.inner.owner_numbered(thread_number())
    }
}

/// The calling thread's number in owner ids (`<prefix>:<thread number>`), the same for every
/// client and lock of this process.
pub(super) fn thread_number() -> u64 {
    thread_local! {
        static N: OnceLock<u64> = const { OnceLock::new() };
    }
    N.with(|n| *n.get_or_init(next_owner_number))
}
