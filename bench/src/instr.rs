//! `make bench-instr` (`dlock-bench --instr`): server instructions per operation, counted by
//! callgrind. Load on the machine cannot distort these counts, unlike `make bench`'s clocks.
//!
//! Each workload is a fixed stream of commands fed by `redis-cli --pipe` to a `redis-server`
//! running under `valgrind --tool=callgrind` (`hz 1`, no persistence). Counting is off while
//! the server starts, syncs its replica and takes the set-up; `callgrind_control` switches it
//! on for the `N` measured operations only, so the figure is `I / N`: the whole server path
//! (read, parse, execute, propagate, reply) of one operation, the median over three server
//! starts (see [`STARTS`]). Keys cycle over 1,000 names.
//!
//! (An earlier version ran every workload twice, with `N` and `2N` operations, and took
//! `(I(2N) - I(N)) / N`. Start-up and replica sync cost a varying number of instructions
//! (polling for the link is timed), and that difference doubled the hash-seed noise of
//! Redis's own command look-ups: the replica row moved by ±500 between runs of one build,
//! against ±100 this way.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dlock_testutil::{wait_for, Server};

use crate::callgrind::{callgrind_total, inclusive, instrumentation};
use crate::resp::encode_into;
use crate::{Backend, Shas, SCRIPTS, SETNX_RELEASE, SETNX_RENEW};

/// The label of the default cycle's workloads (`acquire+release...: dlock BIND`).
const DEFAULT_CYCLE: &str = "dlock BIND";
/// Issue 32's bars: the default cycle at most this many times the floor (raw HINCRBY +
/// PEXPIRE, DEL: the writes a cycle needs, no checks) ...
const FLOOR_TARGET: f64 = 1.10;
/// ... and SET NX PX + Lua release at least this many times the default cycle with a replica
/// and with the AOF.
const PEER_TARGET: f64 = 1.15;

/// Measured operations per workload.
const N: usize = 8_000;
const KEYS: usize = 1_000;
pub(crate) const LEASE: u64 = 60_000;
pub(crate) const OWNER: &str = "8743c9c2-5b4e-4a4e-9d43-3f1f3ad1c0de:1";

/// What runs next to the measured server.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scene {
    /// Nothing.
    Alone,
    /// A replica (without the module) is attached.
    Replica,
    /// The AOF is on (`appendfsync no`: the writes to the file count, no fsync thread).
    Aof,
    /// One client waits (`DLOCK.ACQUIRE ... WAIT 0`) on a key of its own the whole time.
    ClientWaiting,
    /// A client waited and was granted before the measurement; nobody waits now.
    AfterWaits,
    /// Clients wait (`WAIT 0`) on `lock:0` .. `lock:{n-1}`, one each, on raw connections held
    /// open for the whole measurement.
    Waiting(usize),
}

pub(crate) struct Workload {
    pub(crate) name: &'static str,
    /// The server binary (`None`: `REDIS_SERVER` or Redis 7.0 on PATH).
    pub(crate) binary: Option<&'static str>,
    pub(crate) module: bool,
    /// Module arguments (`loadmodule ... name value`), when loaded.
    pub(crate) module_args: &'static [&'static str],
    pub(crate) scene: Scene,
    /// Commands before the measured ones (identical in both runs).
    pub(crate) setup: Vec<u8>,
    /// The commands of operation `i`.
    pub(crate) op: Box<dyn Fn(usize) -> Vec<u8>>,
    /// Every operation is answered with an error on purpose (a refused request).
    pub(crate) refused: bool,
    /// Count the operations only: leave out what timers did meanwhile (see [`TIMERS`]).
    pub(crate) without_timers: bool,
}

/// Time-driven server work: Redis's cron and module timers (the module's poll). Under
/// callgrind the server runs ~50× slower, so the 8,000 measured commands span seconds of
/// timer ticks that take milliseconds for real; the rows comparing a write's cost leave them
/// out (their real cost per second is the idle CPU of `make bench-scale`). Valkey 8.1 runs
/// its clients' cron as a timer of its own (`clientsTimeProc`, in `serverCron` elsewhere): it
/// visits every connection, so 1,000 waiting connections made it ~210 instructions per
/// measured `SET`, a cost of the connections (1,000 BLPOP clients pay it alike), not of writes.
const TIMERS: [&str; 3] = ["serverCron", "moduleTimerHandler", "clientsTimeProc"];

