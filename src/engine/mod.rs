//! The engine: everything between a command's parsed request and Redis's key API.
//!
//! - `bind`: holds bound to a connection (BIND), cut when it closes;
//! - `delay`: LOCKDELAY's companion key, loaded and saved with the lock;
//! - `deadlock`: the cycle a WAIT request would close, found before it queues;
//! - `queue`: the waiter queues (plain data, unit-tested without a server);
//! - `work`: the unit of work every writing command and every wake-up goes through: open the
//!   lock, serve its queue, apply the step, save, re-arm the lease timer;
//! - `store`: lock keys and fencing counters as Redis holds them, written and propagated;
//! - `wake`: what wakes a queue besides a command: timers (the 5 ms poll of queued keys
//!   among them), the keys marked by events, clients leaving.
//!
//! Lock order: REGISTRY before the dirty set in `wake`, never the reverse; nothing called
//! while the registry is held takes it again (keyspace events only touch the dirty set).

pub mod bind;
pub mod deadlock;
pub mod delay;
pub mod queue;
pub mod store;
pub mod wake;
pub mod work;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use queue::Registry;

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// Number of queued clients, readable without the registry lock (event fast path, INFO).
static WAITING: AtomicUsize = AtomicUsize::new(0);

pub fn waiting() -> usize {
    WAITING.load(Ordering::Relaxed)
}

/// The registry, locked. Dereferences to [`Registry`]; stores the waiter count on drop.
pub struct RegistryGuard(MutexGuard<'static, Option<Registry>>);

impl std::ops::Deref for RegistryGuard {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        self.0.as_ref().expect("set in registry()")
    }
}
impl std::ops::DerefMut for RegistryGuard {
    fn deref_mut(&mut self) -> &mut Registry {
        self.0.as_mut().expect("set in registry()")
    }
}
impl Drop for RegistryGuard {
    fn drop(&mut self) {
        let n = self.0.as_ref().map_or(0, Registry::len);
        WAITING.store(n, Ordering::Relaxed);
    }
}

/// The waiter registry (created on first use).
pub fn registry() -> RegistryGuard {
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    guard.get_or_insert_with(Registry::default);
    RegistryGuard(guard)
}

/// MODULE UNLOAD: frees the registry and the dirty set (Redis refuses to unload while a
/// client is blocked or a timer is armed, so both are empty of work by then).
pub fn free_all() {
    *REGISTRY.lock().unwrap_or_else(|e| e.into_inner()) = None;
    WAITING.store(0, Ordering::Relaxed);
    wake::free_all();
    bind::free_all();
}
