//! dlock's rules without Redis, shared by the module (`dlock`), the client (`dlock-client`),
//! the fuzz target and the tests, so that no rule is written twice.
//!
//! - [`args`]: the one parser of command arguments (argv -> typed requests), checked before
//!   any key is looked at.
//! - [`config`]: the module arguments (`loadmodule libdlock.so [name value ...]`).
//! - [`deadlock`]: deadlock detection's search over a snapshot of who waits for whom.
//! - [`delay`]: LOCKDELAY's companion hash and what it means for the lock.
//! - [`error`]: every error reply and its text.
//! - [`limits`]: the limits on arguments, which the parser checks and the error texts name.
//! - [`model`]: the lock kinds and their hash layouts (Redisson's `owner -> count` for the
//!   exclusive lock; `mode`, `read:`, `write:`, `lease:` fields for the read-write lock;
//!   `mode`, `capacity`, `permits:`, `lease:` for the semaphore).
//! - [`rules`]: the grant rules of docs/COMMANDS.md as pure functions over a decoded lock.
//! - [`serve`]: one request's turn at a lock (lock-delay, grant rules, fencing token) and
//!   whom a key's queue serves, in which order.
//! - [`terms`]: the terms of a hold (who, which hold, lease, FENCE, BIND, LOCKDELAY): what
//!   the parser produces, the grant rules read and a waiter keeps.
//! - [`waits`]: who a waiting request waits for (the edges deadlock detection walks).
//! - [`names`]: the fencing counter's key, Redisson's unlock channel, CRC16 and key slots.
//! - [`number`]: the one decimal-integer parser (hash fields as Redis writes them, arguments).
//! - [`redisson`]: Redisson's lock scripts served natively: their digests, arguments and
//!   answers; [`redisson_rwlock`]: the same for `RReadWriteLock`'s; [`redisson_terms`]: what
//!   both share (the publish forms, the argument parsers, the states of the keys).

#![forbid(unsafe_code)]

pub mod args;
pub mod config;
pub mod deadlock;
pub mod delay;
pub mod error;
pub mod limits;
pub mod model;
pub mod names;
pub mod number;
pub mod redisson;
pub mod redisson_rwlock;
pub mod redisson_terms;
pub mod rules;
pub mod serve;
pub mod terms;
pub mod waits;
