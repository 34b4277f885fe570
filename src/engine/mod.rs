//! The engine: everything between a command's parsed request and Redis's key API. What each
//! file does, and the order in which they may use each other, is the layer list in
//! `src/lib.rs` (the one statement of the rule; `tests/layering.rs` checks it).
//!
//! Lock order: REGISTRY before the watched set in `wake`, never the reverse; nothing called
//! while the registry is held takes it again (keyspace events only touch the watched set).

pub mod acquire;
pub mod bind;
pub mod blocked;
pub mod deadlock;
pub mod delay;
pub mod delay_keys;
pub mod fire;
pub mod held;
pub mod job;
pub mod listen;
pub mod queue;
pub mod redisson;
pub mod redisson_keys;
pub mod redisson_rwlock;
mod registry;
pub mod scripts;
pub mod store;
pub mod unlock;
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
    held::free();
    delay_keys::free_all();
    unlock::free_all();
    scripts::free_all();
}