pub(crate) fn cmd(args: &[&str]) -> Vec<u8> {
    let mut out = vec![];
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    encode_into(&mut out, &bytes);
    out
}

pub(crate) fn key(i: usize) -> String {
    format!("lock:{}", i % KEYS)
}

/// The SHA1s of the scripts, as `SCRIPT LOAD` gives them (a plain throw-away server).
fn script_shas() -> Shas {
    let srv = Server::builder().without_module().start();
    let mut c = srv.connection();
    let mut load = |src: &str| -> String {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(src)
            .query(&mut c)
            .expect("SCRIPT LOAD")
    };
    Shas {
        lock: load(dlock_client::scripts::LOCK),
        unlock: load(dlock_client::scripts::UNLOCK),
        renew: load(dlock_client::scripts::RENEW),
        setnx_release: load(SETNX_RELEASE),
        setnx_renew: load(SETNX_RENEW),
    }
}

/// `SCRIPT LOAD` of every script (set-up of the script workloads).
fn load_scripts() -> Vec<u8> {
    let mut out = vec![];
    for src in SCRIPTS {
        out.extend(cmd(&["SCRIPT", "LOAD", src]));
    }
    out
}

fn workloads(shas: &'static Shas) -> Vec<Workload> {
    let mut w = vec![];
    let backends = [
        ("dlock", Backend::Native),
        ("Redisson Lua", Backend::Lua),
        ("SET NX PX + Lua", Backend::SetNx),
        ("raw commands", Backend::Raw),
    ];
    for (scene, suffix) in [
        (Scene::Alone, ""),
        (Scene::Replica, ", replica"),
        (Scene::Aof, ", AOF"),
    ] {
        for (label, b) in backends {
            w.push(Workload {
                binary: None,
                name: leak(format!("acquire+release{suffix}: {label}")),
                module: b == Backend::Native,
                module_args: &[],
                scene,
                setup: load_scripts(),
                op: Box::new(move |i| {
                    let key = key(i);
                    let hold = shas.hold(b, &key, OWNER, LEASE);
                    let (mut a, _) = hold.acquire();
                    a.extend(hold.release().0);
                    a
                }),
                refused: false,
                without_timers: false,
            });
        }
    }
    // The default cycle, what the clients send for a watchdog-held lock (a bare `BIND`: the
    // module's default grace, 2 s, is the clients' default too): the
    // hold is indexed under the pipe's connection, and unindexed by the release. Alone, with a
    // replica and with the AOF, like the plain cycle.
    for (scene, suffix) in [
        (Scene::Alone, ""),
        (Scene::Replica, ", replica"),
        (Scene::Aof, ", AOF"),
    ] {
        w.push(Workload {
            binary: None,
            name: leak(format!("acquire+release{suffix}: {DEFAULT_CYCLE}")),
            module: true,
            module_args: &[],
            scene,
            setup: vec![],
            op: Box::new(|i| {
                let lease = LEASE.to_string();
                let mut a = cmd(&["DLOCK.ACQUIRE", &key(i), OWNER, &lease, "BIND"]);
                a.extend(cmd(&["DLOCK.RELEASE", &key(i), OWNER]));
                a
            }),
            refused: false,
            without_timers: false,
        });
    }
    // Deadlock detection: OWNER holds the locks; `waiter` holds `cycle` and waits for lock:0;
    // OWNER's WAIT for `cycle` would close the cycle and is refused, every time. Its cost must
    // not grow with the number of locks held.
    for held_locks in [1_000, 10_000] {
        // Leases of an hour: under callgrind the set-up and the run take minutes, and a lapse
        // would open the cycle.
        const HOUR: &str = "3600000";
        let mut setup: Vec<u8> = (0..held_locks)
            .flat_map(|i| cmd(&["DLOCK.ACQUIRE", &format!("lock:{i}"), OWNER, HOUR]))
            .collect();
        setup.extend(cmd(&["DLOCK.ACQUIRE", "cycle", "waiter", HOUR]));
        w.push(Workload {
            binary: None,
            name: leak(format!("WAIT refused DEADLOCK: {held_locks} locks held")),
            module: true,
            module_args: &[],
            scene: Scene::ClientWaiting,
            setup,
            op: Box::new(|_| {
                cmd(&[
                    "DLOCK.ACQUIRE",
                    "cycle",
                    OWNER,
                    &LEASE.to_string(),
                    "WAIT",
                    "0",
                ])
            }),
            refused: true,
            without_timers: false,
        });
    }
    for (label, b) in backends {
        let mut setup = load_scripts();
        for i in 0..KEYS {
            setup.extend(shas.hold(b, &key(i), OWNER, LEASE).acquire().0);
        }
        w.push(Workload {
            binary: None,
            name: leak(format!("renew: {label}")),
            module: b == Backend::Native,
            module_args: &[],
            scene: Scene::Alone,
            setup,
            op: Box::new(move |i| shas.hold(b, &key(i), OWNER, LEASE).renew().0),
            refused: false,
            without_timers: false,
        });
    }
    let set = |i: usize| cmd(&["SET", &format!("user:{i}"), "v"]);
    let held = || {
        (0..KEYS)
            .flat_map(|i| cmd(&["DLOCK.ACQUIRE", &key(i), OWNER, &LEASE.to_string()]))
            .collect::<Vec<u8>>()
    };
    // Locks of the same shape on a server without the module: the baseline of the rows with
    // locks held (1,000 more keys with a TTL cost Redis something by themselves).
    let mut redisson_held = load_scripts();
    for i in 0..KEYS {
        redisson_held.extend(shas.hold(Backend::Lua, &key(i), OWNER, LEASE).acquire().0);
    }
    for (name, module, scene, setup) in [
        ("SET other key: no module", false, Scene::Alone, vec![]),
        (
            "SET other key: no module, 1000 Lua locks held",
            false,
            Scene::Alone,
            redisson_held.clone(),
        ),
        ("SET other key: module loaded", true, Scene::Alone, vec![]),
        ("SET other key: 1000 locks held", true, Scene::Alone, held()),
        (
            "SET other key: a client waits",
            true,
            Scene::ClientWaiting,
            held(),
        ),
        (
            "SET other key: after waits",
            true,
            Scene::AfterWaits,
            held(),
        ),
    ] {
        w.push(Workload {
            binary: None,
            name,
            module,
            module_args: &[],
            scene,
            setup,
            op: Box::new(set),
            refused: false,
            without_timers: false,
        });
    }
    set_with_waiters(&mut w, &redisson_held);
    w
}

