//! `make bench`: dlock's native commands against the Lua way, side by side, in one run.
//!
//! Two throw-away servers on free loopback ports: one with the dlock module (the `native`
//! backends) and a plain one (what a Redisson user runs: `lua`, `setnx`, `raw`). Every
//! scenario runs each backend in turn, several repetitions, interleaved; tables show the
//! median and the (min–max) of the repetitions, ratios are of the medians.
//!
//! Backends:
//! - `native`: `DLOCK.*`, waiting with `WAIT` (one command per grant), over a bare RESP
//!   connection;
//! - `native-client`: the same through `dlock-client` (native backend);
//! - `lua`: Redisson's scripts (`dlock_client::scripts`); the waiting scenarios run the
//!   client's script backend (SUBSCRIBE to the unlock channel + retry), one client per
//!   worker, as separate processes would;
//! - `setnx`: `SET NX PX`, release by a compare-and-delete script, waiting by retry + 1 ms sleep;
//! - `raw`: HINCRBY + PEXPIRE, then DEL: the same data writes with no logic (a ceiling).
//!
//! The `semaphore` scenario (16 workers, 4 permits) sets `DLOCK.SEMAPHORE` against an
//! emulation of redis-semaphore's polling algorithm, both on the module's server.
//!
//! A full run writes its section for docs/BENCHMARKS.md to `target/bench/section.md`;
//! `--publish` (`make bench-docs`) copies that section into the document without running anything.
//! Options: `--quick` (fewer, shorter repetitions), `--no-write` (no section file), `--only <scenario>` (uncontended, hot, handoff, renew, waiters, client-cpu,
//! semaphore; repeatable). `--instr` counts instructions per operation with callgrind instead
//! (`make bench-instr`, see `instr.rs`; `--only` then selects workloads whose name contains
//! the word). `--scale` measures cost against scale instead (`make bench-scale`, see
//! `scale.rs`). `--idle-instr` counts an idle server's instructions per second while clients
//! wait, with callgrind (`idle_instr.rs`).
#![forbid(unsafe_code)]

mod callgrind;
mod client_cpu;
mod headline;
mod idle_instr;
mod instr;
mod redisson_instr;
mod report;
mod resp;
mod scale;
mod scenarios;
mod semaphore;
mod stats;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dlock_testutil::Server;

use report::{num, Report};
use resp::{encode, RawConn, Reply};

/// Measured settings.
#[derive(Clone, Debug)]
pub struct Cfg {
    pub reps: usize,
    pub warm: Duration,
    pub dur: Duration,
    pub hot_dur: Duration,
    pub handoffs: usize,
    pub renew_reps: usize,
    pub waiters: usize,
    pub waiter_keys: usize,
    pub scale_reps: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Native,
    /// The module's commands, the acquire with a bare `BIND` (the clients' default grace).
    NativeBind,
    NativeClient,
    Lua,
    SetNx,
    Raw,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::NativeBind => "native-bind",
            Backend::NativeClient => "native-client",
            Backend::Lua => "lua",
            Backend::SetNx => "setnx",
            Backend::Raw => "raw",
        }
    }
    pub fn on_module_server(self) -> bool {
        matches!(
            self,
            Backend::Native | Backend::NativeBind | Backend::NativeClient
        )
    }
}

/// SHA1s of the scripts (loaded on both servers).
pub struct Shas {
    pub lock: String,
    pub unlock: String,
    pub renew: String,
    pub setnx_release: String,
    pub setnx_renew: String,
}

/// Compare-and-delete release of the `setnx` backend.
pub const SETNX_RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
/// Compare-and-pexpire renewal of the `setnx` backend.
pub const SETNX_RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// Every script the Lua workloads use, in the order their SHAs are read back.
pub const SCRIPTS: [&str; 5] = [
    dlock_client::scripts::LOCK,
    dlock_client::scripts::UNLOCK,
    dlock_client::scripts::RENEW,
    SETNX_RELEASE,
    SETNX_RENEW,
];

pub struct Ctx {
    pub native: Server,
    pub plain: Server,
    pub sha: Shas,
    pub prefix: String,
    pub cfg: Cfg,
}

impl Ctx {
    pub fn port(&self, b: Backend) -> u16 {
        if b.on_module_server() {
            self.native.port()
        } else {
            self.plain.port()
        }
    }
    pub fn url(&self, b: Backend) -> String {
        format!("redis://127.0.0.1:{}/", self.port(b))
    }
    /// An owner id shaped like the client's (`<128-bit hex>:<n>`).
    pub fn owner(&self, n: usize) -> String {
        format!("{}:{n}", self.prefix)
    }
    pub async fn ctrl(&self, b: Backend) -> RawConn {
        RawConn::connect(self.port(b))
            .await
            .expect("control connection")
    }
}

