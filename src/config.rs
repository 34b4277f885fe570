//! The configuration in force, set once per load from the module arguments
//! (parsed by `dlock_core::config`).

use std::sync::{Arc, RwLock};

pub use dlock_core::config::{Config, Redisson};

/// `None` until loaded and after MODULE UNLOAD.
static CONFIG: RwLock<Option<Arc<Config>>> = RwLock::new(None);

pub fn set(c: Config) {
    *CONFIG.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(c));
}

/// The configuration in force (a shared handle: no copy on the hot path).
pub fn get() -> Arc<Config> {
    let cfg = CONFIG.read().unwrap_or_else(|e| e.into_inner());
    cfg.clone().unwrap_or_default()
}

/// MODULE UNLOAD: frees the configuration.
pub fn free() {
    *CONFIG.write().unwrap_or_else(|e| e.into_inner()) = None;
}
