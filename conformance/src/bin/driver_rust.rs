//! The conformance driver of the Rust client (`dlock-client`): JSON requests on stdin, one
//! reply per request and the hold events on stdout (see conformance/README.md). Requests
//! run concurrently, each in its own task.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_client::{
    Backend, Client, ConnectReason, Error, LockGuard, LostReason, LostSignal, Owner, SemaphoreGuard,
};
use dlock_conformance::clock::now_us;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// A granted hold.
enum Guard {
    Lock(LockGuard),
    Permits(SemaphoreGuard),
}

impl Guard {
    fn lost(&self) -> LostSignal {
        match self {
            Guard::Lock(g) => g.lost(),
            Guard::Permits(g) => g.lost(),
        }
    }
}

struct Hold {
    /// `None` once released (`release` consumes the guard: a second release cannot be
    /// written in Rust, so the driver answers it `not_held`).
    guard: Option<Guard>,
    /// The hold's signal, kept after the release (`held` asks it).
    lost: LostSignal,
    /// Set before a release, so the sampler does not report it as a loss.
    releasing: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Default)]
struct State {
    connect: Option<Map<String, Value>>,
    /// One client per lease (the Rust client's lease is a client setting), all with one
    /// owner prefix.
    clients: HashMap<u64, Client>,
    owners: HashMap<String, Owner>,
    holds: HashMap<String, Hold>,
    pending: HashMap<u64, tokio::task::AbortHandle>,
    sample_ms: u64,
    /// `close` was asked: later requests go to the closed clients (never a new one).
    closed: bool,
}

struct Driver {
    state: Mutex<State>,
    prefix: String,
    out: mpsc::UnboundedSender<Value>,
}

type Reply = Result<Map<String, Value>, Error>;

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn reason(r: LostReason) -> &'static str {
    match r {
        LostReason::NotHeld => "not_held",
        LostReason::LeaseExpired => "lease_expired",
        LostReason::Released => "released",
        LostReason::NotReplicated => "not_replicated",
        LostReason::Closed => "closed",
        _ => "other",
    }
}

/// The protocol's error kinds.
fn error_json(e: &Error) -> Value {
    let kind = match e {
        Error::NotHeld(_) => "not_held",
        Error::Deadlock { .. } => "deadlock",
        Error::WrongType { .. } => "wrong_type",
        Error::Config(m) if m.contains("dlock module") => "module_not_loaded",
        Error::Config(_) => "config",
        Error::Unsupported(_) => "unsupported",
        Error::Redirected { .. } => "redirected",
        Error::Closed => "closed",
        Error::Timeout(_)
        | Error::Connect {
            reason: ConnectReason::Timeout,
            ..
        } => "timeout",
        e if e.is_connection() => "connection",
        _ => "other",
    };
    let class = format!("{e:?}");
    let class = class
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("Error")
        .to_string();
    json!({"kind": kind, "class": class, "message": e.to_string()})
}

impl Driver {
    fn say(&self, v: Value) {
        let _ = self.out.send(v);
    }

    async fn client(&self, lease_ms: Option<u64>) -> Result<Client, Error> {
        let lease_ms = lease_ms.unwrap_or(30_000);
        let connect = {
            let st = self.state.lock().unwrap();
            if let Some(c) = st.clients.get(&lease_ms) {
                return Ok(c.clone());
            }
            // Closed: the closed client answers (with Error::Closed), not a new one.
            if let Some(c) = st.clients.values().next().filter(|_| st.closed) {
                return Ok(c.clone());
            }
            st.connect
                .clone()
                .ok_or_else(|| Error::Config("not connected".into()))?
        };
        let c = self.build(&connect, lease_ms).await?;
        Ok(self
            .state
            .lock()
            .unwrap()
            .clients
            .entry(lease_ms)
            .or_insert(c)
            .clone())
    }

