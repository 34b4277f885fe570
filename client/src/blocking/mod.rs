//! Blocking facade for threads without async: the same locks, reentrant **per thread**
//! like Redisson (owner `<prefix>:<thread number>`).
//!
//! The facade runs its own small tokio runtime (2 worker threads) for the connection and
//! the watchdog. Do not call it from inside an async task (it blocks the thread).
//!
//! It mirrors the async API: [`Client`], [`Lock`] and [`RwLock`] handles, [`MultiLock`],
//! [`RedLock`], and [`Node`] for servers that may be down.
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

/// A doc example on a blocking client: the lines given, between a hidden line that opens the
/// client (named `client`, or the name given before a colon) and a hidden `Ok`; written
/// `#[doc = example!("line", ...)]`.
macro_rules! example {
    ($($line:literal),+ $(,)?) => {
        example!(client: $($line),+)
    };
    ($client:ident: $($line:literal),+ $(,)?) => {
        concat!(
            "```no_run\n# let ",
            stringify!($client),
            " = dlock_client::blocking::Client::open(\"redis://127.0.0.1:6379/\")?;\n",
            $($line, "\n",)+
            "# Ok::<(), dlock_client::Error>(())\n```"
        )
    };
}

mod client;
mod forward;
mod hold;
mod lock;
mod multilock;
mod node;
mod redlock;
mod semaphore;

pub use client::Client;
pub use hold::{LockGuard, MultiLockGuard, RedLockGuard, SemaphoreGuard};
pub use lock::{Lock, RwLock};
pub use multilock::MultiLock;
pub use node::Node;
pub use redlock::RedLock;
pub use semaphore::Semaphore;

use std::sync::Arc;

use crate::Result;

/// The runtime a blocking handle or hold runs on (`None` only for a group without members).
type Rt = Option<Arc<tokio::runtime::Runtime>>;

/// The facade's own runtime: 2 worker threads for the connection and the watchdog.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("dlock-client")
        .enable_all()
        .build()
        .map_err(|e| crate::Error::Config(format!("cannot start a runtime: {e}")))
}

/// Run `f` on `rt`, or (no members, so no runtime) right here.
fn block_on<F: std::future::Future>(rt: Option<&Arc<tokio::runtime::Runtime>>, f: F) -> F::Output {
    match rt {
        Some(rt) => rt.block_on(f),
        None => futures::executor::block_on(f),
    }
}
