//! `dlock-bench --idle-instr`: where an idle server's instructions go while clients wait,
//! counted with callgrind (load on the machine cannot change the count, unlike the CPU time
//! of `--scale --only idle`). A standalone server and a cluster node (3 primaries, node 0
//! counted), each with nobody waiting, with dlock waiters on 1,000 keys (each key held, one
//! waiter each: `DLOCK.ACQUIRE k w 600000 WAIT 0`) and with 1,000 `BLPOP` waiters: the
//! instructions per second in all, and those of Redis's cron, of the module's timers and of
//! the event loop's waits (`callgrind_annotate --inclusive=yes`). Default `hz` (10), as in
//! production. `--only standalone|cluster` picks one setting.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dlock_testutil::{Cluster, Server, ServerBuilder};

use crate::callgrind::{annotate, callgrind_total, inclusive_in, instrumentation};
use crate::scale::{block, blocked_clients, pipelined, wait_until};

/// Seconds counted per setting (wall clock: the server idles, valgrind keeps up).
const SECONDS: u64 = 10;

/// Waited keys (and BLPOP waiters).
const KEYS: usize = 1000;

/// The functions whose inclusive counts are shown: a label and what names them in
/// `callgrind_annotate`'s output. dlock's poll ran in a module timer before it ran in the
/// cron tick (inside `serverCron`).
const PARTS: [(&str, &str); 5] = [
    ("serverCron", "serverCron"),
    ("clientsCron", "clientsCron"),
    ("clusterCron", "clusterCron"),
    ("module timers", "moduleTimerHandler"),
    (
        "dlock's cron tick",
        "dlock::ffi::events::subscribe_cron::on_event",
    ),
];

/// Starts a server of one setting with the waiters, counts it idle, returns its callgrind file.
type Setting = fn(&Path, Waiters) -> PathBuf;

/// Who waits.
#[derive(Clone, Copy)]
enum Waiters {
    Nobody,
    Dlock,
    Blpop,
}

fn builder(out: &Path) -> ServerBuilder {
    Server::builder().wrapper([
        "valgrind".to_string(),
        "--tool=callgrind".into(),
        // One file per process (a cluster's nodes all run under callgrind).
        format!("--callgrind-out-file={}/callgrind.%p.out", out.display()),
        "--instr-atstart=no".into(),
    ])
}

/// Makes `keys` waited on the server at `port` (`c` connected to it) and returns the waiting
/// connections.
fn wait_on(
    c: &mut redis::Connection,
    port: u16,
    keys: &[String],
    who: Waiters,
) -> Vec<std::io::BufReader<std::net::TcpStream>> {
    let w = match who {
        Waiters::Nobody => return vec![],
        Waiters::Blpop => block(port, keys.len(), |i| {
            vec!["BLPOP".into(), keys[i].clone(), "0".into()]
        }),
        Waiters::Dlock => {
            pipelined(c, keys.len(), |p, i| {
                p.cmd("DLOCK.ACQUIRE")
                    .arg(&keys[i])
                    .arg("holder")
                    .arg(600_000);
            });
            block(port, keys.len(), |i| {
                ["DLOCK.ACQUIRE", &keys[i], "w", "600000", "WAIT", "0"]
                    .map(String::from)
                    .to_vec()
            })
        }
    };
    wait_until("clients blocked", || {
        blocked_clients(c) == keys.len() as i64
    });
    w
}

/// Counts `SECONDS` of the idle server `pid`, then stops it (`stop`) and returns its
/// callgrind file.
fn count(pid: u32, dir: &Path, stop: impl FnOnce()) -> PathBuf {
    // Let the set-up's replies and client-side work settle.
    std::thread::sleep(Duration::from_secs(2));
    instrumentation(pid, true);
    std::thread::sleep(Duration::from_secs(SECONDS));
    instrumentation(pid, false);
    stop();
    dir.join(format!("callgrind.{pid}.out"))
}

