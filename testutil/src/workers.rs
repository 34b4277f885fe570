//! The test binary re-run as worker processes (separate clients, killable like a crashed
//! application), the lines they report to the parent, latency statistics, and the switch
//! between the short (`make test`) and long (`make test-long`) variants.
//!
//! A worker is a normal `#[test]` that does nothing unless its role is set in the environment:
//! ```no_run
//! use std::time::Duration;
//! use dlock_testutil::workers::{is_worker, report, spawn_worker};
//!
//! // a #[test] in the test file:
//! fn crash_worker() {
//!     if !is_worker("crash") { return; }
//!     report("granted", 1);
//! }
//! // in the parent test:
//! let mut w = spawn_worker("crash_worker", "crash", &[("KEY", "k".into())]);
//! w.expect_report("granted", Duration::from_secs(5));
//! ```

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Which worker role a re-executed test binary plays (absent in a normal test run).
pub const ROLE_ENV: &str = "DLOCK_WORKER_ROLE";
/// Marks the lines a worker reports to its parent on stdout: `@@ name value...`.
pub const MARK: &str = "@@ ";

/// `DLOCK_LONG=1` (set by `make test-long`) selects the long variants.
pub fn long() -> bool {
    std::env::var("DLOCK_LONG").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `short` in `make test`, `long` under `DLOCK_LONG=1`.
pub fn scale<T>(short: T, long_value: T) -> T {
    if long() {
        long_value
    } else {
        short
    }
}

/// Whether this process is a worker for `role`; the worker test returns at once otherwise.
pub fn is_worker(role: &str) -> bool {
    std::env::var(ROLE_ENV).as_deref() == Ok(role)
}

/// The environment variable holding the spec of a worker started by [`run_worker_processes`].
const SPEC_ENV: &str = "DLOCK_WORKER_SPEC";

/// The spec this process was started with by [`run_worker_processes`] for `role`; `None` in a
/// normal test run (the worker test then returns at once).
pub fn worker_spec(role: &str) -> Option<String> {
    is_worker(role).then(|| param(SPEC_ENV))
}

/// Runs the test `worker_test` once per spec as worker processes playing `role`, all at
/// once (each reads its spec with [`worker_spec`]), and waits for every one to pass; panics
/// naming the spec of a worker that failed.
#[track_caller]
pub fn run_worker_processes(worker_test: &str, role: &str, specs: &[String]) {
    let workers: Vec<Worker> = specs
        .iter()
        .map(|spec| spawn_worker(worker_test, role, &[(SPEC_ENV, spec.clone())]))
        .collect();
    finish_all(workers, Duration::from_secs(600));
}

/// A required worker parameter.
pub fn param(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker parameter {name} missing"))
}
pub fn param_u64(name: &str) -> u64 {
    param(name)
        .parse()
        .unwrap_or_else(|_| panic!("worker parameter {name} not a number"))
}

/// Reports `name value` to the parent.
pub fn report(name: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARK}{name} {value}").unwrap();
    out.flush().unwrap();
}

