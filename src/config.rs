//! The configuration in force, set once per load from the module arguments
//! (parsed by `dlock_core::config`).

use std::sync::{Arc, RwLock};

pub use dlock_core::config::Config;

lazy_static::lazy_static! {
    static ref CONFIG: RwLock<Arc<Config>> = RwLock::new(Arc::new(Config::default()));
}

pub fn set(c: Config) {
    *CONFIG.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
}

/// The configuration in force (a shared handle: no copy on the hot path).
pub fn get() -> Arc<Config> {
    CONFIG.read().unwrap_or_else(|e| e.into_inner()).clone()
}
