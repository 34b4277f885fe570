//! The client examples of docs/CLIENTS.md, run against a server with the module.
//!
//! Each example under `examples/python/` (redis-py, sync and asyncio) and `examples/node/`
//! (ioredis, node-redis) runs as a child process against its own test server and prints
//! lines this file checks: the fencing tokens, the watchdog's renewals, the bounded wait,
//! and the ghost-grant cases (a bad client setting, then the documented one).
//!
//! `make setup-examples` (a step of `make test`) installs the client libraries: a venv at
//! `examples/python/.venv` and `examples/node/node_modules`. Without them these tests say so
//! and pass, unless `DLOCK_EXAMPLES=required` (which `make test` sets) makes that a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testutil::Server;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// The interpreter and the example's path, or None (with a note) when not installed.
fn interpreter(lang: &str) -> Option<PathBuf> {
    let (program, installed) = match lang {
        "python" => {
            let py = examples_dir().join("python/.venv/bin/python");
            (py.clone(), py.exists())
        }
        _ => (
            PathBuf::from("node"),
            examples_dir().join("node/node_modules/ioredis").exists()
                && Command::new("node")
                    .arg("--version")
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success()),
        ),
    };
    if installed {
        return Some(program);
    }
    let note = format!("{lang} example libraries are not installed: run `make setup-examples`");
    if std::env::var("DLOCK_EXAMPLES").as_deref() == Ok("required") {
        panic!("{note}");
    }
    eprintln!("skipped: {note}");
    None
}

/// Runs `examples/<lang>/<file> <port>` against a fresh server; returns its stdout.
/// Panics with both output streams when it fails or runs over 60 s.
fn run(lang: &str, file: &str) -> Option<String> {
    let program = interpreter(lang)?;
    let srv = Server::start();
    let dir = examples_dir().join(lang);
    // Output goes to files so a hung child cannot block on a full pipe while this loop waits
    // for it.
    let out_dir = tempfile::tempdir().unwrap();
    let out_path = out_dir.path().join("stdout");
    let err_path = out_dir.path().join("stderr");
    let mut child = Command::new(&program)
        .arg(dir.join(file))
        .arg(srv.port().to_string())
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => {}
        Some(s) => panic!("{lang}/{file} exited with {s}\nstdout:\n{stdout}\nstderr:\n{stderr}"),
        None => panic!("{lang}/{file} ran over 60 s\nstdout:\n{stdout}\nstderr:\n{stderr}"),
    }
    println!("{lang}/{file}:\n{stdout}");
    Some(stdout)
}

/// The rest of the line that starts with `prefix`.
fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{out}"))
}

/// The number that follows `label` in `text` (digits and a decimal point).
fn number_after(text: &str, label: &str) -> f64 {
    let rest = &text[text
        .find(label)
        .unwrap_or_else(|| panic!("{label:?} not in {text:?}"))
        + label.len()..];
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label:?} in {text:?}"))
}

/// The tour every client example prints: a fenced grant, renewals keeping the lock past its
/// lease, a bounded wait answered nil, release, then a later grant with a higher token.
fn check_tour(out: &str) {
    let token = number_after(line(out, "acquired "), "token=");
    let held = line(out, "still held after 1.5 leases: ");
    assert!(held.starts_with("yes"), "lock lost during the work: {held}");
    assert!(
        number_after(held, "renewals=") >= 2.0,
        "the watchdog renewed too rarely: {held}"
    );
    assert_eq!(line(out, "contender WAIT 300: "), "nil");
    assert_eq!(line(out, "released="), "1");
    let token2 = number_after(line(out, "contender acquired "), "token=");
    assert!(
        token2 > token,
        "tokens must increase: {token} then {token2}"
    );
    assert_eq!(line(out, "contender released="), "1");
}

/// A late write carrying the older token is refused by the fenced store.
fn check_fenced_store(out: &str) {
    assert!(line(out, "write with token ").ends_with("accepted"));
    assert!(line(out, "late write with token ").ends_with("refused"));
}