    async fn build(&self, req: &Map<String, Value>, lease_ms: u64) -> Result<Client, Error> {
        let list = |k: &str| -> Vec<String> {
            req.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(|s| format!("redis://{s}/"))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut b = match req.get("topology").and_then(Value::as_str) {
            Some("sentinel") => {
                Client::sentinel_builder(list("sentinels"), req["service"].as_str().unwrap_or("m"))
            }
            Some("cluster") => Client::cluster_builder(list("nodes")),
            _ => Client::builder(req["url"].as_str().unwrap_or("")),
        };
        // Rust's types refuse what the protocol may send (an unknown backend, a negative
        // duration): those answer `config` here, where a program would convert them.
        b = b
            .lease(Duration::from_millis(lease_ms))
            .owner_prefix(self.prefix.clone())
            .backend(match req.get("backend").and_then(Value::as_str) {
                None | Some("auto") => Backend::Auto,
                Some("native") => Backend::Native,
                Some("script") => Backend::Script,
                Some(other) => return Err(Error::Config(format!("unknown backend {other:?}"))),
            });
        match req.get("bind_ms") {
            Some(Value::Null) => b = b.no_bind(),
            Some(v) => b = b.bind_grace(Some(duration(v, "bind_ms")?)),
            None => {}
        }
        if let Some(v) = req.get("response_timeout_ms") {
            b = b.response_timeout(duration(v, "response_timeout_ms")?);
        }
        b.build().await
    }

    fn owner(&self, client: &Client, label: &str) -> Owner {
        self.state
            .lock()
            .unwrap()
            .owners
            .entry(label.to_string())
            .or_insert_with(|| client.owner())
            .clone()
    }

    async fn handle(self: &Arc<Self>, id: u64, req: Map<String, Value>) -> Reply {
        let op = req.get("op").and_then(Value::as_str).unwrap_or("");
        let s = |k: &str| req.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let hold = s("hold");
        match op {
            "connect" => {
                self.state.lock().unwrap().sample_ms =
                    req.get("sample_ms").and_then(Value::as_u64).unwrap_or(2);
                let c = self.build(&req, 30_000).await?;
                let native = c.is_native();
                let mut st = self.state.lock().unwrap();
                st.connect = Some(req.clone());
                st.clients.insert(30_000, c);
                Ok(obj(json!({"native": native})))
            }
            "acquire" => self.acquire(id, &req).await,
            "release" => {
                let (guard, lost) = {
                    let mut st = self.state.lock().unwrap();
                    let Some(h) = st.holds.get_mut(&hold) else {
                        return Err(Error::NotHeld(hold));
                    };
                    h.releasing.store(true, std::sync::atomic::Ordering::SeqCst);
                    (h.guard.take(), h.lost.clone())
                };
                // Released already: `release(self)` consumed the guard.
                let Some(guard) = guard else {
                    return Err(Error::NotHeld(hold));
                };
                match guard {
                    Guard::Lock(g) => g.release().await?,
                    Guard::Permits(g) => g.release().await?,
                }
                Ok(obj(
                    json!({"released": lost.check() == Some(LostReason::Released)}),
                ))
            }
            "renew" => {
                // Renew outside the state lock: take the guard out for the call.
                let guard = match self.state.lock().unwrap().holds.get_mut(&hold) {
                    Some(h) => h.guard.take(),
                    None => None,
                };
                let Some(guard) = guard else {
                    return Err(Error::NotHeld(hold));
                };
                let res = match &guard {
                    Guard::Lock(g) => g.renew().await,
                    Guard::Permits(g) => g.renew().await,
                };
                if let Some(h) = self.state.lock().unwrap().holds.get_mut(&hold) {
                    h.guard = Some(guard);
                }
                res?;
                Ok(obj(json!({"renewed": true})))
            }
            "held" => {
                let lost = self
                    .state
                    .lock()
                    .unwrap()
                    .holds
                    .get(&hold)
                    .map(|h| h.lost.clone());
                // Never granted (refused, timed out, cancelled).
                let Some(lost) = lost else {
                    return Ok(obj(json!({"held": false, "reason": "not_granted"})));
                };
                Ok(match lost.check() {
                    None => obj(json!({"held": true})),
                    Some(r) => obj(json!({"held": false, "reason": reason(r)})),
                })
            }
            "cancel" => {
                let target = req.get("target").and_then(Value::as_u64).unwrap_or(0);
                if let Some(h) = self.state.lock().unwrap().pending.remove(&target) {
                    h.abort();
                }
                Ok(Map::new())
            }
            "waiters" | "info" => {
                let c = self.client(None).await?;
                let w = c.waiters(&s("key")).await?;
                let rows: Vec<Value> = w
                    .iter()
                    .map(|w| {
                        json!([
                            w.owner,
                            format!("{:?}", w.request).to_lowercase(),
                            w.waited.as_millis() as u64,
                            w.timeout_left.map_or(-1, |d| d.as_millis() as i64)
                        ])
                    })
                    .collect();
                if op == "waiters" {
                    return Ok(obj(json!({"waiters": rows})));
                }
                let mut conn = c.shared_connection();
                let v: redis::Value = redis::cmd("DLOCK.INFO")
                    .arg(s("key"))
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| Error::Server(e.to_string()))?;
                Ok(obj(json!({"info": info_json(v, rows)})))
            }
            "owner_id" => {
                let c = self.client(None).await?;
                Ok(obj(json!({"owner_id": self.owner(&c, &s("owner")).id()})))
            }
            "close" => {
                // Releases nothing (close never does); later requests get Error::Closed
                // from these clients.
                let clients: Vec<Client> = {
                    let mut st = self.state.lock().unwrap();
                    st.closed = true;
                    st.clients.values().cloned().collect()
                };
                for c in clients {
                    c.close().await;
                }
                Ok(Map::new())
            }
            other => Err(Error::Config(format!("unknown op {other:?}"))),
        }
    }

