//! The client conformance suite's runner (see `conformance/README.md`): scenarios written
//! once as data, run against real servers through one **driver** process per actor, with
//! the faults applied from outside and a history check over every interval in which a
//! driver reported a hold as held.
//!
//! - [`clock`]: the protocol's clock (`CLOCK_MONOTONIC`, µs);
//! - [`driver`]: a driver process, its requests, replies and events;
//! - [`servers`]: the topologies a scenario names, and the faults applied to them;
//! - [`history`]: the held intervals and their check;
//! - [`expect`]: a step's expectations;
//! - [`run`]: one scenario, step by step;
//! - [`suite`]: the scenario files and a whole run;
//! - [`summary`]: a run's result and report.
#![forbid(unsafe_code)]

pub mod clock;
pub mod driver;
mod expect;
pub mod history;
pub mod run;
pub mod servers;
pub mod suite;
pub mod summary;

pub use suite::{run_files, scenario_files, Options};
pub use summary::Summary;
