//! One scenario: one driver per actor, the steps in order, the faults, and the history
//! check at the end.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::clock::now_us;
use crate::driver::Driver;
use crate::expect::Checker;
use crate::history::{self, Interval};
use crate::servers::{self, Topology};

/// How long a reply may take beyond what a step expects (a loaded machine; a driver that
/// was stopped answers after it is continued).
const REPLY_PATIENCE: Duration = Duration::from_secs(30);
/// The history check's default bound (the contract's: the time to read one reply after
/// resuming, at most 100 ms on a loaded 2-core machine).
const HISTORY_BOUND_MS: i64 = 100;

/// One hold as reported by the drivers.
struct Hold {
    actor: String,
    hold: String,
    owner: String,
    key: String,
    kind: String,
    count: u64,
    capacity: Option<u64>,
    start: i64,
    /// The release's call time.
    released: Option<i64>,
    /// The last time a `held` query answered true.
    seen_held: i64,
}

/// A request sent and not yet awaited.
struct Pending {
    actor: String,
    id: u64,
    req: Map<String, Value>,
}

/// A scenario being run. Servers it stopped (`hang_server`) are resumed when it finishes,
/// also on a failure or a panic (see `Drop`).
pub(crate) struct Run<'a> {
    /// The driver's command line (run by `sh -c`), one process per actor.
    driver: &'a str,
    topo: &'a mut Topology,
    scenario: &'a Value,
    drivers: BTreeMap<String, Driver>,
    pending: HashMap<String, Pending>,
    holds: Vec<Hold>,
    tokens: HashMap<String, u64>,
    /// The PIDs of the servers stopped (SIGSTOP) and not resumed yet.
    hung: Vec<u32>,
    /// `count_clients` results by name: each data server's CLIENT LIST length.
    client_counts: HashMap<String, Vec<usize>>,
    /// The scenario changed the servers beyond what FLUSHALL undoes.
    pub(crate) damaged: bool,
}

