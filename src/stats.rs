//! Counters for the `INFO dlock` section.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Stats {
    /// Fresh grants (hold count 0 -> 1), direct or handed to a waiter.
    pub grants: AtomicU64,
    /// Reentrant grants (hold count n -> n+1).
    pub reentrant_grants: AtomicU64,
    /// Successful releases (reply 0 or 1).
    pub releases: AtomicU64,
    /// Successful renewals (reply 1).
    pub renewals: AtomicU64,
    /// Grants made by the server to a queued waiter.
    pub handoffs: AtomicU64,
    /// WAIT requests that ended with a time-out.
    pub wait_timeouts: AtomicU64,
    /// Leases that ran out while held: exclusive locks that expired with waiters queued, and
    /// read-write holders whose own lease lapsed.
    pub leases_expired: AtomicU64,
    /// Error replies.
    pub errors: AtomicU64,
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

lazy_static::lazy_static! {
    pub static ref STATS: Stats = Stats::default();
}