    async fn acquire(self: &Arc<Self>, _id: u64, req: &Map<String, Value>) -> Reply {
        let s = |k: &str| req.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let n = |k: &str| req.get(k).and_then(Value::as_u64);
        let lease = match req.get("lease_ms") {
            None | Some(Value::Null) => None,
            Some(v) => Some(duration(v, "lease_ms")?.as_millis() as u64),
        };
        let client = self.client(lease).await?;
        let owner = self.owner(
            &client,
            req.get("owner").and_then(Value::as_str).unwrap_or("main"),
        );
        let key = s("key");
        let wait = match req.get("wait_ms") {
            None | Some(Value::Null) => None,
            Some(v) => Some(duration(v, "wait_ms")?),
        };
        let kind = req.get("kind").and_then(Value::as_str).unwrap_or("lock");
        let guard = if kind == "semaphore" {
            let sem = client.semaphore_as(&key, n("capacity").unwrap_or(1) as u32, &owner);
            let count = n("count").unwrap_or(1) as u32;
            match wait {
                None => Some(sem.acquire(count).await?),
                Some(w) if w.is_zero() => sem.try_acquire(count).await?,
                Some(w) => sem.try_acquire_for(count, w, None).await?,
            }
            .map(Guard::Permits)
        } else {
            let mut lock = match kind {
                "read" => client.rwlock_as(&key, &owner).read(),
                "write" => client.rwlock_as(&key, &owner).write(),
                _ => client.lock_as(&key, &owner),
            };
            if req.get("fence") == Some(&Value::Bool(true)) {
                lock = lock.fenced();
            }
            if let Some(ms) = n("lock_delay_ms") {
                lock = lock.lock_delay(Duration::from_millis(ms));
            }
            match wait {
                None => Some(lock.acquire().await?),
                Some(w) if w.is_zero() => lock.try_acquire().await?,
                Some(w) => lock.try_acquire_for(w, None).await?,
            }
            .map(Guard::Lock)
        };
        let Some(guard) = guard else {
            return Ok(obj(json!({"granted": false})));
        };
        let (count, token) = match &guard {
            Guard::Lock(g) => (g.hold_count(), g.fencing_token()),
            Guard::Permits(g) => (g.owner_permits(), None),
        };
        let hold = s("hold");
        let releasing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lost = guard.lost();
        self.sample(hold.clone(), lost.clone(), releasing.clone());
        self.state.lock().unwrap().holds.insert(
            hold,
            Hold {
                guard: Some(guard),
                lost,
                releasing,
            },
        );
        Ok(obj(
            json!({"granted": true, "count": count, "token": token}),
        ))
    }

