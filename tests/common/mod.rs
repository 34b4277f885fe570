//! Shared helpers for the module's integration tests: a simplified reply type, command
//! helpers, blocked-waiter threads and parsers for DLOCK.INFO / INFO dlock.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

pub use dlock_testutil::{wait_for, Server};
pub use redis::{Connection, Value};

/// A server reply in a form that is easy to compare and print.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(String),
    Status(String),
    Arr(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Bool(bool),
    Double(String),
    /// A server error: `CODE detail` as the server sent it (e.g. `ERR syntax error`).
    Err(String),
    /// Not a reply: the connection failed (I/O error, time-out).
    Io(String),
}

impl Reply {
    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil)
    }
    pub fn is_err(&self) -> bool {
        matches!(self, Reply::Err(_))
    }
    pub fn int(&self) -> i64 {
        match self {
            Reply::Int(i) => *i,
            Reply::Bulk(s) | Reply::Status(s) => s
                .parse()
                .unwrap_or_else(|_| panic!("expected an integer, got {self:?}")),
            _ => panic!("expected an integer, got {self:?}"),
        }
    }
    pub fn str(&self) -> String {
        match self {
            Reply::Bulk(s) | Reply::Status(s) => s.clone(),
            Reply::Int(i) => i.to_string(),
            _ => panic!("expected a string, got {self:?}"),
        }
    }
    pub fn arr(&self) -> Vec<Reply> {
        match self {
            Reply::Arr(a) => a.clone(),
            _ => panic!("expected an array, got {self:?}"),
        }
    }
    pub fn err_text(&self) -> String {
        match self {
            Reply::Err(s) => s.clone(),
            _ => panic!("expected an error reply, got {self:?}"),
        }
    }
}

pub fn to_reply(v: Value) -> Reply {
    match v {
        Value::Nil => Reply::Nil,
        Value::Int(i) => Reply::Int(i),
        Value::BulkString(b) => Reply::Bulk(String::from_utf8_lossy(&b).into_owned()),
        Value::SimpleString(s) => Reply::Status(s),
        Value::Okay => Reply::Status("OK".into()),
        Value::Array(a) | Value::Set(a) => Reply::Arr(a.into_iter().map(to_reply).collect()),
        Value::Map(m) => Reply::Map(
            m.into_iter()
                .map(|(k, v)| (to_reply(k), to_reply(v)))
                .collect(),
        ),
        Value::Boolean(b) => Reply::Bool(b),
        Value::Double(d) => Reply::Double(d.to_string()),
        Value::VerbatimString { text, .. } => Reply::Bulk(text),
        Value::BigNumber(n) => Reply::Bulk(n.to_string()),
        Value::Attribute { data, .. } => to_reply(*data),
        Value::Push { kind, data } => Reply::Arr(
            std::iter::once(Reply::Bulk(format!("{kind:?}")))
                .chain(data.into_iter().map(to_reply))
                .collect(),
        ),
        Value::ServerError(e) => {
            let e: redis::RedisError = e.into();
            err_reply(e)
        }
    }
}

fn err_reply(e: redis::RedisError) -> Reply {
    match e.code() {
        Some(code) => match e.detail() {
            Some(d) => Reply::Err(format!("{code} {d}")),
            None => Reply::Err(code.to_string()),
        },
        None => Reply::Io(e.to_string()),
    }
}

pub fn result_to_reply(r: redis::RedisResult<Value>) -> Reply {
    match r {
        Ok(v) => to_reply(v),
        Err(e) => err_reply(e),
    }
}

/// Run a command given as words.
pub fn cmd(con: &mut Connection, args: &[&str]) -> Reply {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    result_to_reply(c.query::<Value>(con))
}

/// Run a command given as binary words.
pub fn cmd_bytes(con: &mut Connection, args: &[Vec<u8>]) -> Reply {
    let mut c = redis::Cmd::new();
    for a in args {
        c.arg(a.as_slice());
    }
    result_to_reply(c.query::<Value>(con))
}