/// Inclusive counts of [`PARTS`] in `out`.
fn parts(out: &Path) -> Vec<u64> {
    let report = annotate(out);
    PARTS
        .iter()
        .map(|(_, function)| inclusive_in(&report, function))
        .collect()
}

/// How often the server woke up: its calls of `epoll_wait` (read from the callgrind file,
/// where `cfn=(id) name` names a callee once and `calls=N` follows each call site).
fn wakeups(out: &Path) -> u64 {
    let text = std::fs::read_to_string(out).expect("callgrind file");
    let mut names = std::collections::HashMap::new();
    let (mut counting, mut n) = (false, 0);
    for line in text.lines() {
        if let Some(calls) = line.strip_prefix("calls=") {
            if counting {
                n += calls
                    .split_whitespace()
                    .next()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
            }
            continue;
        }
        let Some((callee, rest)) = line
            .strip_prefix("cfn=(")
            .map(|r| (true, r))
            .or_else(|| line.strip_prefix("fn=(").map(|r| (false, r)))
        else {
            continue;
        };
        let Some((id, name)) = rest.split_once(')') else {
            continue;
        };
        let name = name.trim();
        if !name.is_empty() {
            names.insert(id.to_string(), name.to_string());
        }
        counting = callee && names.get(id).is_some_and(|f| f == "epoll_wait");
    }
    n
}

fn standalone(dir: &Path, who: Waiters) -> PathBuf {
    let mut srv = builder(dir).start();
    let mut c = srv.connection();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("idle:{i}")).collect();
    let w = wait_on(&mut c, srv.port(), &keys, who);
    let pid = srv.pid();
    count(pid, dir, move || {
        drop(w);
        srv.shutdown_within(Duration::from_secs(120));
    })
}

fn cluster(dir: &Path, who: Waiters) -> PathBuf {
    let mut cl = Cluster::builder(3).node(builder(dir)).start();
    let keys: Vec<String> = (0..)
        .map(|i| format!("idle:{i}"))
        .filter(|k| cl.key_owner(k) == 0)
        .take(KEYS)
        .collect();
    let node = &cl.nodes[0];
    let mut c = node.connection();
    let w = wait_on(&mut c, node.port(), &keys, who);
    let pid = node.pid();
    count(pid, dir, move || {
        drop(w);
        for n in &mut cl.nodes {
            n.shutdown_within(Duration::from_secs(120));
        }
    })
}

pub fn run(only: &[String]) {
    let dir = std::env::var_os("DLOCK_INSTR_KEEP")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("dlock-idle-{}", std::process::id())));
    std::fs::create_dir_all(&dir).expect("output directory");
    let want = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    let head: Vec<&str> = PARTS.iter().map(|(l, _)| *l).collect();
    println!(
        "instructions per second, idle {SECONDS} s, hz 10 (callgrind, inclusive), and wake-ups (epoll_wait returns) per second\n\n| setting | waiters | wake-ups/s | total | {} |\n|---|---|---|---|{}",
        head.join(" | "),
        "---|".repeat(PARTS.len())
    );
    let settings: [(&str, Setting); 2] = [("standalone", standalone), ("cluster node", cluster)];
    for (name, setting) in settings {
        if !want(name.split(' ').next().unwrap()) {
            continue;
        }
        for (label, who) in [
            ("nobody", Waiters::Nobody),
            ("1,000 BLPOP", Waiters::Blpop),
            ("dlock on 1,000 keys", Waiters::Dlock),
        ] {
            let out = setting(&dir, who);
            let per_s = |n: u64| format!("{:.0}k", n as f64 / SECONDS as f64 / 1000.0);
            let total = callgrind_total(&out).expect("callgrind summary line");
            let cells: Vec<String> = parts(&out).into_iter().map(per_s).collect();
            let woke = wakeups(&out) as f64 / SECONDS as f64;
            println!(
                "| {name} | {label} | {woke:.1} | {} | {} |",
                per_s(total),
                cells.join(" | ")
            );
        }
    }
    eprintln!("callgrind files in {}", dir.display());
}
