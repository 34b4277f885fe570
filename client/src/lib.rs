//! # dlock-client
//!
//! Redisson-style distributed locks on Redis, with a watchdog that keeps held locks alive
//! and tells you when one is lost.
//!
//! Two backends speak the same data layout (a hash `owner -> hold count` with a lease):
//! - **native**: the `DLOCK.*` commands of the dlock Redis module (server-side FIFO waiting,
//!   fencing tokens);
//! - **script**: plain Redis, with Lua scripts copied from Redisson's `RLock`
//!   (see [`scripts`]); waiters subscribe to the unlock channel and retry.
//!
//! The backend is picked by asking the server for a `DLOCK.*` command unless you choose
//! one ([`Backend`]).
//!
//! ```no_run
//! # async fn demo() -> dlock_client::Result<()> {
//! use std::time::Duration;
//! let client = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
//! let lock = client.lock("orders:42");
//! let guard = lock.acquire().await?;          // waits; the watchdog renews the lease
//! let lost = guard.lost();                    // resolves if the lock is lost
//! tokio::select! {
//!     _ = tokio::time::sleep(Duration::from_secs(1)) => { /* critical section */ }
//!     reason = lost => eprintln!("lock lost: {reason:?}"),
//! }
//! guard.release().await?;                     // Err(Error::NotHeld) if it was lost
//! # Ok(()) }
//! ```
//!
//! **Cancel safety.** Every async method says whether it is cancel-safe, as tokio does.
//! In short: dropping a pending acquire never leaves a hold behind (a late grant is
//! released again in the background); queries are read-only.
//!
//! For threads without async, see [`blocking`].
//!
//! Source layout: `config` (builder), `owner`, `client`, `conn/` (shared connection,
//! Sentinel, cluster slot map, pool of waiting connections), `backend/` (native, script,
//! Lua texts, unlock-channel subscriber), `lock`, `guard`, `lease` (registry, lost signal),
//! `watchdog`, `rwlock`, `semaphore`, `waiters` (who waits: `DLOCK.WAITERS`), `node` (a
//! server of a multi-lock or RedLock, up or down), `multilock`, `redlock`, `blocking`.

#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(doctest, doc = include_str!("../README.md"))]

mod backend;
pub mod blocking;
mod client;
mod config;
mod conn;
mod error;
mod guard;
mod inflight;
mod kind;
mod lease;
mod lock;
pub mod multilock;
mod node;
mod owner;
mod rebind;
pub mod redlock;
pub mod rwlock;
mod semaphore;
mod shared;
mod waiters;
mod watchdog;

pub use backend::lua as scripts;
pub use client::Client;
pub use config::{Backend, ClientBuilder, Config, Retry, DEFAULT_BIND_GRACE};
pub use conn::Connection;
pub use error::{ConnectReason, Error, Result};
pub use guard::LockGuard;
pub use kind::LockKind;
pub use lease::{LostReason, LostSignal};
pub use lock::Lock;
pub use multilock::{MultiLock, MultiLockGuard};
pub use node::Node;
pub use owner::Owner;
pub use redlock::{RedLock, RedLockGuard};
pub use rwlock::RwLock;
pub use semaphore::{Semaphore, SemaphoreGuard};
pub use waiters::{WaitRequest, Waiter};
