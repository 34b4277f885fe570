//! The engine: everything between a command's parsed request and Redis's key API. Its
//! files in layers, each using only those below it (and `ffi`, `stats`, `dlock-core`):
//!
//! 1. plain data and bookkeeping, no unit of work:
//!    - `job`: why each engine timer was armed (plain data; `fire` runs them);
//!    - `queue`: the waiter queues (plain data, unit-tested without a server), and `registry`,
//!      the module's one registry of them behind its lock;
//!    - `delay`: LOCKDELAY's companion key, loaded and saved with the lock, and
//!      `delay_keys`, where such keys may exist at all;
//!    - `store`: lock keys and fencing counters as Redis holds them, written and propagated;
//!    - `wake`: the keys that have a queue, those marked by events, the poll timer;
//!    - `bind`: holds bound to a connection (BIND), and the lease cuts due when one closes;
//!    - `listen`: what the module subscribes to on each server version and when (the first
//!      queued key starts, the last one stops), and the handlers of those events;
//! 2. `depart`: waiters leaving their queue (timers stopped, key unwatched), granted, timed
//!    out or gone on their own (`DepartingClients`);
//!    `deadlock`: the cycle a WAIT request would close, found before it queues;
//! 3. `work`: the unit of work every writing command and every wake-up goes through
//!    (`unit_of_work`: open the lock, serve its queue, apply the step, save, re-arm the lease
//!    timer), and the one grant step (`try_grant`);
//! 4. `fire`: what each timer does when it fires, through the unit of work.
//!
//! Lock order: REGISTRY before the watched set in `wake`, never the reverse; nothing called
//! while the registry is held takes it again (keyspace events only touch the watched set).

pub mod bind;
pub mod deadlock;
pub mod delay;
pub mod delay_keys;
pub mod depart;
pub mod fire;
pub mod job;
pub mod listen;
pub mod queue;
mod registry;
pub mod store;
pub mod wake;
pub mod work;

pub use registry::registry;

/// MODULE UNLOAD: frees the registry and the watched set (Redis refuses to unload while a
/// client is blocked or a timer is armed, so both are empty of work by then).
pub fn free_all() {
    registry::free();
    wake::free_all();
    listen::free_all();
    bind::free_all();
    delay_keys::free_all();
}
