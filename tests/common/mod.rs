//! The DLOCK protocol helpers of the module's integration tests: a simplified reply type,
//! the commands, blocked-waiter threads, DLOCK.INFO / INFO dlock, and the names (fence key,
//! unlock channel, slot) from `dlock-core`. Servers, topologies, INFO fields, key readers and
//! worker processes come from `dlock_testutil`; the few every test needs are re-exported here.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

pub use dlock_testutil::keys::*;
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
pub use dlock_testutil::waiters;
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
    dlock_testutil::info_section(con, "dlock")
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

/// The fencing counter of lock `k`'s slot.
pub fn slot_fence_key(k: &str) -> String {
    String::from_utf8(dlock_core::names::slot_fence_key(k.as_bytes())).expect("UTF-8 key")
}

/// The per-lock fencing counter that earlier versions kept for lock `k`.
pub fn legacy_fence_key(k: &str) -> String {
    String::from_utf8(dlock_core::names::legacy_fence_key(k.as_bytes())).expect("UTF-8 key")
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
