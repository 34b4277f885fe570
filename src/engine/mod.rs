//! The engine: everything between a command's parsed request and Redis's key API. Its
//! files in layers, each using only those below it (and `ffi`, `stats`, `dlock-core`):
//!
//! 1. plain data and bookkeeping, no unit of work:
//!    - `job`: why each engine timer was armed (plain data; `fire` runs them);
//!    - `request`: what a request for a hold asks (plain data; a waiter keeps it as it came);
//!    - `queue`: one key's waiter queue and its waiters (plain data), and `registry`, the
//!      module's one registry of the queues with its client and owner indexes (plain data,
//!      unit-tested without a server), behind its lock;
//!    - `delay`: LOCKDELAY's companion key, loaded and saved with the lock, and
//!      `delay_keys`, where such keys may exist at all;
//!    - `held`: the lock keys granted here and not yet gone (an expiry of one counts);
//!    - `store`: lock keys and fencing counters as Redis holds them, written and propagated;
//!    - `wake`: the keys that have a queue, those marked by events, the poll timer;
//!    - `bind`: holds bound to a connection (BIND), and the lease cuts due when one closes;
//! 2. `depart`: waiters leaving their queue (timers stopped, key unwatched), granted, timed
//!    out or gone on their own (`DepartingClients`);
//!    `deadlock`: the cycle a WAIT request would close, found before it queues;
//! 3. `work`: the unit of work every writing command and every wake-up goes through
//!    (`unit_of_work`: open the lock, serve its queue, apply the step, save, re-arm the lease
//!    timer), and the one grant step (`try_grant`);
//! 4. `fire`: what each timer does when it fires, through the unit of work;
//!    `acquire`: the wait policy of a request for a hold (granted now, queued, or not).
//!
//! Lock order: REGISTRY before the watched set in `wake`, never the reverse; nothing called
//! while the registry is held takes it again (keyspace events only touch the watched set).

pub mod acquire;
pub mod bind;
pub mod deadlock;
pub mod delay;
pub mod delay_keys;
pub mod depart;
pub mod fire;
pub mod held;
pub mod job;
pub mod queue;
mod registry;
pub mod request;
pub mod store;
pub mod wake;
pub mod work;

pub use registry::{registry, waiting};

/// MODULE UNLOAD: frees the registry and the watched set (Redis refuses to unload while a
/// client is blocked or a timer is armed, so both are empty of work by then).
pub fn free_all() {
    registry::free();
    wake::free_all();
    bind::free_all();
    held::free();
    delay_keys::free_all();
}