/// `EVALSHA sha numkeys keys.. args..`, encoded: numkeys is counted from `keys`.
fn evalsha(sha: &str, keys: &[&[u8]], args: &[&[u8]]) -> Vec<u8> {
    let numkeys = keys.len().to_string();
    let mut cmd: Vec<&[u8]> = vec![b"EVALSHA", sha.as_bytes(), numkeys.as_bytes()];
    cmd.extend_from_slice(keys);
    cmd.extend_from_slice(args);
    encode(&cmd)
}

impl Shas {
    /// The commands of `owner`'s hold on `key` with a lease of `lease_ms`, on backend `b`.
    pub fn hold<'a>(&'a self, b: Backend, key: &'a str, owner: &'a str, lease_ms: u64) -> Hold<'a> {
        Hold {
            shas: self,
            b,
            key,
            owner,
            lease: lease_ms.to_string(),
        }
    }
}

/// One owner's hold on one key, on one backend: each of its commands encoded, with the
/// replies a success gives.
pub struct Hold<'a> {
    shas: &'a Shas,
    b: Backend,
    key: &'a str,
    owner: &'a str,
    /// The lease in ms, as sent.
    lease: String,
}

impl Hold<'_> {
    /// Key, owner and lease as the commands send them.
    fn words(&self) -> (&[u8], &[u8], &[u8]) {
        (
            self.key.as_bytes(),
            self.owner.as_bytes(),
            self.lease.as_bytes(),
        )
    }

    /// Acquire without waiting.
    pub fn acquire(&self) -> (Vec<u8>, Vec<Reply>) {
        let (key, owner, lease) = self.words();
        match self.b {
            Backend::Native | Backend::NativeClient => (
                encode(&[b"DLOCK.ACQUIRE", key, owner, lease]),
                vec![Reply::Int(1)],
            ),
            Backend::NativeBind => (
                encode(&[b"DLOCK.ACQUIRE", key, owner, lease, b"BIND"]),
                vec![Reply::Int(1)],
            ),
            Backend::Lua => (
                evalsha(&self.shas.lock, &[key], &[lease, owner]),
                vec![Reply::Nil],
            ),
            Backend::SetNx => (
                encode(&[b"SET", key, owner, b"NX", b"PX", lease]),
                vec![Reply::Status("OK".into())],
            ),
            Backend::Raw => {
                let mut v = encode(&[b"HINCRBY", key, owner, b"1"]);
                v.extend(encode(&[b"PEXPIRE", key, lease]));
                (v, vec![Reply::Int(1), Reply::Int(1)])
            }
        }
    }

    /// Release of a lock held once.
    pub fn release(&self) -> (Vec<u8>, Vec<Reply>) {
        let (key, owner, lease) = self.words();
        let cmd = match self.b {
            Backend::Native | Backend::NativeBind | Backend::NativeClient => {
                encode(&[b"DLOCK.RELEASE", key, owner])
            }
            Backend::Lua => {
                let ch = dlock_client::scripts::channel_name(
                    dlock_client::scripts::DEFAULT_CHANNEL_PREFIX,
                    self.key,
                );
                evalsha(
                    &self.shas.unlock,
                    &[key, ch.as_bytes()],
                    &[
                        dlock_client::scripts::UNLOCK_MESSAGE.as_bytes(),
                        lease,
                        owner,
                    ],
                )
            }
            Backend::SetNx => evalsha(&self.shas.setnx_release, &[key], &[owner]),
            Backend::Raw => encode(&[b"DEL", key]),
        };
        (cmd, vec![Reply::Int(1)])
    }

    /// One watchdog renewal.
    pub fn renew(&self) -> (Vec<u8>, Vec<Reply>) {
        let (key, owner, lease) = self.words();
        let cmd = match self.b {
            Backend::Native | Backend::NativeBind | Backend::NativeClient => {
                encode(&[b"DLOCK.RENEW", key, owner, lease])
            }
            Backend::Lua => evalsha(&self.shas.renew, &[key], &[lease, owner]),
            Backend::SetNx => evalsha(&self.shas.setnx_renew, &[key], &[owner, lease]),
            Backend::Raw => encode(&[b"PEXPIRE", key, lease]),
        };
        (cmd, vec![Reply::Int(1)])
    }
}

/// Raises the soft open-files limit to the hard one; returns the limit in force.
fn raise_nofile() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

async fn load_scripts(port: u16) -> Shas {
    let mut c = RawConn::connect(port).await.expect("connect");
    let mut shas = vec![];
    for src in SCRIPTS {
        let bytes = encode(&[b"SCRIPT", b"LOAD", src.as_bytes()]);
        match c.call(&bytes).await.expect("SCRIPT LOAD") {
            Reply::Bulk(b) => shas.push(String::from_utf8(b).unwrap()),
            other => panic!("SCRIPT LOAD: {other:?}"),
        }
    }
    Shas {
        lock: shas[0].clone(),
        unlock: shas[1].clone(),
        renew: shas[2].clone(),
        setnx_release: shas[3].clone(),
        setnx_renew: shas[4].clone(),
    }
}

fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Date, nproc, CPU model, server version.
fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let server = sh(&dlock_testutil::server_binary(), &["--version"]);
    let date = sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let server = server.split(" sha=").next().unwrap_or(&server).to_string();
    format!("{date}; nproc {nproc}; CPU {cpu}; {server}")
}

/// The 1-minute load average: other work on the machine shows in the figures.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The document the full results go to (the README links it and keeps a short table).
fn results_doc_path() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("docs/BENCHMARKS.md")
}

const START: &str = "<!-- bench:start -->";
const END: &str = "<!-- bench:end -->";

/// Where a full run leaves its section of docs/BENCHMARKS.md until `--publish` copies it.
fn section_path() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            results_doc_path()
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("target")
        })
        .join("bench/section.md")
}

fn write_section(section: &str) -> std::io::Result<PathBuf> {
    let path = section_path();
    std::fs::create_dir_all(path.parent().unwrap())?;
    std::fs::write(&path, section)?;
    Ok(path)
}

/// Copies the last run's section into docs/BENCHMARKS.md and its headline figures into the
/// README's table (`make bench-docs`).
fn publish() -> Result<(), String> {
    let from = section_path();
    let section = std::fs::read_to_string(&from)
        .map_err(|e| format!("{}: {e} (run `make bench` first)", from.display()))?;
    let table = headline::table(&section)?;
    let readme_path = results_doc_path()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("README.md");
    let readme = std::fs::read_to_string(&readme_path).map_err(|e| format!("README.md: {e}"))?;
    let readme = headline::replace(&readme, &table)?;
    write_results_doc(&section).map_err(|e| format!("docs/BENCHMARKS.md: {e}"))?;
    std::fs::write(&readme_path, readme).map_err(|e| format!("README.md: {e}"))
}

/// Replaces the text between the markers of docs/BENCHMARKS.md (creating the file, or adding
/// the markers at its end, the first time).
fn write_results_doc(section: &str) -> std::io::Result<()> {
    let path = results_doc_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n".into());
    let new = match (text.find(START), text.find(END)) {
        (Some(a), Some(b)) if a < b => {
            format!("{}{START}\n{section}{}", &text[..a], &text[b..])
        }
        _ => format!(
            "{}\n## Last run\n\n{START}\n{section}{END}\n",
            text.trim_end_matches('\n').to_string() + "\n"
        ),
    };
    std::fs::write(&path, new)
}

