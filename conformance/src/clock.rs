//! The one clock of the protocol: `CLOCK_MONOTONIC` in microseconds, the same for every
//! process on the machine, so the runner can compare the times drivers report.

use rustix::time::{clock_gettime, ClockId};

/// Now, in µs of `CLOCK_MONOTONIC`.
pub fn now_us() -> i64 {
    let t = clock_gettime(ClockId::Monotonic);
    t.tv_sec * 1_000_000 + t.tv_nsec / 1000
}