impl<'a> Run<'a> {
    pub(crate) fn new(driver: &'a str, topo: &'a mut Topology, scenario: &'a Value) -> Run<'a> {
        Run {
            driver,
            topo,
            scenario,
            drivers: BTreeMap::new(),
            pending: HashMap::new(),
            holds: Vec::new(),
            tokens: HashMap::new(),
            hung: Vec::new(),
            client_counts: HashMap::new(),
            damaged: false,
        }
    }

    fn check(&self, what: &str, reply: &Value, expect: &Map<String, Value>) -> Result<(), String> {
        Checker {
            ports: self.topo.servers().iter().map(|s| s.port()).collect(),
            tokens: &self.tokens,
        }
        .check(what, reply, expect)
    }

    /// SIGCONT of every server this run stopped.
    fn resume_servers(&mut self) -> Result<(), String> {
        let pids = std::mem::take(&mut self.hung);
        servers::signal_all(&pids, servers::Signal::CONT)
    }

    fn client_fields(&self, actor: &str) -> Map<String, Value> {
        self.scenario["clients"][actor]
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    /// The `connect` request of `actor`: the topology's fields, the sampler's period, the
    /// scenario's overrides for the actor, then the step's own fields.
    fn connect_request(&self, actor: &str, step: &Map<String, Value>) -> Map<String, Value> {
        let mut req = self.topo.connect_fields();
        req.insert("sample_ms".into(), 2.into());
        for (k, v) in self.client_fields(actor) {
            if k != "connect" {
                req.insert(k, v);
            }
        }
        for (k, v) in step {
            req.insert(k.clone(), v.clone());
        }
        req.insert("op".into(), "connect".into());
        req
    }

    pub(crate) fn steps(&mut self) -> Result<(), String> {
        let actors: Vec<String> = self.scenario["clients"]
            .as_object()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        for actor in &actors {
            let d = Driver::spawn(actor, self.driver)?;
            self.drivers.insert(actor.clone(), d);
            if self.client_fields(actor).get("connect") == Some(&Value::Bool(false)) {
                continue;
            }
            let req = self.connect_request(actor, &Map::new());
            let reply = self.call(actor, req.clone())?;
            self.check(&format!("connect {actor}"), &reply, &Map::new())?;
        }
        let steps = self.scenario["steps"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (i, step) in steps.iter().enumerate() {
            let step = step.as_object().cloned().unwrap_or_default();
            self.step(&step)
                .map_err(|e| format!("step {} {}: {e}", i + 1, Value::Object(step.clone())))?;
        }
        Ok(())
    }

    fn driver(&mut self, actor: &str) -> Result<&mut Driver, String> {
        self.drivers
            .get_mut(actor)
            .ok_or_else(|| format!("no actor {actor:?}"))
    }

    /// Send and wait for the reply.
    fn call(&mut self, actor: &str, req: Map<String, Value>) -> Result<Value, String> {
        let d = self.driver(actor)?;
        let id = d.send(req.clone());
        let reply = d
            .reply(id, REPLY_PATIENCE)
            .ok_or_else(|| no_reply(d, &req))?;
        self.record(actor, &req, &reply);
        Ok(reply)
    }

    fn step(&mut self, step_map: &Map<String, Value>) -> Result<(), String> {
        // As a Value: indexing a missing field gives null (a Map's index panics).
        let step = &Value::Object(step_map.clone());
        let expect = step
            .get("expect")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(actor) = step
            .get("actor")
            .and_then(Value::as_str)
            .filter(|_| step_map.contains_key("op") && !is_runner_op(step_map))
        {
            let mut req: Map<String, Value> = step_map
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "actor" | "as" | "expect"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if req.get("op").and_then(Value::as_str) == Some("connect") {
                req = self.connect_request(actor, &req);
            }
            // A cancel names the pending acquire by its `as` name; the driver wants its id.
            if let Some(Value::String(target)) = req.get("target").cloned() {
                let p = self
                    .pending
                    .get(&target)
                    .ok_or_else(|| format!("nothing pending as {target:?}"))?;
                req.insert("target".into(), p.id.into());
            }
            if let Some(name) = step.get("as").and_then(Value::as_str) {
                let d = self.driver(actor)?;
                let id = d.send(req.clone());
                self.pending.insert(
                    name.to_string(),
                    Pending {
                        actor: actor.to_string(),
                        id,
                        req,
                    },
                );
                return Ok(());
            }
            let reply = self.call(actor, req.clone())?;
            return self.check(&format!("{} {}", actor, step["op"]), &reply, &expect);
        }
        if let Some(name) = step.get("await").and_then(Value::as_str) {
            let p = self
                .pending
                .remove(name)
                .ok_or_else(|| format!("nothing pending as {name:?}"))?;
            let d = self.driver(&p.actor)?;
            let reply = d
                .reply(p.id, REPLY_PATIENCE)
                .ok_or_else(|| no_reply(d, &p.req))?;
            self.record(&p.actor, &p.req, &reply);
            return self.check(name, &reply, &expect);
        }
        let op = step.get("op").and_then(Value::as_str).unwrap_or("");
        let actor = step.get("actor").and_then(Value::as_str).unwrap_or("");
        let key = step.get("key").and_then(Value::as_str).unwrap_or("");
        match op {
            "sleep" => std::thread::sleep(Duration::from_millis(step["ms"].as_u64().unwrap_or(0))),
            "wait_lost" => self.wait_lost(actor, step)?,
            "stop" => self.driver(actor)?.stop()?,
            "cont" => self.driver(actor)?.cont()?,
            "kill" => self.driver(actor)?.kill(),
            "close_connections" => {
                let pid = self.driver(actor)?.pid();
                let n = self.topo.close_connections(pid)?;
                if n == 0 {
                    return Err(format!("{actor} has no connection to the servers"));
                }
            }
            "restart_server" => {
                self.damaged = true;
                self.topo.restart()?;
            }
            "failover" => {
                self.damaged = true;
                self.topo.failover(key)?;
            }
            "move_slot" => {
                self.damaged = true;
                self.topo.move_slot(key)?;
            }
            "redis" => {
                let cmd = step["cmd"].as_array().cloned().unwrap_or_default();
                let reply = self.topo.command(&cmd, step["on"] == "all")?;
                if let Some(want) = expect.get("reply") {
                    if *want != reply {
                        return Err(format!("answered {reply}, expected {want}"));
                    }
                }
            }
            "hang_server" => {
                // A stopped server is resumed, but what it did not answer meanwhile (closed
                // connections, dropped waiters) is not worth trusting for the next scenario.
                self.damaged = true;
                let pids = self
                    .topo
                    .server_pids(step.get("key").and_then(Value::as_str));
                self.hung.extend(&pids);
                servers::signal_all(&pids, servers::Signal::STOP)?;
            }
            "resume_server" => self.resume_servers()?,
            "count_clients" => {
                let name = step["as"].as_str().unwrap_or("").to_string();
                let counts = self.topo.client_counts()?;
                self.client_counts.insert(name, counts);
            }
            "expect_clients" => {
                let name = step["like"].as_str().unwrap_or("");
                let want = self
                    .client_counts
                    .get(name)
                    .ok_or_else(|| format!("no count_clients as {name:?}"))?
                    .clone();
                let mut got = Vec::new();
                let same = until(within(step, 3000), || {
                    got = self.topo.client_counts()?;
                    Ok(got == want)
                })?;
                if !same {
                    return Err(format!(
                        "CLIENT LIST lengths {got:?}, {want:?} before (a connection left open)"
                    ));
                }
            }
            "expect_exit" => {
                let patience = within(step, 3000);
                let d = self.driver(actor)?;
                match d.close_stdin_and_wait(patience)? {
                    Some(0) => {}
                    Some(code) => return Err(format!("{actor} exited with status {code}")),
                    None => {
                        return Err(format!(
                            "{actor} did not exit within {patience:?} of its stdin closing (something the client opened keeps it alive)"
                        ))
                    }
                }
            }
            "expect_no_waiters" => {
                // The server drops a cancelled wait when its connection closes: allow it a moment.
                let mut n = 0;
                let gone = until(Duration::from_secs(3), || {
                    n = self.topo.waiters(key)?;
                    Ok(n == 0)
                })?;
                if !gone {
                    return Err(format!("{n} still queued on {key:?}"));
                }
            }
            other => return Err(format!("unknown step {other:?}")),
        }
        Ok(())
    }

    /// The lost event of `hold` arrives within `within_ms` of this step (or came before).
    fn wait_lost(&mut self, actor: &str, step: &Value) -> Result<(), String> {
        let hold = step["hold"].as_str().unwrap_or("").to_string();
        let within_us = step["within_ms"].as_i64().unwrap_or(1000) * 1000;
        let t0 = now_us();
        let d = self.driver(actor)?;
        let found = d.wait_said(Duration::from_micros(within_us as u64), |s| {
            s.events
                .iter()
                .find(|e| e["event"] == "lost" && e["hold"] == hold.as_str())
                .cloned()
        });
        let Some(e) = found else {
            return Err(format!(
                "no lost event for {hold} within {} ms",
                within_us / 1000
            ));
        };
        if let Some(want) = step.get("reason").filter(|r| !r.is_null()) {
            if e["reason"] != *want {
                return Err(format!("lost event {e}: expected reason {want}"));
            }
        }
        let late = e["t_us"].as_i64().unwrap_or(i64::MAX) - t0;
        if late > within_us {
            return Err(format!(
                "lost event for {hold} {} ms after the step, bound {} ms",
                late / 1000,
                within_us / 1000
            ));
        }
        Ok(())
    }

    /// Keep what a reply says of holds (grants, releases, `held` answers, tokens).
    fn record(&mut self, actor: &str, req: &Map<String, Value>, reply: &Value) {
        let hold = req
            .get("hold")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let ok = reply["ok"] == true;
        match req.get("op").and_then(Value::as_str) {
            Some("acquire") if ok && reply["granted"] == true => {
                let kind = req
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("lock")
                    .to_string();
                let owner = req.get("owner").and_then(Value::as_str).unwrap_or("main");
                if let Some(t) = reply["token"].as_u64() {
                    self.tokens.insert(hold.clone(), t);
                }
                self.holds.push(Hold {
                    actor: actor.to_string(),
                    hold,
                    owner: format!("{actor}/{owner}"),
                    key: req
                        .get("key")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    count: if kind == "semaphore" {
                        req.get("count").and_then(Value::as_u64).unwrap_or(1)
                    } else {
                        1
                    },
                    capacity: req.get("capacity").and_then(Value::as_u64),
                    kind,
                    start: reply["t_us"].as_i64().unwrap_or_else(now_us),
                    released: None,
                    seen_held: 0,
                });
            }
            Some("release") => {
                if let Some(h) = self.open_hold(actor, &hold) {
                    h.released = Some(reply["sent_us"].as_i64().unwrap_or_else(now_us));
                }
            }
            Some("held") if ok && reply["held"] == true => {
                if let Some(h) = self.open_hold(actor, &hold) {
                    h.seen_held = h.seen_held.max(reply["t_us"].as_i64().unwrap_or(0));
                }
            }
            _ => {}
        }
    }

    fn open_hold(&mut self, actor: &str, hold: &str) -> Option<&mut Hold> {
        self.holds
            .iter_mut()
            .rev()
            .find(|h| h.actor == actor && h.hold == hold && h.released.is_none())
    }

    /// Close the drivers, then check the history (when the steps passed).
    pub(crate) fn finish(mut self, steps_passed: bool) -> history::Verdict {
        let end = now_us();
        // A stopped server first: drivers closing on it would wait out their time-outs.
        let _ = self.resume_servers();
        for d in self.drivers.values_mut() {
            d.finish();
        }
        if !steps_passed {
            return history::Verdict::default();
        }
        let bound = self.scenario["history_bound_ms"]
            .as_i64()
            .unwrap_or(HISTORY_BOUND_MS)
            * 1000;
        let intervals: Vec<Interval> = self
            .holds
            .iter()
            .map(|h| {
                let d = &self.drivers[&h.actor];
                let (lost, alive) = d.said(|s| {
                    let lost = s
                        .events
                        .iter()
                        .filter(|e| e["event"] == "lost" && e["hold"] == h.hold.as_str())
                        .filter(|e| e["t_us"].as_i64().unwrap_or(0) >= h.start)
                        .map(|e| e["last_held_us"].as_i64().unwrap_or(h.start))
                        .next();
                    let alive = s
                        .events
                        .iter()
                        .filter(|e| e["event"] == "alive")
                        .filter(|e| {
                            e["held"]
                                .as_array()
                                .is_some_and(|a| a.iter().any(|x| x == h.hold.as_str()))
                        })
                        .filter_map(|e| e["t_us"].as_i64())
                        .max();
                    (lost, alive)
                });
                let mut stop = match (h.released, lost) {
                    (Some(r), Some(l)) => r.min(l),
                    (Some(r), None) => r,
                    (None, Some(l)) => l,
                    // Killed: its last report; else still believed held at the end.
                    (None, None) if d.killed => alive.unwrap_or(h.start),
                    (None, None) => end,
                };
                stop = stop.max(h.seen_held).max(h.start);
                Interval {
                    name: format!("{}/{}", h.actor, h.hold),
                    owner: h.owner.clone(),
                    key: h.key.clone(),
                    kind: h.kind.clone(),
                    count: h.count,
                    capacity: h.capacity,
                    start: h.start,
                    end: stop,
                }
            })
            .collect();
        history::check(&intervals, bound)
    }
}

/// Steps the runner does itself, though they name an actor.
fn is_runner_op(step: &Map<String, Value>) -> bool {
    matches!(
        step.get("op").and_then(Value::as_str),
        Some("stop" | "cont" | "kill" | "close_connections" | "wait_lost" | "expect_exit")
    )
}

fn no_reply(d: &Driver, req: &Map<String, Value>) -> String {
    let stderr = d.said(|s| s.stderr.clone());
    format!(
        "no reply from {} to {} within {REPLY_PATIENCE:?}; driver stderr:\n{stderr}",
        d.actor,
        Value::Object(req.clone())
    )
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        // On a failure or a panic: never leave a server stopped.
        let _ = self.resume_servers();
    }
}

/// A step's `within_ms`, or `default_ms`.
fn within(step: &Value, default_ms: u64) -> Duration {
    Duration::from_millis(step["within_ms"].as_u64().unwrap_or(default_ms))
}

/// Poll `f` every 10 ms until it answers true or `patience` passed: whether it did.
fn until(patience: Duration, mut f: impl FnMut() -> Result<bool, String>) -> Result<bool, String> {
    let end = Instant::now() + patience;
    loop {
        if f()? {
            return Ok(true);
        }
        if Instant::now() > end {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
