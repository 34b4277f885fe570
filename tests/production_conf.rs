//! The two shipped configurations and the fencing promise: with `redis-production.conf`'s
//! settings fencing tokens keep increasing across a restart (SHUTDOWN, and SIGKILL once the
//! AOF is written; with `appendfsync always` SIGKILL right after the reply); with `redis.conf`
//! (the quick start `make run` uses) they start again at 1, as its header says.
//!
//! The files' own lines are used, read from the repository: everything except the network and
//! path lines the test harness sets itself (`port`, `bind`, `dir`, and the module path).

use crate::common;

use std::time::Duration;

use common::*;
use dlock_testutil::{free_port, info_section, ServerBuilder};

/// Server options and module arguments from a shipped configuration file.
fn settings(file: &str) -> (Vec<String>, Vec<String>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let (mut args, mut module_args) = (vec![], vec![]);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap();
        match name {
            "port" | "bind" | "dir" | "daemonize" => {}
            // Its first word is the module path: the harness loads the built module.
            "loadmodule" => module_args.extend(words.skip(1).map(String::from)),
            _ => {
                args.push(format!("--{name}"));
                args.extend(words.map(|w| w.trim_matches('"').to_string()));
            }
        }
    }
    (args, module_args)
}

fn server(file: &str, dir: &std::path::Path, port: u16) -> ServerBuilder {
    let (args, module_args) = settings(file);
    Server::builder()
        .dir(dir)
        .port(port)
        .args(args)
        .module_args(module_args)
}

fn fenced_acquire(c: &mut Connection, key: &str, owner: &str) -> i64 {
    match cmd(c, &["DLOCK.ACQUIRE", key, owner, "60000", "FENCE"]) {
        Reply::Arr(a) if a[0] == Reply::Int(1) => a[1].int(),
        other => panic!("fenced acquire of {key}: {other:?}"),
    }
}

/// How the server goes down between the tokens.
enum Stop {
    /// `SHUTDOWN NOSAVE`: Redis writes and fsyncs the AOF on its way out.
    Shutdown,
    /// SIGKILL right after the last reply.
    Kill,
    /// SIGKILL once `INFO persistence` shows the AOF buffer handed to the OS
    /// (`aof_buffer_length:0`). With `appendfsync everysec` Redis may hold that buffer back
    /// for up to 2 s while a slow background fsync runs (`aof_delayed_fsync`), still replying:
    /// a kill in that window loses the last writes, as redis-production.conf says.
    KillOnceWritten,
}

/// Hands out a few tokens, stops the server, starts it again on the same directory and
/// returns (last token before, first token after).
fn tokens_around_restart(file: &str, extra: &[&str], stop: Stop) -> (i64, i64) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let start = || {
        server(file, dir.path(), port)
            .args(extra.iter().copied())
            .start()
    };
    let mut srv = start();
    let mut c = srv.connection();
    let mut last = 0;
    for i in 0..5 {
        let owner = format!("w{i}");
        last = fenced_acquire(&mut c, "conf:orders", &owner);
        assert_eq!(release(&mut c, "conf:orders", &owner), Reply::Int(1));
    }
    match stop {
        Stop::Shutdown => srv.shutdown(),
        Stop::Kill => srv.kill(),
        Stop::KillOnceWritten => {
            wait_for(Duration::from_secs(10), "the AOF buffer written", || {
                (info_section(&mut c, "persistence").get("aof_buffer_length") == Some(&0))
                    .then_some(())
            });
            srv.kill();
        }
    }
    drop(srv);
    let srv = start();
    let mut c = srv.connection();
    (last, fenced_acquire(&mut c, "conf:orders", "after"))
}

#[test]
fn production_conf_keeps_tokens_increasing_across_shutdown() {
    let (before, after) = tokens_around_restart("redis-production.conf", &[], Stop::Shutdown);
    assert_eq!(before, 5);
    assert!(
        after > before,
        "token {after} after a restart, {before} before"
    );
}

#[test]
fn production_conf_keeps_tokens_increasing_across_sigkill_once_written() {
    let (before, after) =
        tokens_around_restart("redis-production.conf", &[], Stop::KillOnceWritten);
    assert_eq!(before, 5);
    assert!(
        after > before,
        "token {after} after a crash, {before} before"
    );
}

/// `appendfsync always`, the choice the file names for resources that cannot tolerate a
/// repeated token: every write is on disk before its reply, so even a kill right after the
/// last reply loses nothing.
#[test]
fn appendfsync_always_keeps_tokens_increasing_across_immediate_sigkill() {
    let (before, after) = tokens_around_restart(
        "redis-production.conf",
        &["--appendfsync", "always"],
        Stop::Kill,
    );
    assert_eq!(before, 5);
    assert!(
        after > before,
        "token {after} after a crash, {before} before"
    );
}

#[test]
fn quick_start_conf_restarts_tokens_at_one() {
    let (before, after) = tokens_around_restart("redis.conf", &[], Stop::Shutdown);
    assert_eq!((before, after), (5, 1), "redis.conf persists nothing");
}

#[test]
fn production_conf_never_evicts_locks() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server("redis-production.conf", dir.path(), free_port()).start();
    let mut c = srv.connection();
    let policy: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query(&mut c)
        .unwrap();
    assert_eq!(policy[1], "noeviction");
    let aof: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query(&mut c)
        .unwrap();
    assert_eq!(aof[1], "yes");
}
