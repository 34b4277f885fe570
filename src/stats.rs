//! Counters for the `INFO dlock` section: the engine reports to them, they keep nothing else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

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
    /// Leases that ran out while held: lock keys granted by dlock that Redis expired, and
    /// read-write and semaphore holders whose own lease lapsed.
    pub leases_expired: AtomicU64,
    /// Holds whose lease was cut because the connection they were bound to (BIND) closed.
    pub leases_cut: AtomicU64,
    /// Lock-delays begun: LOCKDELAY holds that ended without RELEASE.
    pub lock_delays: AtomicU64,
    /// WAIT requests answered `DEADLOCK ...`.
    pub deadlocks: AtomicU64,
    /// Clients queued now (a gauge, kept by the engine's registry; read without its lock by
    /// the event fast path).
    pub waiters: AtomicU64,
    /// Error replies.
    pub errors: AtomicU64,
    /// Waiters answered with a redirect (ASK/MOVED/CLUSTERDOWN/TRYAGAIN): their key left
    /// this cluster node.
    pub cluster_redirects: AtomicU64,
    /// Unlock messages held back because the server had no subscriber (`publish auto`).
    pub unlock_messages_held_back: AtomicU64,
    /// Of those, the ones sent late because a subscriber had come meanwhile.
    pub unlock_messages_sent_late: AtomicU64,
    /// Redisson lock scripts (`EVAL`/`EVALSHA`) served natively.
    pub redisson_served: AtomicU64,
    /// Redisson lock scripts recognised but run as Lua (serving off for an ACL user, a call
    /// or a key state the native path leaves to the script).
    pub redisson_lua: AtomicU64,
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
    pub fn set(gauge: &AtomicU64, n: u64) {
        gauge.store(n, Ordering::Relaxed);
    }
}

lazy_static::lazy_static! {
    pub static ref STATS: Stats = Stats::default();
}

/// How long waiters that were granted had waited, in microseconds, since the module was
/// loaded: the `dlock_wait_*_us` fields of `INFO dlock`. Recorded only when the queue grants
/// (never on a direct grant), so the fast path does not pay for it.
struct WaitTimes {
    /// Three significant digits; grows as longer waits are seen (`WAIT 0` has no bound).
    hist: Histogram<u64>,
    /// The longest wait exactly (the histogram rounds to its precision).
    max_us: u64,
}

/// `None` until the first wait and after MODULE UNLOAD.
static WAIT_TIMES: Mutex<Option<WaitTimes>> = Mutex::new(None);

fn wait_times() -> std::sync::MutexGuard<'static, Option<WaitTimes>> {
    WAIT_TIMES.lock().unwrap_or_else(|e| e.into_inner())
}

/// A waiter was granted after waiting `waited`.
pub fn record_wait(waited: Duration) {
    let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX).max(1);
    let mut w = wait_times();
    let w = w.get_or_insert_with(|| WaitTimes {
        hist: Histogram::new(3).expect("3 significant digits is a valid precision"),
        max_us: 0,
    });
    // `record` grows the histogram (it only fails beyond i64::MAX µs); `saturating_record`
    // would clamp to its current size instead.
    if w.hist.record(us).is_err() {
        w.hist.saturating_record(us);
    }
    w.max_us = w.max_us.max(us);
}

/// `(p50, p99, p999, max)` of the recorded waits in microseconds; zeros before the first.
pub fn wait_percentiles() -> (u64, u64, u64, u64) {
    let w = wait_times();
    let Some(w) = w.as_ref().filter(|w| !w.hist.is_empty()) else {
        return (0, 0, 0, 0);
    };
    let q = |p: f64| w.hist.value_at_quantile(p).min(w.max_us);
    (q(0.50), q(0.99), q(0.999), w.max_us)
}

/// MODULE UNLOAD: frees the wait times.
pub fn free_all() {
    *wait_times() = None;
}

/// The `INFO dlock` section; Redis prefixes each field with the module name (`dlock_grants`).
pub struct Info;

impl crate::ffi::info::InfoSection for Info {
    fn fields() -> Vec<(&'static str, u64)> {
        let (p50, p99, p999, max) = wait_percentiles();
        vec![
            ("grants", Stats::get(&STATS.grants)),
            ("reentrant_grants", Stats::get(&STATS.reentrant_grants)),
            ("releases", Stats::get(&STATS.releases)),
            ("renewals", Stats::get(&STATS.renewals)),
            ("handoffs", Stats::get(&STATS.handoffs)),
            ("waiters", Stats::get(&STATS.waiters)),
            ("wait_timeouts", Stats::get(&STATS.wait_timeouts)),
            ("leases_expired", Stats::get(&STATS.leases_expired)),
            ("leases_cut", Stats::get(&STATS.leases_cut)),
            ("lock_delays", Stats::get(&STATS.lock_delays)),
            ("deadlocks", Stats::get(&STATS.deadlocks)),
            ("errors", Stats::get(&STATS.errors)),
            ("cluster_redirects", Stats::get(&STATS.cluster_redirects)),
            (
                "unlock_messages_held_back",
                Stats::get(&STATS.unlock_messages_held_back),
            ),
            (
                "unlock_messages_sent_late",
                Stats::get(&STATS.unlock_messages_sent_late),
            ),
            ("redisson_served", Stats::get(&STATS.redisson_served)),
            ("redisson_lua", Stats::get(&STATS.redisson_lua)),
            ("wait_p50_us", p50),
            ("wait_p99_us", p99),
            ("wait_p999_us", p999),
            ("wait_max_us", max),
        ]
    }
}
