//! A whole run: the scenario files, which of them apply to the client, and running them
//! (one by one or a few at once), each on its topology's servers, into a [`Summary`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;

use crate::run::Run;
use crate::servers::Topology;
use crate::summary::Summary;

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
            let mut run = Run::new(&opts.driver, topo, &scenario);
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