/// Assert an error reply that starts with `prefix` (the whole text, or the part before details).
#[track_caller]
pub fn assert_err(r: &Reply, prefix: &str) {
    match r {
        Reply::Err(s) if s.starts_with(prefix) => {}
        _ => panic!("expected an error starting with {prefix:?}, got {r:?}"),
    }
}

#[allow(unused_imports)]
pub use dlock_core::error::WRONGTYPE;

pub fn acquire(con: &mut Connection, key: &str, owner: &str, lease: u64) -> Reply {
    cmd(con, &["DLOCK.ACQUIRE", key, owner, &lease.to_string()])
}
pub fn release(con: &mut Connection, key: &str, owner: &str) -> Reply {
    cmd(con, &["DLOCK.RELEASE", key, owner])
}
pub fn renew(con: &mut Connection, key: &str, owner: &str, lease: u64) -> Reply {
    cmd(con, &["DLOCK.RENEW", key, owner, &lease.to_string()])
}
pub fn rwlock(con: &mut Connection, key: &str, owner: &str, mode: &str, lease: u64) -> Reply {
    cmd(con, &["DLOCK.RWLOCK", key, owner, mode, &lease.to_string()])
}

/// HGETALL as an ordered map (lossy UTF-8).
pub fn hgetall(con: &mut Connection, key: &str) -> BTreeMap<String, String> {
    let v: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(key).query(con).expect("HGETALL");
    v.into_iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(&k).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            )
        })
        .collect()
}

pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}
pub fn exists(con: &mut Connection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query(con).expect("EXISTS");
    n == 1
}
pub fn dbsize(con: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}
pub fn get_int(con: &mut Connection, key: &str) -> Option<i64> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}
/// DUMP of a key without its trailing version/CRC differences (raw bytes, None if absent).
pub fn dump(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
}
pub fn ping(con: &mut Connection) {
    let r = cmd(con, &["PING"]);
    assert_eq!(
        r,
        Reply::Status("PONG".into()),
        "server must still answer PING"
    );
}

/// Assert `pttl` is in (lease - slack, lease].
#[track_caller]
pub fn assert_pttl_about(con: &mut Connection, key: &str, lease: i64) {
    let t = pttl(con, key);
    assert!(
        t <= lease && t > lease - 1000,
        "PTTL of {key} = {t}, expected about {lease}"
    );
}

/// DLOCK.INFO (RESP2 flat array) as an ordered list of (field, value).
pub fn dinfo(con: &mut Connection, key: &str) -> Vec<(String, Reply)> {
    let r = cmd(con, &["DLOCK.INFO", key]);
    let a = match &r {
        Reply::Arr(a) => a.clone(),
        _ => panic!("DLOCK.INFO {key}: expected a flat array, got {r:?}"),
    };
    assert!(
        a.len() % 2 == 0,
        "DLOCK.INFO: odd number of elements: {r:?}"
    );
    a.chunks(2).map(|c| (c[0].str(), c[1].clone())).collect()
}
pub fn dinfo_field(con: &mut Connection, key: &str, field: &str) -> Reply {
    dinfo(con, key)
        .into_iter()
        .find(|(k, _)| k == field)
        .unwrap_or_else(|| panic!("DLOCK.INFO {key} has no field {field}"))
        .1
}
pub fn waiters(con: &mut Connection, key: &str) -> i64 {
    dinfo_field(con, key, "waiters").int()
}
/// Poll DLOCK.INFO until `key` has exactly `n` waiters.
#[track_caller]
pub fn wait_waiters(con: &mut Connection, key: &str, n: i64) {
    let what = format!("{n} waiters on {key}");
    wait_for(Duration::from_secs(5), &what, || {
        (waiters(con, key) == n).then_some(())
    });
}