/// The server stops answering (CLIENT PAUSE): the watchdog says the lock is lost once the
/// lease (2 s) has run out, not never.
fn check_lost_when_unreachable(out: &str) {
    let lost = line(out, "server unreachable: ");
    assert!(
        lost.starts_with("lost=yes"),
        "the watchdog never signalled: {lost}"
    );
    let secs = number_after(lost, "after ");
    assert!(
        secs < 3.5,
        "signalled by the end of the lease (+ margin): {lost}"
    );
}

#[test]
fn redis_py_sync_tour() {
    let Some(out) = run("python", "lock_sync.py") else {
        return;
    };
    check_tour(&out);
    check_fenced_store(&out);
    check_lost_when_unreachable(&out);
}

#[test]
fn redis_py_asyncio_tour() {
    let Some(out) = run("python", "lock_asyncio.py") else {
        return;
    };
    check_tour(&out);
    assert_eq!(line(&out, "cancelled waiter left the queue: "), "waiters=0");
    check_lost_when_unreachable(&out);
}

#[test]
fn ioredis_tour() {
    let Some(out) = run("node", "ioredis_lock.js") else {
        return;
    };
    check_tour(&out);
    check_fenced_store(&out);
    check_lost_when_unreachable(&out);
}

#[test]
fn node_redis_tour() {
    let Some(out) = run("node", "node_redis_lock.js") else {
        return;
    };
    check_tour(&out);
}

/// The Node package (node/, installed into examples/node from the repository): the
/// fencing tokens, a bounded wait, the hand-over at release and a cancelled wait leaving
/// nothing queued.
#[test]
fn dlock_client_node_tour() {
    let Some(out) = run("node", "dlock_client.mjs") else {
        return;
    };
    assert_eq!(line(&out, "acquired token="), "1");
    assert_eq!(line(&out, "contender within 300 ms: "), "null");
    assert_eq!(line(&out, "released="), "true");
    assert_eq!(line(&out, "contender acquired token="), "2 lost=false");
    assert_eq!(line(&out, "cancelled: "), "AbortError; waiters=0");
    assert_eq!(line(&out, "using: "), "count=1 lost=false");
}

/// redis-py with `socket_timeout` below the WAIT and the default retry: the WAIT is sent
/// again after each time-out and ends in a grant after its own bound. With the documented
/// setting: one send, nil at the bound.
#[test]
fn redis_py_retry_turns_a_bounded_wait_into_a_late_grant() {
    let Some(out) = run("python", "ghost_grant.py") else {
        return;
    };
    let bad = line(&out, "bad: WAIT 1500 answered ");
    assert!(bad.starts_with("1 "), "the retried WAIT was granted: {bad}");
    assert!(
        number_after(bad, "after ") > 1.5,
        "granted after the 1.5 s bound: {bad}"
    );
    assert!(number_after(bad, "sent ") >= 2.0, "re-sent: {bad}");

    let good = line(&out, "good: WAIT 1500 answered ");
    assert!(good.starts_with("nil "), "the WAIT timed out: {good}");
    let secs = number_after(good, "after ");
    assert!((1.45..3.0).contains(&secs), "nil at the bound: {good}");
    assert_eq!(number_after(good, "sent "), 1.0, "sent once: {good}");
}

/// ioredis `commandTimeout` below the WAIT: the caller gives up but the waiter stays queued
/// and the server grants it the lock (the ghost grant); the cleanup releases it. With the
/// documented setting the caller receives the grant itself.
#[test]
fn ioredis_command_timeout_leaves_a_ghost_grant() {
    let Some(out) = run("node", "ghost_grant.js") else {
        return;
    };
    let bad = line(&out, "bad: caller got ");
    assert!(bad.starts_with("error \"Command timed out\""), "{bad}");
    assert!(bad.contains("waiters at 0.7 s=1;"), "still queued: {bad}");
    assert!(
        bad.ends_with("held by: bad"),
        "granted to an owner nobody waits for: {bad}"
    );
    assert_eq!(line(&out, "bad: cleanup DLOCK.RELEASE answered "), "1");

    let good = line(&out, "good: caller got ");
    assert!(good.starts_with("1 "), "the caller got the grant: {good}");
    assert!(good.ends_with("held by: good"), "{good}");
    assert_eq!(line(&out, "good: DLOCK.RELEASE answered "), "1");
}
