//! Running scenarios: one driver per actor, the steps in order, the expectations, the
//! faults, and the history check at the end; and a run's summary.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::clock::now_us;
use crate::driver::Driver;
use crate::history::{self, Interval};
use crate::servers::Topology;

/// How long a reply may take beyond what a step expects (a loaded machine; a driver that
/// was stopped answers after it is continued).
const REPLY_PATIENCE: Duration = Duration::from_secs(30);
/// The history check's default bound (the contract's: the time to read one reply after
/// resuming, at most 100 ms on a loaded 2-core machine).
const HISTORY_BOUND_MS: i64 = 100;

/// What to run.
pub struct Options {
    /// The driver's command line (run by `sh -c`).
    pub driver: String,
    /// The client's name, for the report and the scenarios' `skip` lists.
    pub client: String,
    /// Run only the scenario of this name.
    pub only: Option<String>,
    /// How many scenarios run at once (each with its own servers on free ports and its own
    /// drivers; most of a scenario is waiting on leases and time-outs). 0 or 1: one by one.
    pub jobs: usize,
}

/// A run's result.
#[derive(Debug, Default)]
pub struct Summary {
    pub client: String,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub longest_overlap_us: i64,
    /// (scenario, reason)
    pub failures: Vec<(String, String)>,
    pub skips: Vec<(String, String)>,
    /// (scenario, seconds it took)
    pub times: Vec<(String, f64)>,
}

impl Summary {
    /// Adds another run's results to this one.
    fn join(&mut self, other: Summary) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.longest_overlap_us = self.longest_overlap_us.max(other.longest_overlap_us);
        self.failures.extend(other.failures);
        self.skips.extend(other.skips);
        self.times.extend(other.times);
    }

    /// `conformance <client>: N passed, N failed, N skipped; longest overlap X ms`, then a
    /// line per failure and per skip.
    pub fn report(&self) -> String {
        let mut out = format!(
            "conformance {}: {} passed, {} failed, {} skipped; longest overlap {:.1} ms\n",
            self.client,
            self.passed,
            self.failed,
            self.skipped,
            self.longest_overlap_us as f64 / 1000.0
        );
        for (name, why) in &self.failures {
            out.push_str(&format!("  FAILED {name}: {why}\n"));
        }
        for (name, why) in &self.skips {
            out.push_str(&format!("  skipped {name}: {why}\n"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "client": self.client,
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "longest_overlap_ms": self.longest_overlap_us as f64 / 1000.0,
            "failures": self.failures.iter().map(|(n, w)| json!({"scenario": n, "reason": w})).collect::<Vec<_>>(),
            "skips": self.skips.iter().map(|(n, w)| json!({"scenario": n, "why": w})).collect::<Vec<_>>(),
            "seconds": self.times.iter().map(|(n, s)| json!([n, s])).collect::<Vec<_>>(),
        })
    }
}

/// The scenario files among `paths` (a directory stands for its `*.json`), sorted by name.
pub fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| Some(e.ok()?.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Run every scenario of `files` with `opts.driver`. Servers are reused across consecutive
/// scenarios of one topology (FLUSHALL between) unless a scenario damaged them.
pub fn run_files(opts: &Options, files: &[PathBuf]) -> Summary {
    let jobs = opts.jobs.clamp(1, files.len().max(1));
    if jobs == 1 {
        return run_in_turn(opts, files);
    }
    // Contiguous shares, so scenarios of one topology mostly stay together and reuse their
    // servers; the summaries are joined in file order.
    let share = files.len().div_ceil(jobs);
    let parts: Vec<Summary> = std::thread::scope(|s| {
        let running: Vec<_> = files
            .chunks(share)
            .map(|part| s.spawn(move || run_in_turn(opts, part)))
            .collect();
        running
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("a conformance job panicked outside a scenario")
            })
            .collect()
    });
    let mut summary = Summary {
        client: opts.client.clone(),
        ..Summary::default()
    };
    for part in parts {
        summary.join(part);
    }
    summary
}