/// Wall-clock unix time in ms (fractional). Parent, workers and the server share the clock.
pub fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// The harness's name of the test `name` in the test binary `exe`: `name` itself, or the one
/// test `<module>::name` (a package's integration tests are one binary with a module per file
/// of `tests/`, so callers name a worker test as its file knows it).
fn full_test_name(exe: &Path, name: &str) -> String {
    static LIST: OnceLock<String> = OnceLock::new();
    let list = LIST.get_or_init(|| {
        let out = Command::new(exe)
            .args(["--list", "--format", "terse"])
            .env_remove(ROLE_ENV)
            .output()
            .expect("list the test binary's tests");
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    let suffix = format!("::{name}");
    let found: Vec<&str> = list
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|t| *t == name || t.ends_with(&suffix))
        .collect();
    match found[..] {
        [one] => one.to_string(),
        [] => panic!("no test {name} in {}", exe.display()),
        _ => panic!("worker test {name} is ambiguous: {found:?} (give it a unique name)"),
    }
}

/// A child process running this test binary as a worker: `--exact <test> --nocapture
/// --test-threads 1` with `DLOCK_WORKER_ROLE=<role>` and the given environment.
pub struct Worker {
    pub child: Child,
    lines: Receiver<String>,
    reader: Option<JoinHandle<()>>,
    /// Reports read so far (`@@ name value` lines without the mark).
    pub reports: Vec<String>,
    /// Set once the test harness printed that the one test passed.
    passed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The worker's environment, to name it in a failure.
    env: String,
}

pub fn spawn_worker(test_name: &str, role: &str, env: &[(&str, String)]) -> Worker {
    let exe = std::env::current_exe().expect("current_exe");
    let full_name = full_test_name(&exe, test_name);
    let mut cmd = Command::new(exe);
    cmd.args([&full_name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE_ENV, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn worker process");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let passed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = passed.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("test result: ok. 1 passed") {
                seen.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            // The harness prints `test name ... ` without a newline before the first report.
            if let Some((_, rest)) = line.split_once(MARK) {
                if tx.send(rest.to_string()).is_err() {
                    break;
                }
            }
        }
    });
    Worker {
        child,
        lines: rx,
        reader: Some(reader),
        reports: vec![],
        passed,
        env: format!("{role} {env:?}"),
    }
}

impl Worker {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next report, waiting up to `timeout` (None when the worker ended or timed out).
    pub fn next_report(&mut self, timeout: Duration) -> Option<String> {
        let r = self.lines.recv_timeout(timeout).ok();
        if let Some(l) = &r {
            self.reports.push(l.clone());
        }
        r
    }

    /// The next report named `name` (others are kept in `reports`), or panic after `timeout`.
    #[track_caller]
    pub fn expect_report(&mut self, name: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_report(left) {
                Some(l) => {
                    if let Some(v) = l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')) {
                        return v.to_string();
                    }
                }
                None => panic!("worker sent no {name:?} report within {timeout:?}"),
            }
        }
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the worker to exit successfully within `timeout` (killing it otherwise) and
    /// returns all its reports.
    #[track_caller]
    pub fn finish(mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() > deadline {
                self.kill9();
                panic!(
                    "worker {} ({}) did not finish within {timeout:?}",
                    self.pid(),
                    self.env
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
        while let Ok(l) = self.lines.try_recv() {
            self.reports.push(l);
        }
        assert!(
            status.success(),
            "worker {} ({}) failed ({status}); reports: {:?}",
            self.pid(),
            self.env,
            self.reports
        );
        assert!(
            self.passed.load(std::sync::atomic::Ordering::Relaxed),
            "worker {} ({}) did not run its test",
            self.pid(),
            self.env
        );
        std::mem::take(&mut self.reports)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Finishes every worker (each within `timeout` from now) and returns all their reports.
#[track_caller]
pub fn finish_all(workers: Vec<Worker>, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut all = vec![];
    for w in workers {
        let left = deadline.saturating_duration_since(Instant::now());
        all.extend(w.finish(left.max(Duration::from_millis(1))));
    }
    all
}

/// Sum of the integer reports named `name`.
pub fn sum_reports(reports: &[String], name: &str) -> i64 {
    values(reports, name)
        .map(|v| v.parse::<i64>().expect("integer report"))
        .sum()
}

/// The values of the reports named `name`.
pub fn values<'a>(reports: &'a [String], name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    reports.iter().filter_map(move |l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(' '))
            .map(|v| v.trim())
    })
}

/// Latency statistics in ms.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn stats(samples: &[f64]) -> Stats {
    if samples.is_empty() {
        return Stats::default();
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| s[(((s.len() - 1) as f64) * q).round() as usize];
    Stats {
        n: s.len(),
        p50: at(0.50),
        p99: at(0.99),
        max: *s.last().unwrap(),
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} p50={:.2}ms p99={:.2}ms max={:.2}ms",
            self.n, self.p50, self.p99, self.max
        )
    }
}
