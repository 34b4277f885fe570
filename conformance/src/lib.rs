//! The client conformance suite's runner (see `conformance/README.md`): scenarios written
//! once as data, run against real servers through one **driver** process per actor, with
//! the faults applied from outside and a history check over every interval in which a
//! driver reported a hold as held.
//!
//! - [`clock`]: the protocol's clock (`CLOCK_MONOTONIC`, µs);
//! - [`driver`]: a driver process, its requests, replies and events;
//! - [`servers`]: the topologies a scenario names, and the faults applied to them;
//! - [`history`]: the held intervals and their check;
//! - [`run`]: one scenario, step by step, and a whole run's summary.
#![forbid(unsafe_code)]

pub mod clock;
pub mod driver;
pub mod history;
pub mod run;
pub mod servers;

pub use run::{run_files, scenario_files, Options, Summary};
