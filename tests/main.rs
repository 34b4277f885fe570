//! The module's integration tests, one test binary: a module per file of this folder (one link
//! instead of one per file; a test's name still says its file: `bind::a_closed_connection_cuts_the_lease_to_the_grace`).
//! Run one file's tests with a filter: `cargo test --release --workspace --test integration -- bind::`.
//! A new file here must be listed below (`every_file_is_a_module` fails otherwise).

mod common;

mod acl_cluster;
mod bind;
mod channel;
mod cluster_reshard;
mod cluster_reshard_load;
mod command_metadata;
mod deadlocks;
mod doc_examples;
mod doc_excerpts;
mod errors;
mod eviction;
mod examples;
mod exclusive;
mod fencing_slots;
mod interop;
mod layering;
mod lock_delay;
mod make_targets;
mod monitoring;
mod production_conf;
mod propagation;
mod redisson_native;
mod redisson_rwlock;
mod reliability_acl;
mod reliability_crash;
mod reliability_exclusion;
mod reliability_failover;
mod reliability_model;
mod reliability_module_load;
mod reliability_parsers;
mod reliability_restart;
mod reliability_waiters;
mod replica_async_load;
mod replication;
mod rwlock;
mod semaphore;
mod stress;
mod wait_times;
mod waiters_view;
mod waiting;
mod wake_many_keys;
mod watch_and_notifications;

#[test]
fn every_file_is_a_module() {
    dlock_testutil::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        include_str!("main.rs"),
    );
}