/// Waiters on how many keys the rows of [`set_with_waiters`] measure.
const WAITED_KEYS: [usize; 3] = [1, 100, 1000];

/// The bound those rows are judged on: a `SET` while clients wait costs at most 3% more than
/// on the same server with the same keys without the module.
const SET_BOUND_PCT: f64 = 3.0;

/// `SET` over existing keys (the common write of a cache: Redis reports it to anyone who
/// listens to overwrites) while clients wait on 1, 100 and 1,000 locks, on every supported
/// server; the peer is the same server with 1,000 Redisson locks and no module. Servers:
/// `DLOCK_INSTR_SERVERS="name=path ..."` (`make bench-instr` installs them as `make
/// test-matrix` does); without it the default server only.
fn set_with_waiters(w: &mut Vec<Workload>, redisson_held: &[u8]) {
    let servers: Vec<(&'static str, Option<&'static str>)> =
        match std::env::var("DLOCK_INSTR_SERVERS") {
            Ok(list) if !list.trim().is_empty() => list
                .split_whitespace()
                .map(|spec| {
                    let (name, path) = spec
                        .split_once('=')
                        .expect("DLOCK_INSTR_SERVERS: name=path ...");
                    (leak(name.into()), Some(leak(path.into())))
                })
                .collect(),
            _ => vec![("default server", None)],
        };
    let users = || {
        (0..KEYS)
            .flat_map(|i| cmd(&["SET", &format!("user:{i}"), "v0"]))
            .collect::<Vec<u8>>()
    };
    let overwrite = |i: usize| cmd(&["SET", &format!("user:{}", i % KEYS), "v"]);
    for (server, binary) in servers {
        let mut held = redisson_held.to_vec();
        held.extend(users());
        w.push(Workload {
            name: leak(format!("SET with waiters [{server}]: no module")),
            binary,
            module: false,
            module_args: &[],
            scene: Scene::Alone,
            setup: held,
            op: Box::new(overwrite),
            refused: false,
            without_timers: true,
        });
        for keys in WAITED_KEYS {
            let mut setup: Vec<u8> = (0..KEYS)
                .flat_map(|i| cmd(&["DLOCK.ACQUIRE", &key(i), OWNER, &LEASE.to_string()]))
                .collect();
            setup.extend(users());
            w.push(Workload {
                name: leak(format!(
                    "SET with waiters [{server}]: waiters on {keys} keys"
                )),
                binary,
                module: true,
                module_args: &[],
                scene: Scene::Waiting(keys),
                setup,
                op: Box::new(overwrite),
                refused: false,
                without_timers: true,
            });
        }
    }
}

