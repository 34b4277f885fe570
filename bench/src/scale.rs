//! `make bench-scale`: what dlock costs as the work grows, each figure against its peer in the
//! same run: memory per held lock (against Redisson's layout on a plain server), memory per
//! blocked waiter (against a blocked BLPOP), the CPU a `SET` on an unrelated key costs while
//! clients wait on 1, 100 and 1,000 keys (against no waiter), the server's idle CPU with
//! waiters on 10, 100 and 1,000 keys, the fencing state after many distinct names, and the
//! server CPU of renewing 10,000 holds of one client.
//!
//! Results go to the "Scale" section of docs/SCALE.md (between markers, replaced on each
//! run) with `docs/bench-scale.svg`, a chart drawn here. `--quick` runs small numbers and only
//! checks the bounds that hold on any machine (one fencing key per slot used at most, nothing
//! left behind once waiters leave): the short form run by `make test`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dlock_testutil::Server;

/// Sizes of one run.
struct Sizes {
    locks: usize,
    waiters: usize,
    fence_names: usize,
    sets: usize,
    renews: usize,
    idle: Duration,
    reps: usize,
}

/// One measured row: what, dlock's figure, the peer's, the unit.
struct Row {
    what: String,
    dlock: f64,
    peer: Option<(String, f64)>,
    unit: &'static str,
}

/// Server CPU time so far, all threads, in nanoseconds from the scheduler
/// (`/proc/<pid>/task/*/schedstat`; `/proc/<pid>/stat` counts 10 ms ticks, too coarse for an
/// idle server and biased by periodic wake-ups).
fn cpu(srv: &Server) -> Duration {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", srv.pid())).expect("/proc tasks");
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

fn used_memory(c: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

fn dbsize(c: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).unwrap()
}

/// Runs `cmds(i)` for `i` in `0..n`, pipelined in chunks.
pub(crate) fn pipelined(
    c: &mut redis::Connection,
    n: usize,
    cmds: impl Fn(&mut redis::Pipeline, usize),
) {
    let mut i = 0;
    while i < n {
        let mut p = redis::pipe();
        for j in i..(i + 10_000).min(n) {
            cmds(&mut p, j);
        }
        let _: Vec<redis::Value> = p.query(c).unwrap();
        i += 10_000;
    }
}

fn command(args: &[String]) -> Vec<u8> {
    let parts: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    crate::resp::encode(&parts)
}

/// Clients blocked on `args(i)`, one raw connection each.
pub(crate) fn block(
    port: u16,
    n: usize,
    args: impl Fn(usize) -> Vec<String>,
) -> Vec<BufReader<TcpStream>> {
    (0..n)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(&command(&args(i))).unwrap();
            BufReader::new(s)
        })
        .collect()
}

