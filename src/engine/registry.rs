//! The module's one waiter registry (`queue::Registry`) behind its lock, and the number of
//! queued clients, readable without it.

use std::sync::{Mutex, MutexGuard};

use super::queue::Registry;

use crate::stats::{Stats, STATS};

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// Number of queued clients, readable without the registry lock (event fast path, INFO):
/// the registry keeps it in `STATS.waiters`.
pub fn waiting() -> usize {
    Stats::get(&STATS.waiters) as usize
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
        Stats::set(&STATS.waiters, n as u64);
    }
}

/// The waiter registry (created on first use).
pub fn registry() -> RegistryGuard {
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    guard.get_or_insert_with(Registry::default);
    RegistryGuard(guard)
}

/// MODULE UNLOAD.
pub(super) fn free() {
    *REGISTRY.lock().unwrap_or_else(|e| e.into_inner()) = None;
    Stats::set(&STATS.waiters, 0);
}