pub(crate) fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Feeds `bytes` to the server with `redis-cli --pipe` and waits for every reply; exactly
/// `errors` of them must be errors.
fn pipe(port: u16, bytes: &[u8], dir: &Path, errors: usize) {
    let file = dir.join("pipe.resp");
    std::fs::write(&file, bytes).expect("write the workload");
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "--pipe"])
        .stdin(std::fs::File::open(&file).expect("open the workload"))
        .output()
        .expect("run redis-cli --pipe");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("errors: {errors},")) && (errors > 0 || out.status.success()),
        "redis-cli --pipe: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `redis-cli` running one (blocking) command.
fn background(port: u16, args: &[&str]) -> Child {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run redis-cli")
}

fn waiters(c: &mut redis::Connection) -> i64 {
    let s: String = redis::cmd("INFO").arg("dlock").query(c).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("dlock_waiters:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Instructions the server spends on `n` operations of `w` (and nothing else). `start`: which
/// of the [`STARTS`] servers (names the output file).
fn run_once(w: &Workload, n: usize, dir: &Path, start: usize) -> u64 {
    let file: String = w
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let out = dir.join(format!("callgrind.{file}.{start}.out"));
    let mut b = Server::builder()
        .wrapper([
            "valgrind".to_string(),
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}", out.display()),
            // Counting starts with the measured commands (`instrumentation`).
            "--instr-atstart=no".into(),
        ])
        .args(["--hz", "1"])
        .args(if w.scene == Scene::Aof {
            ["--appendonly", "yes", "--appendfsync", "no"]
        } else {
            ["--appendonly", "no", "--appendfsync", "everysec"]
        });
    if !w.module {
        b = b.without_module();
    } else if !w.module_args.is_empty() {
        b = b.module_args(w.module_args.iter().copied());
    }
    if let Some(path) = w.binary {
        b = b.binary(path);
    }
    let mut srv = b.start();
    let port = srv.port();
    let mut c = srv.connection();
    let mut replica = None;
    if w.scene == Scene::Replica {
        // In sync when started (testutil waits for the link and the first acknowledgement).
        replica = Some(Server::builder().without_module().replica_of(&srv).start());
    }
    pipe(port, &w.setup, dir, 0);
    let mut waiter = None;
    if matches!(w.scene, Scene::ClientWaiting | Scene::AfterWaits) {
        let lease = LEASE.to_string();
        // lock:0 is held by OWNER (set-up): the waiter queues on it.
        waiter = Some(background(
            port,
            &["DLOCK.ACQUIRE", &key(0), "waiter", &lease, "WAIT", "0"],
        ));
        wait_for(Duration::from_secs(60), "a client waiting", || {
            (waiters(&mut c) == 1).then_some(())
        });
        if w.scene == Scene::AfterWaits {
            let _: redis::Value = redis::cmd("DLOCK.RELEASE")
                .arg(key(0))
                .arg(OWNER)
                .query(&mut c)
                .expect("release");
            let mut child = waiter.take().unwrap();
            child.wait().expect("the waiter is granted");
            let _: redis::Value = redis::cmd("DLOCK.RELEASE")
                .arg(key(0))
                .arg("waiter")
                .query(&mut c)
                .expect("release");
        }
    }
    let mut held_open = vec![];
    if let Scene::Waiting(keys) = w.scene {
        let lease = LEASE.to_string();
        for i in 0..keys {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.write_all(&cmd(&[
                "DLOCK.ACQUIRE",
                &key(i),
                "waiter",
                &lease,
                "WAIT",
                "0",
            ]))
            .expect("send a waiting acquire");
            held_open.push(s);
        }
        wait_for(Duration::from_secs(120), "the clients waiting", || {
            (waiters(&mut c) == keys as i64).then_some(())
        });
    }
    let ops: Vec<u8> = (0..n).flat_map(|i| (w.op)(i)).collect();
    instrumentation(srv.pid(), true);
    pipe(port, &ops, dir, if w.refused { n } else { 0 });
    instrumentation(srv.pid(), false);
    if let Some(mut child) = waiter {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(held_open);
    drop(replica);
    srv.shutdown_within(Duration::from_secs(120));
    let total = callgrind_total(&out).expect("callgrind summary line");
    if w.without_timers {
        total - TIMERS.iter().map(|f| inclusive(&out, f)).sum::<u64>()
    } else {
        total
    }
}

/// Server starts per workload. Redis seeds its dict hash at random on each start, which makes
/// the look-ups of commands and keys walk longer or shorter chains: the replica row moves by
/// up to ±250 instructions from one start to the next. The median of three is the typical cost.
const STARTS: usize = 3;

/// Instructions per operation of `w`: the median over [`STARTS`] servers, and the lowest and
/// highest.
pub(crate) fn measure(w: &Workload, dir: &Path) -> (f64, f64, f64) {
    let mut per_op: Vec<f64> = (0..STARTS)
        .map(|start| run_once(w, N, dir, start) as f64 / N as f64)
        .collect();
    per_op.sort_by(f64::total_cmp);
    (per_op[STARTS / 2], per_op[0], per_op[STARTS - 1])
}

pub(crate) fn k(n: f64) -> String {
    format!("{:.1}k", n / 1000.0)
}

/// Runs every workload (or those whose name contains one of `only`) and prints the table.
/// `DLOCK_INSTR_KEEP=dir` keeps callgrind's output files there (one per workload and server
/// start) for `callgrind_annotate`; otherwise they go with a temporary directory.
/// `more_rows` runs further rows (Redisson's, from the caller) in the same directory, after
/// these and before the table.
pub fn run(only: &[String], more_rows: impl FnOnce(&Path)) {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("valgrind is missing (apt-get install valgrind)");
        std::process::exit(2);
    }
    let keep = std::env::var_os("DLOCK_INSTR_KEEP").map(PathBuf::from);
    let dir: PathBuf = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("dlock-instr-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).expect("temp dir");
    let shas: &'static Shas = Box::leak(Box::new(script_shas()));
    let mut results: Vec<(&str, f64)> = vec![];
    for w in workloads(shas) {
        if !only.is_empty() && !only.iter().any(|o| w.name.contains(o.as_str())) {
            continue;
        }
        let (per_op, low, high) = measure(&w, &dir);
        println!(
            "{:<44} {:>10.0} instructions/op ({low:.0}–{high:.0})",
            w.name, per_op
        );
        let _ = std::io::stdout().flush();
        results.push((w.name, per_op));
    }
    more_rows(&dir);
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let get = |name: &str| results.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    println!("\n| workload | dlock | Redisson Lua | SET NX PX + Lua | raw commands |");
    println!("|---|---|---|---|---|");
    for (row, prefix) in [
        ("acquire + release", "acquire+release: "),
        ("renew", "renew: "),
        (
            "acquire + release, replica attached",
            "acquire+release, replica: ",
        ),
        ("acquire + release, AOF on", "acquire+release, AOF: "),
    ] {
        let Some(d) = get(&format!("{prefix}dlock")) else {
            continue;
        };
        let cell = |label: &str| match get(&format!("{prefix}{label}")) {
            Some(v) => format!("{} ({:.2}×)", k(v), v / d),
            None => "–".into(),
        };
        println!(
            "| {row} | {} | {} | {} | {} |",
            k(d),
            cell("Redisson Lua"),
            cell("SET NX PX + Lua"),
            cell("raw commands")
        );
    }
    println!("\n| the default cycle (BIND) | dlock BIND | plain dlock | floor (raw) | BIND / floor (target <= {FLOOR_TARGET:.2}x) | SET NX PX + Lua / BIND (target >= {PEER_TARGET:.2}x) |");
    println!("|---|---|---|---|---|---|");
    for (row, prefix, peer_bar) in [
        ("alone", "acquire+release: ", false),
        ("replica attached", "acquire+release, replica: ", true),
        ("AOF on", "acquire+release, AOF: ", true),
    ] {
        let Some(bound) = get(&format!("{prefix}{DEFAULT_CYCLE}")) else {
            continue;
        };
        let opt = |v: Option<f64>| v.map_or("–".to_string(), k);
        let plain = get(&format!("{prefix}dlock"));
        let floor = get(&format!("{prefix}raw commands"));
        let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
        let over_floor = floor.map_or("–".to_string(), |f| {
            let r = bound / f;
            // The floor's bar is the standalone one; with a replica or the AOF it is shown.
            if peer_bar {
                format!("{r:.2}x")
            } else {
                format!("{r:.2}x, {}", verdict(r <= FLOOR_TARGET))
            }
        });
        let peer = get(&format!("{prefix}SET NX PX + Lua")).map_or("–".to_string(), |p| {
            let r = p / bound;
            if peer_bar {
                format!("{r:.2}x, {}", verdict(r >= PEER_TARGET))
            } else {
                format!("{r:.2}x")
            }
        });
        println!(
            "| {row} | {} | {}{} | {} | {over_floor} | {peer} |",
            k(bound),
            opt(plain),
            plain.map_or(String::new(), |p| format!(
                " (BIND {:+.1}%)",
                (bound / p - 1.0) * 100.0
            )),
            opt(floor),
        );
    }
    if let (Some(small), Some(large)) = (
        get("WAIT refused DEADLOCK: 1000 locks held"),
        get("WAIT refused DEADLOCK: 10000 locks held"),
    ) {
        println!(
            "a WAIT refused DEADLOCK (2-owner cycle): {} with 1000 locks held, {} with 10000 ({:+.1}%)",
            k(small),
            k(large),
            (large / small - 1.0) * 100.0
        );
    }
    if let Some(base) = get("SET other key: no module") {
        let held_base = get("SET other key: no module, 1000 Lua locks held").unwrap_or(base);
        println!("\n| SET on a key that is not a lock | instructions | vs. no module |");
        println!("|---|---|---|");
        for (name, v) in results
            .iter()
            .filter(|(n, _)| n.starts_with("SET other key"))
        {
            let what = name.trim_start_matches("SET other key: ");
            // Rows with locks held compare with the same 1,000 locks on a server without
            // the module (1,000 more keys with a TTL cost Redis something by themselves).
            let (b, against) = if what.starts_with("no module") || what == "module loaded" {
                (base, "")
            } else {
                (held_base, " (vs. 1000 Lua locks, no module)")
            };
            println!(
                "| {what} | {v:.0} | {:+.1}%{against} |",
                (v / b - 1.0) * 100.0
            );
        }
    }
    let with_waiters: Vec<&(&str, f64)> = results
        .iter()
        .filter(|(n, _)| n.starts_with("SET with waiters"))
        .collect();
    if !with_waiters.is_empty() {
        println!(
            "\n| SET over an existing key (cron and module timers left out) | instructions | vs. no module (target +{SET_BOUND_PCT:.0}%) |"
        );
        println!("|---|---|---|");
        for (name, v) in &with_waiters {
            let (server, what) = name
                .trim_start_matches("SET with waiters [")
                .split_once("]: ")
                .unwrap_or(("?", name));
            let base = get(&format!("SET with waiters [{server}]: no module"));
            let vs = match base {
                Some(b) if !what.starts_with("no module") => {
                    let pct = (v / b - 1.0) * 100.0;
                    let mark = if pct <= SET_BOUND_PCT {
                        ""
                    } else {
                        " **over**"
                    };
                    format!("{pct:+.1}%{mark}")
                }
                _ => "–".into(),
            };
            println!("| {server}: {what} | {v:.0} | {vs} |");
        }
    }
    println!(
        "\n(ratios: instructions of the column / dlock's; callgrind, counting on for the N = {N} measured operations only; median of {STARTS} server starts)"
    );
}