/// `INFO dlock` as name -> integer.
pub fn info_dlock(con: &mut Connection) -> HashMap<String, i64> {
    info_section(con, "dlock")
}

/// One `INFO` section's integer fields as name -> value.
pub fn info_section(con: &mut Connection, section: &str) -> HashMap<String, i64> {
    let s: String = redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_else(|e| panic!("INFO {section}: {e}"));
    s.lines()
        .filter(|l| !l.starts_with('#') && l.contains(':'))
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// A command running on its own connection in its own thread (for blocking waiters).
pub struct Pending {
    rx: Receiver<(Reply, Duration, Instant)>,
    /// CLIENT ID of the waiter's connection.
    pub client_id: i64,
    pub args: Vec<String>,
}

/// Start `args` on a fresh connection in a new thread; returns once the connection is up
/// (the command may not have reached the server yet: confirm with [`wait_waiters`]).
pub fn spawn_cmd(srv: &Server, args: &[&str]) -> Pending {
    let (idtx, idrx) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    let mut con = srv.connection();
    let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let a2 = owned.clone();
    std::thread::spawn(move || {
        let id: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query(&mut con)
            .expect("CLIENT ID");
        idtx.send(id).unwrap();
        let words: Vec<&str> = a2.iter().map(|s| s.as_str()).collect();
        let t0 = Instant::now();
        let r = cmd(&mut con, &words);
        let _ = tx.send((r, t0.elapsed(), Instant::now()));
        // keep the connection open until the reply is consumed or the test ends
        drop(con);
    });
    let client_id = idrx
        .recv_timeout(Duration::from_secs(10))
        .expect("waiter connection");
    Pending {
        rx,
        client_id,
        args: owned,
    }
}

impl Pending {
    /// The reply (and how long the command took), or panic after `timeout`.
    #[track_caller]
    pub fn wait(&self, timeout: Duration) -> (Reply, Duration) {
        let (r, d, _) = self.wait_at(timeout);
        (r, d)
    }
    /// The reply, how long the command took, and when the reply arrived.
    #[track_caller]
    pub fn wait_at(&self, timeout: Duration) -> (Reply, Duration, Instant) {
        match self.rx.recv_timeout(timeout) {
            Ok(v) => v,
            Err(_) => panic!("no reply to {:?} within {timeout:?}", self.args),
        }
    }
    /// Just the reply, waiting up to 5 s.
    #[track_caller]
    pub fn reply(&self) -> Reply {
        self.wait(Duration::from_secs(5)).0
    }
    /// The reply if it already arrived.
    pub fn try_reply(&self) -> Option<Reply> {
        self.rx.try_recv().ok().map(|v| v.0)
    }
    /// Assert that no reply arrives within `d` (the command is still blocked).
    #[track_caller]
    pub fn assert_blocked(&self, d: Duration) {
        if let Ok(v) = self.rx.recv_timeout(d) {
            panic!(
                "{:?} should still be blocked, but answered {:?}",
                self.args, v.0
            );
        }
    }
}

/// Spawn a waiter and wait until DLOCK.INFO counts it (`expect_waiters` in total on `key`).
#[track_caller]
pub fn enqueue(
    srv: &Server,
    con: &mut Connection,
    key: &str,
    args: &[&str],
    expect_waiters: i64,
) -> Pending {
    let p = spawn_cmd(srv, args);
    wait_waiters(con, key, expect_waiters);
    p
}

/// The RESP encoding of a command (for raw-socket clients).
pub fn resp_encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Redis Cluster hash slot of a key (the module's own rule, from `dlock-core`).
pub fn key_slot(key: &[u8]) -> u16 {
    dlock_core::names::key_slot(key)
}

/// The fencing counter's key name for lock `k`.
pub fn fence_key(k: &str) -> String {
    String::from_utf8(dlock_core::names::fence_key(k.as_bytes())).expect("UTF-8 key")
}

/// Redisson's unlock channel for `k` with the default prefix.
pub fn channel(k: &str) -> String {
    channel_with(&dlock_core::config::Config::default().channel_prefix, k)
}
pub fn channel_with(prefix: &str, k: &str) -> String {
    String::from_utf8(dlock_core::names::unlock_channel(prefix, k.as_bytes())).expect("UTF-8 key")
}

pub const SEC: Duration = Duration::from_secs(1);
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Start a replica of `master` (with or without the module) and wait until it is in sync.
pub fn start_replica(master: &Server, with_module: bool) -> Server {
    let port = master.port().to_string();
    let mut b = Server::builder().args(["--replicaof", "127.0.0.1", port.as_str()]);
    if !with_module {
        b = b.without_module();
    }
    let replica = b.start();
    let mut rc = replica.connection();
    wait_for(
        std::time::Duration::from_secs(20),
        "replica link up",
        || {
            let s: String = redis::cmd("INFO").arg("replication").query(&mut rc).ok()?;
            s.contains("master_link_status:up").then_some(())
        },
    );
    let mut mc = master.connection();
    sync_replicas(&mut mc);
    replica
}

/// Redis `WAIT 1 2000` on the master: every write so far reached the replica.
#[track_caller]
pub fn sync_replicas(master: &mut Connection) {
    let n: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(master).unwrap();
    assert!(n >= 1, "replica did not acknowledge (WAIT 1 2000 -> {n})");
}

/// Assert the replica shows the same type, hash and TTL (± 300 ms) for each key.
#[track_caller]
pub fn assert_mirrored(master: &mut Connection, replica: &mut Connection, keys: &[&str]) {
    sync_replicas(master);
    for k in keys {
        let tm: String = redis::cmd("TYPE").arg(*k).query(master).unwrap();
        let tr: String = redis::cmd("TYPE").arg(*k).query(replica).unwrap();
        assert_eq!(tr, tm, "TYPE of {k} on the replica");
        match tm.as_str() {
            "hash" => assert_eq!(hgetall(replica, k), hgetall(master, k), "HGETALL {k}"),
            "string" => {
                let a: Option<String> = redis::cmd("GET").arg(*k).query(master).unwrap();
                let b: Option<String> = redis::cmd("GET").arg(*k).query(replica).unwrap();
                assert_eq!(b, a, "GET {k}");
            }
            _ => {}
        }
        let pm = pttl(master, k);
        let pr = pttl(replica, k);
        if pm < 0 || pr < 0 {
            assert_eq!(pr, pm, "PTTL {k} (master {pm}, replica {pr})");
        } else {
            assert!(
                (pm - pr).abs() <= 300,
                "PTTL {k}: master {pm}, replica {pr}"
            );
        }
    }
}

/// A pub/sub connection subscribed to `chan` (the connection is leaked so that the
/// subscription lives as long as the test: dropping a `PubSub` unsubscribes).
pub fn subscriber(srv: &Server, chan: &str) -> redis::PubSub<'static> {
    let con: &'static mut Connection = Box::leak(Box::new(srv.connection()));
    con.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut ps = con.as_pubsub();
    ps.subscribe(chan).unwrap();
    ps
}

/// Runs this test binary again as worker processes, one per spec: each runs only the test
/// named `worker_test` with the environment variable `env` set to its spec (the worker test
/// does nothing without it). Panics with the output of a worker that failed.
pub fn run_worker_processes(worker_test: &str, env: &str, specs: &[String]) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = specs
        .iter()
        .map(|spec| {
            std::process::Command::new(&exe)
                .args(["--exact", worker_test, "--nocapture", "--test-threads", "1"])
                .env(env, spec)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (spec, ch) in specs.iter().zip(children) {
        let out = ch.wait_with_output().unwrap();
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && so.contains("1 passed"),
            "worker {spec} failed or did not run {worker_test}:\n{so}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