fn main() {
    if client_cpu::instr_child() {
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--publish") {
        match publish() {
            Ok(()) => eprintln!(
                "docs/BENCHMARKS.md and README.md updated from {}",
                section_path().display()
            ),
            Err(e) => {
                eprintln!("bench --publish: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let no_write = args.iter().any(|a| a == "--no-write");
    let only: Vec<String> = args
        .windows(2)
        .filter(|w| w[0] == "--only")
        .map(|w| w[1].clone())
        .collect();
    if args.iter().any(|a| a == "--idle-instr") {
        idle_instr::run(&only);
        return;
    }
    if args.iter().any(|a| a == "--instr") {
        instr::run(&only, |dir| redisson_instr::run(&only, dir));
        return;
    }
    if args.iter().any(|a| a == "--scale") {
        scale::run(quick, !no_write, &only);
        return;
    }
    let want = |s: &str| only.is_empty() || only.iter().any(|o| o == s);

    let nofile = raise_nofile();
    let mut waiters = 10_000usize;
    let mut notes = vec![];
    if nofile < waiters as u64 + 1_500 {
        let w = ((nofile.saturating_sub(1_000)) / 100 * 100) as usize;
        notes.push(format!(
            "open-files limit {nofile}: the waiters scenario uses {w} waiters instead of 10000"
        ));
        waiters = w;
    }
    let cfg = if quick {
        Cfg {
            reps: 3,
            warm: Duration::from_millis(200),
            dur: Duration::from_millis(500),
            hot_dur: Duration::from_millis(700),
            handoffs: 100,
            renew_reps: 3,
            waiters,
            waiter_keys: 100,
            scale_reps: 1,
        }
    } else {
        Cfg {
            reps: 5,
            warm: Duration::from_millis(300),
            dur: Duration::from_millis(1000),
            hot_dur: Duration::from_millis(1500),
            handoffs: 200,
            renew_reps: 7,
            waiters,
            waiter_keys: 100,
            scale_reps: 2,
        }
    };

    // Servers inherit the raised limit; maxclients must cover the waiters.
    let maxclients = (waiters + 1_000).to_string();
    let common = ["--maxclients", maxclients.as_str(), "--appendonly", "no"];
    // Explicit queue limits (0 = none): the waiters scenario must not depend on the defaults.
    let native = Server::builder()
        .module_args(["max-waiters-per-key", "0", "max-waiters", "0"])
        .args(common)
        .start();
    let plain = Server::builder().without_module().args(common).start();

    let threads: usize = std::env::var("DLOCK_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
    .expect("tokio runtime");

    let started = Instant::now();
    let machine = machine();
    let load_before = load();
    eprintln!("dlock-bench: {machine}");
    eprintln!(
        "servers: module on 127.0.0.1:{}, plain on 127.0.0.1:{}; client runtime threads {threads}",
        native.port(),
        plain.port()
    );
    let report = rt.block_on(async {
        let sha = load_scripts(native.port()).await;
        let _ = load_scripts(plain.port()).await;
        let prefix = format!("{:032x}", std::process::id() as u128 * 0x9e3779b97f4a7c15);
        let ctx = Ctx {
            native,
            plain,
            sha,
            prefix,
            cfg,
        };
        let mut rep = Report::default();
        rep.notes.extend(notes);
        // Each scenario that `--only` selects, in this order.
        macro_rules! run_wanted {
            ($($name:literal => $scenario:path),* $(,)?) => {$(
                if want($name) {
                    $scenario(&ctx, &mut rep).await;
                }
            )*};
        }
        run_wanted!(
            "uncontended" => scenarios::uncontended,
            "hot" => scenarios::hot_lock,
            "handoff" => scenarios::handoff,
            "renew" => scenarios::renewal,
            "waiters" => scenarios::waiters,
            "client-cpu" => client_cpu::client_cpu,
            "semaphore" => semaphore::semaphore,
        );
        rep
    });
    let elapsed = started.elapsed();
    let machine = format!(
        "{machine}; load average {load_before} at start, {} at end",
        load()
    );

    println!("\ndlock benchmark — {machine}");
    println!(
        "(median of the repetitions, (min–max) after it; run took {:.0} s)\n",
        elapsed.as_secs_f64()
    );
    print!("{}", report.tables(false));
    println!("targets:");
    for t in &report.targets {
        println!(
            "  {:<58} {:>10}  {}",
            format!("{} {}", t.name, t.rule),
            num(t.value),
            if t.met { "met" } else { "MISSED" }
        );
    }
    for n in &report.notes {
        println!("note: {n}");
    }
    println!();
    print!("{}", report.machine_lines());

    if !no_write && only.is_empty() && !quick {
        let mut s = String::new();
        s.push_str(&format!(
            "Last `make bench` run: {machine}. Generated by `make bench` (`bench/`) and \
             copied here by `make bench-docs`, which replaces everything between the markers.\n\n"
        ));
        s.push_str(
            "Each cell is the median of the repetitions (min–max after it). Backends: `native` = DLOCK.* \
             (waiting with WAIT); `native-client` = the same through `dlock-client`; `lua` = Redisson's scripts \
             (waiting: the client's script backend, SUBSCRIBE + retry, one client per worker); `setnx` = SET NX PX + \
             compare-and-delete script, retry every 1 ms; `raw` = HINCRBY+PEXPIRE then DEL, no logic. `native*` run on \
             a server with the module, the others on a plain one. `srv_us/op` is the server's own time per lock cycle \
             inside the commands (INFO commandstats), `srv_cpu_us/op` all its CPU per lock cycle (I/O included). \
             Hot lock: `lua` grants mostly go back to the worker that just released (barging), so its p99 wait is \
             low while most workers starve (see wait_max). Semaphore: 16 workers share 4 permits (hold 1 ms); \
             `redis-semaphore` = its algorithm emulated on the module's server (sorted set scored by client-side \
             expiry, retry every 10 ms). The machine's other load shows in the min–max ranges.\n\n",
        );
        s.push_str(&report.tables(true));
        s.push_str("| target | rule | measured | |\n|---|---|---|---|\n");
        for t in &report.targets {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                t.name,
                t.rule,
                num(t.value),
                if t.met { "met" } else { "**missed**" }
            ));
        }
        s.push('\n');
        for n in &report.notes {
            s.push_str(&format!("- {n}\n"));
        }
        s.push_str("\n```\n");
        s.push_str(&report.machine_lines());
        s.push_str("```\n");
        match write_section(&s) {
            Ok(p) => eprintln!(
                "section for docs/BENCHMARKS.md in {} (`make bench-docs` copies it there)",
                p.display()
            ),
            Err(e) => eprintln!("could not write the section file: {e}"),
        }
    }
    if !report.fails.is_empty() {
        std::process::exit(1);
    }
}
