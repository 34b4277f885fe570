//! Every conformance scenario with the Rust client's driver (`driver_rust`), against real
//! servers: standalone and Sentinel and a 3-master cluster on the native backend, a server
//! without the module on the script backend. Prints the run's summary line.

use std::io::Write;
use std::path::PathBuf;

use dlock_conformance::{run_files, scenario_files, Options};

#[test]
fn the_rust_client_passes_every_scenario() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let files = scenario_files(&[dir]).expect("scenarios");
    let opts = Options {
        driver: env!("CARGO_BIN_EXE_driver_rust").to_string(),
        client: "rust".into(),
        only: std::env::var("CONFORMANCE_ONLY").ok(),
        // Two at a time, as the other clients' runs in `make test` (see conformance/README.md).
        jobs: 2,
    };
    let summary = run_files(&opts, &files);
    // Straight to the terminal: the test harness captures `print!`, and `make test` is where
    // the per-client figures are read.
    let _ = std::io::stderr().write_all(summary.report().as_bytes());
    assert_eq!(summary.failed, 0, "{}", summary.report());
    if opts.only.is_none() {
        assert!(summary.passed >= 50, "{}", summary.report());
    }
}
