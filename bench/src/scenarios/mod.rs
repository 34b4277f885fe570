//! The five scenarios of issue #6, one file each. Every one runs its backends in turn within
//! each repetition (rotating the order), so drift of the machine hits all backends alike.
//! This file holds what they share: the lease, the rotation, which commands each backend's
//! scripts call and the server's view of a lock cycle.

mod handoff;
mod hot_lock;
mod locker;
mod renewal;
mod uncontended;
mod waiters;

pub use handoff::handoff;
pub use hot_lock::hot_lock;
pub use renewal::renewal;
pub use uncontended::uncontended;
pub use waiters::waiters;

use std::time::Duration;

use crate::stats;
use crate::Backend;

const LEASE: u64 = 30_000;

/// The backends of the contended scenarios (hand-off and hot lock), in their first order.
const CONTENDED: [Backend; 4] = [
    Backend::Native,
    Backend::NativeClient,
    Backend::Lua,
    Backend::SetNx,
];

fn rotate<T: Clone>(v: &[T], r: usize) -> Vec<T> {
    (0..v.len()).map(|i| v[(i + r) % v.len()].clone()).collect()
}

/// Every backend once per repetition, the order rotated each repetition.
fn rounds(backends: &[Backend], reps: usize) -> impl Iterator<Item = Backend> + '_ {
    (0..reps).flat_map(move |r| rotate(backends, r))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Commands the backend's scripts call (counted by Redis in commandstats as well).
fn script_calls(b: Backend) -> &'static [&'static str] {
    match b {
        // Redisson's scripts.
        Backend::Lua => &[
            "exists", "hexists", "hincrby", "pexpire", "pttl", "del", "publish",
        ],
        // Compare-and-delete / compare-and-pexpire: one GET and one DEL or PEXPIRE each.
        Backend::SetNx => &["get", "del", "pexpire"],
        _ => &[],
    }
}

/// Server view of the lock cycles in an interval: (cycles, usec inside the commands).
/// Top-level commands only; the cycle count is the number of releases.
fn server_cycles(b: Backend, v: &stats::ServerView) -> (f64, f64) {
    let (release, top): (f64, &[&str]) = match b {
        Backend::Native | Backend::NativeBind | Backend::NativeClient => (
            v.calls("dlock.release") as f64,
            &["dlock.acquire", "dlock.release"],
        ),
        Backend::Lua => (v.calls("evalsha") as f64 / 2.0, &["evalsha"]),
        Backend::SetNx => (v.calls("evalsha") as f64, &["set", "evalsha"]),
        Backend::Raw => (v.calls("del") as f64, &["hincrby", "pexpire", "del"]),
    };
    (release, top.iter().map(|c| v.usec(c) as f64).sum())
}