/// The scenarios of `files`, one after the other, reusing a topology's servers while the
/// next scenario names the same one.
fn run_in_turn(opts: &Options, files: &[PathBuf]) -> Summary {
    let mut summary = Summary {
        client: opts.client.clone(),
        ..Summary::default()
    };
    let mut current: Option<(String, Topology)> = None;
    for file in files {
        let scenario = match load(file) {
            Ok(s) => s,
            Err(e) => {
                summary.failed += 1;
                summary.failures.push((file.display().to_string(), e));
                continue;
            }
        };
        let name = scenario["name"].as_str().unwrap_or("?").to_string();
        if opts.only.as_ref().is_some_and(|o| *o != name) {
            continue;
        }
        if let Some(why) = skip_reason(&scenario, &opts.client) {
            summary.skipped += 1;
            summary.skips.push((name, why));
            continue;
        }
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let topo_name = scenario["servers"]["topology"]
                .as_str()
                .unwrap_or("standalone")
                .to_string();
            let reuse = matches!(&current, Some((n, t)) if *n == topo_name && t.flush().is_ok());
            if !reuse {
                current = None; // stop the old servers before starting others
                current = Some((topo_name.clone(), Topology::start(&topo_name)?));
            }
            let (_, topo) = current.as_mut().expect("topology");
            let mut run = Run::new(opts, topo, &scenario);
            let r = run.steps();
            let damaged = run.damaged;
            let verdict = run.finish(r.is_ok());
            if damaged {
                current = None;
            }
            r.map(|()| verdict)
        }));
        summary
            .times
            .push((name.clone(), started.elapsed().as_secs_f64()));
        let outcome = match outcome {
            Ok(o) => o,
            Err(panic) => {
                current = None;
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into());
                Err(format!("panic: {msg}"))
            }
        };
        match outcome {
            Ok(verdict) => {
                summary.longest_overlap_us = summary.longest_overlap_us.max(verdict.longest_us);
                if verdict.failures.is_empty() {
                    summary.passed += 1;
                } else {
                    summary.failed += 1;
                    summary.failures.push((name, verdict.failures.join("; ")));
                }
            }
            Err(why) => {
                summary.failed += 1;
                summary.failures.push((name, why));
            }
        }
    }
    summary
}

fn load(file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    if !v["name"].is_string() || !v["steps"].is_array() {
        return Err(format!(
            "{}: a scenario needs a name and steps",
            file.display()
        ));
    }
    Ok(v)
}

/// The backend a scenario runs on: `script` on a server without the module or when a
/// client asks for it, else `native`.
fn backend_of(scenario: &Value) -> &'static str {
    let no_module = scenario["servers"]["topology"] == "standalone-no-module";
    let asks_script = scenario["clients"]
        .as_object()
        .is_some_and(|c| c.values().any(|v| v["backend"] == "script"));
    if no_module || asks_script {
        "script"
    } else {
        "native"
    }
}

fn skip_reason(scenario: &Value, client: &str) -> Option<String> {
    let backend = backend_of(scenario);
    scenario["skip"].as_array()?.iter().find_map(|s| {
        let c_ok = s["client"].as_str().is_none_or(|c| c == client);
        let b_ok = s["backend"].as_str().is_none_or(|b| b == backend);
        (c_ok && b_ok).then(|| s["why"].as_str().unwrap_or("skipped").to_string())
    })
}

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

struct Run<'a> {
    opts: &'a Options,
    topo: &'a mut Topology,
    scenario: &'a Value,
    drivers: BTreeMap<String, Driver>,
    pending: HashMap<String, Pending>,
    holds: Vec<Hold>,
    tokens: HashMap<String, u64>,
    damaged: bool,
}