pub(crate) fn blocked_clients(c: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("clients").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

pub(crate) fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(60), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Bytes per held lock: dlock's exclusive locks, Redisson's layout (HSET + PEXPIRE) on a
/// plain server.
fn memory_per_lock(s: &Sizes, rows: &mut Vec<Row>) {
    let per = |module: bool| {
        let srv = if module {
            Server::start()
        } else {
            Server::builder().without_module().start()
        };
        let mut c = srv.connection();
        let before = used_memory(&mut c);
        pipelined(&mut c, s.locks, |p, i| {
            let k = format!("lock:{i}");
            if module {
                p.cmd("DLOCK.ACQUIRE").arg(&k).arg(OWNER).arg(600_000);
            } else {
                p.cmd("HSET").arg(&k).arg(OWNER).arg(1);
                p.cmd("PEXPIRE").arg(&k).arg(600_000);
            }
        });
        assert_eq!(dbsize(&mut c), s.locks as i64);
        (used_memory(&mut c) - before) as f64 / s.locks as f64
    };
    rows.push(Row {
        what: format!("memory per held lock ({} locks)", s.locks),
        dlock: per(true),
        peer: Some(("Redisson layout, plain server".into(), per(false))),
        unit: "bytes",
    });
}

const OWNER: &str = "4f8e0a6c-5d1b-4c7e-9a3f-2b6d8e1c0f47:1";

/// Bytes per blocked client: DLOCK.ACQUIRE WAIT against BLPOP, each on its own server.
fn memory_per_waiter(s: &Sizes, rows: &mut Vec<Row>) {
    let per = |module: bool| {
        let srv = if module {
            // Every waiter on one key, as BLPOP's are.
            Server::builder()
                .module_args(["max-waiters-per-key", "0", "max-waiters", "0"])
                .args(["--maxclients", "20000"])
                .start()
        } else {
            Server::builder()
                .without_module()
                .args(["--maxclients", "20000"])
                .start()
        };
        let mut c = srv.connection();
        if module {
            let _: i64 = redis::cmd("DLOCK.ACQUIRE")
                .arg("w")
                .arg("holder")
                .arg(600_000)
                .query(&mut c)
                .unwrap();
        }
        // Idle connections first: the difference is what blocking adds per client.
        let idle = block(srv.port(), s.waiters, |_| vec!["PING".into()]);
        let mut idle: Vec<_> = idle
            .into_iter()
            .map(|mut r| {
                let mut l = String::new();
                r.read_line(&mut l).unwrap();
                r
            })
            .collect();
        let before = used_memory(&mut c);
        for (i, r) in idle.iter_mut().enumerate() {
            let a: Vec<String> = if module {
                vec![
                    "DLOCK.ACQUIRE".into(),
                    "w".into(),
                    format!("o{i}"),
                    "600000".into(),
                    "WAIT".into(),
                    "0".into(),
                ]
            } else {
                vec!["BLPOP".into(), "w".into(), "0".into()]
            };
            r.get_mut().write_all(&command(&a)).unwrap();
        }
        wait_until("waiters blocked", || {
            blocked_clients(&mut c) == s.waiters as i64
        });
        let per = (used_memory(&mut c) - before) as f64 / s.waiters as f64;
        drop(idle);
        wait_until("waiters gone", || blocked_clients(&mut c) == 0);
        per
    };
    rows.push(Row {
        what: format!("memory per blocked waiter ({} waiters)", s.waiters),
        dlock: per(true),
        peer: Some(("blocked BLPOP".into(), per(false))),
        unit: "bytes",
    });
}

/// Server CPU per `SET` of a new key while clients wait on `keys` keys (0: nobody waits).
fn set_cpu(srv: &Server, s: &Sizes, round: &mut usize) -> f64 {
    let mut c = srv.connection();
    // Another database, emptied after each repetition without touching the waited locks.
    let _: () = redis::cmd("SELECT").arg(1).query(&mut c).unwrap();
    let mut v = vec![];
    for _ in 0..s.reps {
        *round += 1;
        let r = *round;
        let t = cpu(srv);
        pipelined(&mut c, s.sets, |p, i| {
            p.cmd("SET").arg(format!("user:{r}:{i}")).arg("v");
        });
        v.push((cpu(srv) - t).as_secs_f64() * 1e9 / s.sets as f64);
        let _: () = redis::cmd("FLUSHDB").arg("SYNC").query(&mut c).unwrap();
    }
    median(v)
}

/// Clients waiting on `keys` locks held by `holder` (one waiter per key).
fn waiters_on(srv: &Server, keys: usize) -> Vec<BufReader<TcpStream>> {
    let mut c = srv.connection();
    pipelined(&mut c, keys, |p, i| {
        p.cmd("DLOCK.ACQUIRE")
            .arg(format!("held:{i}"))
            .arg("holder")
            .arg(600_000);
    });
    let w = block(srv.port(), keys, |i| {
        vec![
            "DLOCK.ACQUIRE".into(),
            format!("held:{i}"),
            "w".into(),
            "600000".into(),
            "WAIT".into(),
            "0".into(),
        ]
    });
    wait_until("waiters queued", || blocked_clients(&mut c) == keys as i64);
    w
}

/// Releases the waiters (disconnects) and the held locks; checks nothing is left.
fn leave(srv: &Server, w: Vec<BufReader<TcpStream>>, keys: usize) {
    drop(w);
    let mut c = srv.connection();
    wait_until("waiters gone", || blocked_clients(&mut c) == 0);
    pipelined(&mut c, keys, |p, i| {
        p.cmd("DEL").arg(format!("held:{i}"));
    });
    let info: String = redis::cmd("INFO").arg("dlock").query(&mut c).unwrap();
    assert!(
        info.contains("dlock_waiters:0"),
        "waiters left behind: {info}"
    );
}

/// The idle CPU of `srv` (% of a core): the median of `s.reps` windows of `s.idle`.
fn idle_cpu(srv: &Server, s: &Sizes) -> f64 {
    let windows = (0..s.reps)
        .map(|_| {
            let t = cpu(srv);
            std::thread::sleep(s.idle);
            (cpu(srv) - t).as_secs_f64() / s.idle.as_secs_f64() * 100.0
        })
        .collect();
    median(windows)
}

/// `server`: another server binary and its name for the rows (`None`: the default server,
/// whose figures also go to the chart).
fn set_overhead_and_idle(
    s: &Sizes,
    server: Option<(&str, &str)>,
    rows: &mut Vec<Row>,
    chart: &mut Vec<(usize, f64, f64)>,
) {
    let (srv, on) = match server {
        Some((name, path)) => (Server::builder().binary(path).start(), format!("{name}: ")),
        None => (Server::start(), String::new()),
    };
    let mut round = 0;
    let base = set_cpu(&srv, s, &mut round);
    let idle_none = idle_cpu(&srv, s);
    rows.push(Row {
        what: format!("{on}server CPU idle, nobody waits"),
        dlock: idle_none,
        peer: None,
        unit: "% of a core",
    });
    // The server's own blocked clients, as many as dlock's most: the peer of the 1,000-key row.
    let blpop = {
        let mut c = srv.connection();
        let w = block(srv.port(), 1000, |i| {
            vec!["BLPOP".into(), format!("list:{i}"), "0".into()]
        });
        wait_until("BLPOP waiters", || blocked_clients(&mut c) == 1000);
        let idle = idle_cpu(&srv, s);
        drop(w);
        wait_until("BLPOP waiters gone", || blocked_clients(&mut c) == 0);
        idle
    };
    rows.push(Row {
        what: format!("{on}server CPU idle, 1000 BLPOP waiters"),
        dlock: blpop,
        peer: Some(("nobody waits".into(), idle_none)),
        unit: "% of a core",
    });
    for keys in [1usize, 10, 100, 1000] {
        let w = waiters_on(&srv, keys);
        let set = set_cpu(&srv, s, &mut round);
        let idle = idle_cpu(&srv, s);
        leave(&srv, w, keys);
        let after = set_cpu(&srv, s, &mut round);
        let pct = (set / base - 1.0) * 100.0;
        if server.is_none() {
            chart.push((keys, pct, idle));
        }
        rows.push(Row {
            what: format!("{on}SET of a new key, clients wait on {keys} keys"),
            dlock: set,
            peer: Some(("nobody waits".into(), base)),
            unit: "ns CPU",
        });
        rows.push(Row {
            what: format!("{on}SET of a new key, after waiters on {keys} keys left"),
            dlock: after,
            peer: Some(("before any wait".into(), base)),
            unit: "ns CPU",
        });
        rows.push(Row {
            what: format!("{on}server CPU idle, clients wait on {keys} keys"),
            dlock: idle,
            peer: Some(("nobody waits".into(), idle_none)),
            unit: "% of a core",
        });
    }
}

/// The idle CPU bound of a cluster node with clients waiting (% of a core).
const CLUSTER_IDLE_BOUND: f64 = 0.5;

/// A cluster node's idle CPU (3 primaries, node 0 measured): nobody waits, and dlock waiters
/// on 10 and 1,000 keys of node 0, each beside as many BLPOP waiters (the server's own
/// blocked clients). The
/// module's poll runs every 100 ms there; slot changes made on the node come as events.
fn cluster_idle(s: &Sizes, server: Option<(&str, &str)>, rows: &mut Vec<Row>) {
    let mut builder = dlock_testutil::Cluster::builder(3);
    let on = match server {
        Some((name, path)) => {
            builder = builder.node(Server::builder().binary(path));
            format!("{name}: ")
        }
        None => String::new(),
    };
    let cl = builder.start();
    let node = &cl.nodes[0];
    // Keys whose slot node 0 serves.
    let keys: Vec<String> = (0..)
        .map(|i| format!("idle:{i}"))
        .filter(|k| cl.key_owner(k) == 0)
        .take(1000)
        .collect();
    let mut c = node.connection();
    let idle_none = idle_cpu(node, s);
    rows.push(Row {
        what: format!("{on}cluster node CPU idle, nobody waits"),
        dlock: idle_none,
        peer: None,
        unit: "% of a core",
    });
    // The server's own blocked clients, as many as dlock's below: an idle connection costs
    // the server's clients' cron whoever blocked it.
    let idle_blpop: Vec<f64> = [10usize, 1000]
        .into_iter()
        .map(|n| {
            let blpop = block(node.port(), n, |i| {
                vec!["BLPOP".into(), keys[i].clone(), "0".into()]
            });
            wait_until("BLPOP waiters", || blocked_clients(&mut c) == n as i64);
            let idle = idle_cpu(node, s);
            drop(blpop);
            wait_until("BLPOP waiters gone", || blocked_clients(&mut c) == 0);
            idle
        })
        .collect();
    for (n, idle_blpop) in [10usize, 1000].into_iter().zip(idle_blpop) {
        pipelined(&mut c, n, |p, i| {
            p.cmd("DLOCK.ACQUIRE")
                .arg(&keys[i])
                .arg("holder")
                .arg(600_000);
        });
        let w = block(node.port(), n, |i| {
            vec![
                "DLOCK.ACQUIRE".into(),
                keys[i].clone(),
                "w".into(),
                "600000".into(),
                "WAIT".into(),
                "0".into(),
            ]
        });
        wait_until("waiters queued", || blocked_clients(&mut c) == n as i64);
        let idle = idle_cpu(node, s);
        let mark = if idle <= CLUSTER_IDLE_BOUND {
            ""
        } else {
            " (over)"
        };
        rows.push(Row {
            what: format!(
                "{on}cluster node CPU idle, clients wait on {n} keys (target ≤ {CLUSTER_IDLE_BOUND}%){mark}"
            ),
            dlock: idle,
            peer: Some((format!("{n} BLPOP waiters"), idle_blpop)),
            unit: "% of a core",
        });
        drop(w);
        wait_until("waiters gone", || blocked_clients(&mut c) == 0);
        pipelined(&mut c, n, |p, i| {
            p.cmd("DEL").arg(&keys[i]);
        });
    }
}

/// Keys and memory after `n` distinct names were acquired and released with FENCE.
fn fencing_state(s: &Sizes, rows: &mut Vec<Row>) {
    let srv = Server::start();
    let mut c = srv.connection();
    let before = used_memory(&mut c);
    pipelined(&mut c, s.fence_names, |p, i| {
        let k = format!("entity:{i}");
        p.cmd("DLOCK.ACQUIRE")
            .arg(&k)
            .arg("o")
            .arg(60_000)
            .arg("FENCE");
        p.cmd("DLOCK.RELEASE").arg(&k).arg("o");
    });
    let keys = dbsize(&mut c);
    let slots: std::collections::BTreeSet<u16> = (0..s.fence_names)
        .map(|i| dlock_core::names::key_slot(format!("entity:{i}").as_bytes()))
        .collect();
    assert!(
        keys as usize <= slots.len(),
        "{keys} fencing keys for {} slots used",
        slots.len()
    );
    rows.push(Row {
        what: format!("fencing keys after {} fenced names", s.fence_names),
        dlock: keys as f64,
        peer: Some(("hash slots used".into(), slots.len() as f64)),
        unit: "keys",
    });
    rows.push(Row {
        what: format!("fencing memory after {} fenced names", s.fence_names),
        dlock: (used_memory(&mut c) - before) as f64,
        peer: None,
        unit: "bytes",
    });
}

/// Server CPU per DLOCK.RENEW, 10,000 holds of one client renewed in one pipeline.
fn renewals(s: &Sizes, rows: &mut Vec<Row>) {
    let srv = Server::start();
    let mut c = srv.connection();
    pipelined(&mut c, s.renews, |p, i| {
        p.cmd("DLOCK.ACQUIRE")
            .arg(format!("r:{i}"))
            .arg(OWNER)
            .arg(30_000);
    });
    let mut v = vec![];
    for _ in 0..s.reps.max(3) {
        let t = cpu(&srv);
        pipelined(&mut c, s.renews, |p, i| {
            p.cmd("DLOCK.RENEW")
                .arg(format!("r:{i}"))
                .arg(OWNER)
                .arg(30_000);
        });
        v.push((cpu(&srv) - t).as_secs_f64() * 1e3);
    }
    rows.push(Row {
        what: format!("server CPU to renew {} holds of one client", s.renews),
        dlock: median(v),
        peer: None,
        unit: "ms CPU",
    });
}

/// The chart: SET overhead (%) and idle CPU (% of a core) against the number of waited keys.
fn svg(chart: &[(usize, f64, f64)]) -> String {
    let (w, h, left, bottom) = (560.0, 260.0, 60.0, 40.0);
    let max_y = chart
        .iter()
        .flat_map(|(_, a, b)| [*a, *b])
        .fold(5.0f64, f64::max)
        .ceil();
    let x = |i: usize| left + (i as f64 + 0.5) * (w - left - 20.0) / chart.len() as f64;
    let y = |v: f64| h - bottom - v.max(0.0) / max_y * (h - bottom - 20.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <line x1=\"{left}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"20\" x2=\"{left}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"4\" y=\"14\">% (max {max_y})</text>\n",
        b = h - bottom,
        r = w - 20.0,
    );
    for (limit, colour) in [(3.0, "#1f77b4"), (1.0, "#d62728")] {
        out += &format!(
            "<line x1=\"{left}\" y1=\"{yy}\" x2=\"{r}\" y2=\"{yy}\" stroke=\"{colour}\" \
             stroke-dasharray=\"4 3\"/>\n",
            yy = y(limit),
            r = w - 20.0
        );
    }
    for (i, (keys, set, idle)) in chart.iter().enumerate() {
        let cx = x(i);
        out += &format!(
            "<rect x=\"{}\" y=\"{}\" width=\"18\" height=\"{}\" fill=\"#1f77b4\"/>\n\
             <rect x=\"{}\" y=\"{}\" width=\"18\" height=\"{}\" fill=\"#d62728\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{keys} keys</text>\n",
            cx - 19.0,
            y(*set),
            h - bottom - y(*set),
            cx + 1.0,
            y(*idle),
            h - bottom - y(*idle),
            cx,
            h - bottom + 16.0
        );
    }
    out += &format!(
        "<text x=\"{left}\" y=\"{}\" fill=\"#1f77b4\">SET CPU overhead % (limit 3)</text>\n\
         <text x=\"{}\" y=\"{}\" fill=\"#d62728\">idle CPU % of a core (limit 1)</text>\n</svg>\n",
        h - 6.0,
        left + 240.0,
        h - 6.0
    );
    out
}

/// A figure as the table shows it: idle CPU to a hundredth of a point (the bounds are 0.5%
/// and 1%), the rest to a tenth.
fn figure(v: f64, unit: &str) -> String {
    if unit == "% of a core" {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

fn table(rows: &[Row], server: &str) -> String {
    let mut t = format!(
        "Server: {server}. Measured by `make bench-scale` (CPU from the scheduler's /proc schedstat, memory from \
         `INFO memory`; medians of repetitions).\n\n\
         | what | dlock | peer | peer's figure | ratio |\n|---|---|---|---|---|\n"
    );
    for r in rows {
        let (peer, pv, ratio) = match &r.peer {
            Some((name, v)) => (
                name.clone(),
                format!("{} {}", figure(*v, r.unit), r.unit),
                if *v != 0.0 {
                    format!("{:.2}×", r.dlock / v)
                } else {
                    "—".into()
                },
            ),
            None => ("—".into(), "—".into(), "—".into()),
        };
        t += &format!(
            "| {} | {} {} | {peer} | {pv} | {ratio} |\n",
            r.what,
            figure(r.dlock, r.unit),
            r.unit
        );
    }
    t
}

const BEGIN: &str = "<!-- bench-scale:begin -->";
const END: &str = "<!-- bench-scale:end -->";

/// `only`: `idle` runs the SET and idle rows only (standalone and cluster, every server),
/// printed and not written.
pub fn run(quick: bool, write: bool, only: &[String]) {
    let idle_only = only.iter().any(|o| o == "idle");
    let write = write && !idle_only;
    let s = if quick {
        Sizes {
            locks: 10_000,
            waiters: 200,
            fence_names: 10_000,
            sets: 20_000,
            renews: 10_000,
            idle: Duration::from_millis(500),
            reps: 1,
        }
    } else {
        Sizes {
            locks: 1_000_000,
            waiters: 10_000,
            fence_names: 1_000_000,
            sets: 500_000,
            renews: 10_000,
            idle: Duration::from_secs(5),
            reps: 3,
        }
    };
    let mut rows = vec![];
    let mut chart = vec![];
    if !idle_only {
        fencing_state(&s, &mut rows);
    }
    set_overhead_and_idle(&s, None, &mut rows, &mut chart);
    // The other supported servers (`make bench-scale` installs them as `make test-matrix`
    // does): the wake-up paths differ per server, so the SET and idle rows are run on each.
    let others = std::env::var("DLOCK_SCALE_SERVERS").unwrap_or_default();
    for spec in others.split_whitespace() {
        let (name, path) = spec
            .split_once('=')
            .expect("DLOCK_SCALE_SERVERS: name=path ...");
        set_overhead_and_idle(&s, Some((name, path)), &mut rows, &mut chart);
    }
    // Cluster nodes: the default server, then the others.
    cluster_idle(&s, None, &mut rows);
    for spec in others.split_whitespace() {
        if let Some((name, path)) = spec.split_once('=') {
            cluster_idle(&s, Some((name, path)), &mut rows);
        }
    }
    if !idle_only {
        memory_per_waiter(&s, &mut rows);
        memory_per_lock(&s, &mut rows);
        renewals(&s, &mut rows);
    }
    let server = {
        let srv = Server::start();
        let mut c = srv.connection();
        let info: String = redis::cmd("INFO").arg("server").query(&mut c).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    let text = table(&rows, &server);
    println!("{text}");
    if !write {
        return;
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/SCALE.md");
    let doc = std::fs::read_to_string(path).expect("docs/SCALE.md");
    let section = format!(
        "{BEGIN}\n## Scale (`make bench-scale`)\n\n{text}\n![SET overhead and idle CPU against \
         the number of waited keys](bench-scale.svg)\n{END}"
    );
    let doc = match (doc.find(BEGIN), doc.find(END)) {
        (Some(a), Some(b)) => format!("{}{section}{}", &doc[..a], &doc[b + END.len()..]),
        _ => format!("{}\n{section}\n", doc.trim_end()),
    };
    std::fs::write(path, doc).expect("write docs/SCALE.md");
    let svg_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/bench-scale.svg");
    std::fs::write(svg_path, svg(&chart)).expect("write docs/bench-scale.svg");
}
