//! The one test harness: throw-away `redis-server` processes and the topologies built from
//! them, for the integration tests, the client tests and the benchmarks.
//!
//! Every process runs on a free loopback port (never 6379) in its own temporary directory
//! and is killed by PID when dropped, so a failing test still cleans up.
//!
//! - [`server`]: one server ([`ServerBuilder`], [`Server`]);
//! - [`replication`]: a primary with replicas ([`ReplicaSet`]), waits for sync;
//! - [`sentinel`]: Sentinels monitoring a primary ([`Sentinels`]);
//! - [`cluster`]: a Redis Cluster with its slots assigned ([`Cluster`]), slot migrations;
//! - [`info`]: `INFO` fields; [`keys`]: reading a key's state (hash, TTL); [`state`]: what
//!   the module shows (`DLOCK.INFO` fields, `INFO dlock` counters, who holds a key);
//! - [`redisson`]: Redisson's lock scripts as captured from its jars (`make redisson-scripts`);
//! - [`workers`]: the test binary re-run as worker processes, latency statistics and the
//!   long-variant switch (`DLOCK_LONG`);
//! - [`wait_for`]: poll a state until it holds (never a bare sleep);
//! - [`assert_every_file_is_a_module`]: each package's `tests/` is one binary, `tests/main.rs`.
//!
//! Environment:
//! - `REDIS_SERVER`: the server binary (default `redis-server`; `make test-matrix` runs the
//!   suite once per server of the matrix). `version` tells tests which server it is.
//! - `DLOCK_MODULE`: path of the module (default `<workspace>/target/release/libdlock.so`,
//!   which `make test` builds first; [`module_path`] refuses that one when it is older than
//!   its sources).
#![forbid(unsafe_code)]

pub mod cluster;
pub mod info;
pub mod keys;
mod module_build;
pub mod redisson;
pub mod replication;
pub mod sentinel;
pub mod server;
pub mod state;
mod test_crate;
mod version;
pub mod workers;

pub use cluster::Cluster;
pub use info::{info_field, info_int, info_section, used_memory};
pub use keys::{hgetall, pttl};
pub use module_build::module_path;
pub use replication::{assert_mirrored, sync_replicas, wait_replica_synced, ReplicaSet};
pub use sentinel::Sentinels;
pub use server::{free_port, server_binary, Server, ServerBuilder};
pub use state::{dlock_info_int, leases_cut, servers_holding, waiters};
pub use test_crate::assert_every_file_is_a_module;
pub use version::{server_version, skip, valkey9_binary, Flavor, ServerVersion};

use std::time::{Duration, Instant};

/// How late a test may see an event that the module or the client times to the millisecond
/// (a hand-off when a lease ends, a WAIT time-out, a lost-lease signal). They are punctual on
/// an idle machine (figures in the tests' output), but with two test suites on two cores a
/// process can wait hundreds of ms for a core (267 ms seen). Still far below the seconds after
/// which a missing hand-off shows (a WAIT time-out, or none at all). "Not before" bounds
/// need no slack: they are exact.
pub const LATENESS_BOUND: Duration = Duration::from_secs(1);

/// Poll `f` every 5 ms until it returns `Some`, or panic after `timeout` with `what`.
/// For states the server reaches on its own (a replica catching up, a lease running out);
/// where a reply can be awaited, await the reply instead.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