    /// Sample "is it still held?" every `sample_ms` until lost or released; say `lost` once.
    fn sample(
        self: &Arc<Self>,
        hold: String,
        lost: LostSignal,
        releasing: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let me = self.clone();
        let every = Duration::from_millis(self.state.lock().unwrap().sample_ms.max(1));
        tokio::spawn(async move {
            let mut last_held: Option<i64> = None;
            loop {
                if releasing.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let a = now_us();
                let r = lost.check();
                let b = now_us();
                if b - a < 1000 {
                    match r {
                        None => last_held = Some(b),
                        Some(LostReason::Released) => return,
                        Some(r) => {
                            me.say(json!({"event": "lost", "hold": hold, "t_us": b,
                                          "last_held_us": last_held, "reason": reason(r)}));
                            return;
                        }
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
    }
}

/// A protocol duration in ms (a number, or `"nan"`, `"inf"`, `"-inf"`) as the `Duration` a
/// program would convert it to: what `Duration` cannot hold (negative, NaN, infinite) is a
/// config error.
fn duration(v: &Value, field: &str) -> Result<Duration, Error> {
    let ms = match v {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) => s.parse::<f64>().unwrap_or(f64::NAN),
        _ => f64::NAN,
    };
    Duration::try_from_secs_f64(ms / 1000.0).map_err(|e| Error::Config(format!("{field} {v}: {e}")))
}

/// DLOCK.INFO's reply (a flat map) as `{kind, holders, waiters}`.
fn info_json(v: redis::Value, waiters: Vec<Value>) -> Value {
    let pairs: Vec<redis::Value> = match v {
        redis::Value::Array(a) => a,
        redis::Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => Vec::new(),
    };
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v).unwrap_or_default();
    let mut kind = Value::Null;
    let mut holders = Vec::new();
    for kv in pairs.chunks(2) {
        let [k, v] = kv else { continue };
        match text(k).as_str() {
            "kind" | "type" | "mode" => kind = text(v).into(),
            "holders" => {
                if let redis::Value::Array(rows) = v {
                    for r in rows {
                        let fields: Vec<String> = match r {
                            redis::Value::Array(f) => f
                                .iter()
                                .map(|x| match x {
                                    redis::Value::Int(n) => n.to_string(),
                                    other => text(other),
                                })
                                .collect(),
                            _ => Vec::new(),
                        };
                        holders.push(json!(fields));
                    }
                }
            }
            _ => {}
        }
    }
    json!({"kind": kind, "holders": holders, "waiters": waiters})
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let prefix = format!(
        "{:032x}",
        (std::process::id() as u128 * 0x9e37_79b9_7f4a_7c15) ^ now_us() as u128
    );
    let driver = Arc::new(Driver {
        state: Mutex::default(),
        prefix,
        out: tx,
    });
    // One writer: whole lines, flushed at once.
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(v) = rx.recv().await {
            let line = format!("{v}\n");
            if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
                return;
            }
        }
    });
    // The alive report: every 50 ms, the holds still believed held.
    let d = driver.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let held: Vec<String> = d
                .state
                .lock()
                .unwrap()
                .holds
                .iter()
                .filter(|(_, h)| h.lost.check().is_none())
                .map(|(k, _)| k.clone())
                .collect();
            d.say(json!({"event": "alive", "t_us": now_us(), "held": held}));
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let req = match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(m)) => m,
            _ => continue,
        };
        let id = req.get("id").and_then(Value::as_u64).unwrap_or(0);
        let d = driver.clone();
        let task = tokio::spawn(async move {
            let sent = now_us();
            let r = d.handle(id, req).await;
            (sent, r)
        });
        driver
            .state
            .lock()
            .unwrap()
            .pending
            .insert(id, task.abort_handle());
        let d = driver.clone();
        tokio::spawn(async move {
            let sent_guess = now_us();
            let out = match task.await {
                Ok((sent, Ok(mut m))) => {
                    m.insert("ok".into(), true.into());
                    m.insert("sent_us".into(), sent.into());
                    Value::Object(m)
                }
                Ok((sent, Err(e))) => {
                    json!({"ok": false, "sent_us": sent, "error": error_json(&e)})
                }
                Err(_) => json!({"ok": false, "sent_us": sent_guess,
                                 "error": {"kind": "cancelled", "class": "Cancelled", "message": "cancelled"}}),
            };
            let mut out = obj(out);
            out.insert("id".into(), id.into());
            out.insert("t_us".into(), now_us().into());
            d.state.lock().unwrap().pending.remove(&id);
            d.say(Value::Object(out));
        });
    }
    // End of the requests: close the clients (if `close` did not), then return; the
    // runtime ends its tasks (the alive report, the samplers).
    let clients: Vec<Client> = driver
        .state
        .lock()
        .unwrap()
        .clients
        .values()
        .cloned()
        .collect();
    for c in clients {
        c.close().await;
    }
    drop(driver);
    let _ = tokio::time::timeout(Duration::from_millis(200), writer).await;
}