impl<'a> Run<'a> {
    fn new(opts: &'a Options, topo: &'a mut Topology, scenario: &'a Value) -> Run<'a> {
        Run {
            opts,
            topo,
            scenario,
            drivers: BTreeMap::new(),
            pending: HashMap::new(),
            holds: Vec::new(),
            tokens: HashMap::new(),
            damaged: false,
        }
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

    fn steps(&mut self) -> Result<(), String> {
        let actors: Vec<String> = self.scenario["clients"]
            .as_object()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        for actor in &actors {
            let d = Driver::spawn(actor, &self.opts.driver)?;
            self.drivers.insert(actor.clone(), d);
            if self.client_fields(actor).get("connect") == Some(&Value::Bool(false)) {
                continue;
            }
            let req = self.connect_request(actor, &Map::new());
            let reply = self.call(actor, req.clone())?;
            self.check(&format!("connect {actor}"), &req, &reply, &Map::new())?;
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
            return self.check(&format!("{} {}", actor, step["op"]), &req, &reply, &expect);
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
            return self.check(name, &p.req, &reply, &expect);
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
            "expect_no_waiters" => {
                // The server drops a cancelled wait when its connection closes: allow it a moment.
                let end = Instant::now() + Duration::from_secs(3);
                loop {
                    let n = self.topo.waiters(key)?;
                    if n == 0 {
                        break;
                    }
                    if Instant::now() > end {
                        return Err(format!("{n} still queued on {key:?}"));
                    }
                    std::thread::sleep(Duration::from_millis(10));
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

    fn check(
        &self,
        what: &str,
        req: &Map<String, Value>,
        reply: &Value,
        expect: &Map<String, Value>,
    ) -> Result<(), String> {
        let fail = |why: String| Err(format!("{what}: {why}; reply {reply}"));
        let ok = reply["ok"] == true;
        // `any`: whatever the answer (a step whose outcome depends on timing the scenario
        // does not fix; the history check still judges it).
        if expect.get("any") == Some(&Value::Bool(true)) {
            return Ok(());
        }
        match expect.get("error").and_then(Value::as_str) {
            Some(kind) => {
                if ok {
                    return fail(format!("expected error {kind}"));
                }
                if reply["error"]["kind"] != kind {
                    return fail(format!("expected error {kind}"));
                }
                // These errors must name the server they are about.
                if matches!(kind, "module_not_loaded" | "connection") {
                    let msg = reply["error"]["message"].as_str().unwrap_or("");
                    let named = self
                        .topo
                        .servers()
                        .iter()
                        .any(|s| msg.contains(&format!(":{}", s.port())));
                    if !named {
                        return fail("the message does not name the server (host:port)".into());
                    }
                }
            }
            None if !ok => return fail("unexpected error".into()),
            None => {}
        }
        for field in ["granted", "released", "renewed", "held", "count"] {
            if let Some(want) = expect.get(field) {
                if reply.get(field) != Some(want) {
                    return fail(format!("expected {field} = {want}"));
                }
            }
        }
        let took = reply["t_us"].as_i64().unwrap_or(0) - reply["sent_us"].as_i64().unwrap_or(0);
        if let Some(ms) = expect.get("within_ms").and_then(Value::as_i64) {
            if took > ms * 1000 {
                return fail(format!("took {} ms, expected within {ms} ms", took / 1000));
            }
        }
        if let Some(ms) = expect.get("after_ms").and_then(Value::as_i64) {
            if took < ms * 1000 {
                return fail(format!(
                    "took {} ms, expected not before {ms} ms",
                    took / 1000
                ));
            }
        }
        if let Some(other) = expect.get("token_above").and_then(Value::as_str) {
            let Some(before) = self.tokens.get(other) else {
                return fail(format!("no token recorded for {other}"));
            };
            if reply["token"].as_u64().is_none_or(|t| t <= *before) {
                return fail(format!("expected a token above {other}'s {before}"));
            }
        }
        if let Some(n) = expect.get("waiters").and_then(Value::as_u64) {
            let got = reply["waiters"].as_array().map_or(0, Vec::len) as u64;
            if got != n {
                return fail(format!("expected {n} waiters"));
            }
        }
        if let Some(n) = expect.get("holders").and_then(Value::as_u64) {
            let got = reply["info"]["holders"].as_array().map_or(0, Vec::len) as u64;
            if got != n {
                return fail(format!("expected {n} holders"));
            }
        }
        let _ = req;
        Ok(())
    }

    /// Close the drivers, then check the history (when the steps passed).
    fn finish(mut self, steps_passed: bool) -> history::Verdict {
        let end = now_us();
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
        Some("stop" | "cont" | "kill" | "close_connections" | "wait_lost")
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
