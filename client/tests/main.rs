//! The client's integration tests, one test binary: a module per file of this folder (one link
//! instead of one per file; a test's name still says its file: `locks::native::acquire_release_reentrant`).
//! Run one file's tests with a filter:
//! `cargo test --release --workspace --test integration -- failover::`.
//! A new file here must be listed below (`every_file_is_a_module` fails otherwise).

#[macro_use]
mod support;

mod blocking;
mod close;
mod cluster;
mod cluster_reshard;
mod config;
mod contract;
mod failover;
mod interop;
mod locks;
mod multi_redlock;
mod nodes_down;
mod owners;
mod rwlock;
mod scale;
mod script_copies;
mod semaphore;
mod waiting;

#[test]
fn every_file_is_a_module() {
    dlock_testutil::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        include_str!("main.rs"),
    );
}
