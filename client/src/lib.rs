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
//! Source layout, in the split the clients share (docs/CLIENTS.md): `client` (the
//! [`Client`]), `config` (builder), `owner`; the locks `lock`, `rwlock`, `semaphore`,
//! `multilock`, `redlock`, `node` (a server of a multi-lock or RedLock, up or down),
//! `waiters` (who waits: `DLOCK.WAITERS`); `hold` (the held handle, [`LockGuard`]) and
//! `holds` (the hold registry and the lost signal); `watchdog`; `backend/` (native, script,
//! Lua texts, unlock-channel subscriber); `topology/` (single node, Sentinel, Cluster: the
//! shared connection, the slot map, the pool of waiting connections); `error`; `blocking`
//! (the blocking API, generated from the async one).

#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(doctest, doc = include_str!("../README.md"))]

mod backend;
pub mod blocking;
mod client;
mod config;
mod error;
mod hold;
mod holds;
mod inflight;
mod kind;
mod lock;
pub mod multilock;
mod node;
mod owner;
mod rebind;
pub mod redlock;
pub mod rwlock;
mod semaphore;
mod shared;
mod topology;
mod waiters;
mod watchdog;

pub use backend::lua as scripts;
pub use client::Client;
pub use config::{Backend, ClientBuilder, Config, Retry, DEFAULT_BIND_GRACE};
pub use error::{ConnectReason, Error, Result};
pub use hold::LockGuard;
pub use holds::{LostReason, LostSignal};
pub use kind::LockKind;
pub use lock::Lock;
pub use multilock::{MultiLock, MultiLockGuard};
pub use node::Node;
pub use owner::Owner;
pub use redlock::{RedLock, RedLockGuard};
pub use rwlock::RwLock;
pub use semaphore::{Semaphore, SemaphoreGuard};
pub use topology::Connection;
pub use waiters::{WaitRequest, Waiter};
