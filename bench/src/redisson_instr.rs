//! `make bench-instr`, Redisson's rows: what Redisson's own lock scripts cost the server when
//! the module serves them natively (`redisson native`, the default) against the same scripts
//! as Lua on a server without the module, with the targets beside them:
//! - Redisson's cycle as 3.24+ sends it (tryLock, unlock with its latch key, `DEL` of the
//!   latch), by `EVALSHA` and by `EVAL` with the text: at most 1.3x (EVALSHA) and 1.6x (EVAL)
//!   dlock's own plain cycle (`DLOCK.ACQUIRE` + `DLOCK.RELEASE`, measured in the same run);
//! - the watchdog's batched renewal of 100 locks (3.44+): at least 3x cheaper than its Lua;
//! - `RReadWriteLock`'s read cycle (read tryLock, read unlock with its latch, `DEL` of the
//!   latch; 3.24+, by `EVALSHA`), native and Lua (no target: for the record);
//! - an unrelated `SET`: at most +3% with `redisson native` over no module (the command
//!   filter runs for every command), and with `redisson lua` nothing over the module today.
//!
//! The texts come from the capture of Redisson's jars (`make redisson-scripts`); without it
//! these rows are skipped with a message.

use std::path::Path;

use dlock_testutil::redisson::{capture_dir, captured, CapturedScript};

use crate::instr::{cmd, k, key, leak, measure, Scene, Workload, LEASE, OWNER};

const TRY_LOCK: &str = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94";
const UNLOCK_LATCH: &str = "6866459238a13a701d42f4971f12d9f3a50e2442";
const RENEW_BATCH: &str = "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635";
const READ_TRY_LOCK: &str = "95553a6ff11176c18e71344e89d116b06fd6f753";
const READ_UNLOCK_LATCH: &str = "6e1b10e11ac0a3ed8e902562ecd32ce01b553039";
/// Locks renewed by one batched renewal (Redisson's chunk).
const BATCH: usize = 100;

/// The bars.
const EVALSHA_TARGET: f64 = 1.3;
const EVAL_TARGET: f64 = 1.6;
const RENEW_TARGET: f64 = 3.0;
const SET_TARGET_PCT: f64 = 3.0;

fn text(all: &[CapturedScript], sha1: &str) -> Option<&'static str> {
    all.iter()
        .find(|s| s.sha1 == sha1)
        .map(|s| leak(s.text.clone()))
}

/// Redisson's cycle on `key(i)`: tryLock, unlock (latch), DEL latch; by EVAL (`texts`) or
/// EVALSHA.
fn cycle(i: usize, eval: Option<(&str, &str)>) -> Vec<u8> {
    let (key, lease) = (key(i), LEASE.to_string());
    let channel = format!("redisson_lock__channel:{{{key}}}");
    let latch = format!("redisson_unlock_latch:{{{key}}}:{i}");
    let (verb, try_lock, unlock) = match eval {
        Some((t, u)) => ("EVAL", t, u),
        None => ("EVALSHA", TRY_LOCK, UNLOCK_LATCH),
    };
    let mut out = cmd(&[verb, try_lock, "1", &key, &lease, OWNER]);
    out.extend(cmd(&[
        verb, unlock, "3", &key, &channel, &latch, "0", &lease, OWNER, "PUBLISH", "13500",
    ]));
    out.extend(cmd(&["DEL", &latch]));
    out
}

/// `RReadWriteLock`'s read cycle on `key(i)` by EVALSHA: read tryLock (its timeout key),
/// read unlock (latch), DEL latch.
fn read_cycle(i: usize) -> Vec<u8> {
    let (key, lease) = (key(i), LEASE.to_string());
    let (braced, write) = (format!("{{{key}}}"), format!("{OWNER}:write"));
    let timeout = format!("{braced}:{OWNER}:rwlock_timeout");
    let channel = format!("redisson_rwlock:{braced}");
    let latch = format!("redisson_unlock_latch:{braced}:{i}");
    let mut out = cmd(&[
        "EVALSHA",
        READ_TRY_LOCK,
        "2",
        &key,
        &timeout,
        &lease,
        OWNER,
        &write,
    ]);
    out.extend(cmd(&[
        "EVALSHA",
        READ_UNLOCK_LATCH,
        "5",
        &key,
        &channel,
        &timeout,
        &braced,
        &latch,
        "0",
        OWNER,
        "PUBLISH",
        "13500",
    ]));
    out.extend(cmd(&["DEL", &latch]));
    out
}

/// The batched renewal of `BATCH` locks of one slot.
fn renew_batch() -> Vec<u8> {
    let lease = LEASE.to_string();
    let keys: Vec<String> = (0..BATCH).map(|i| format!("{{batch}}:{i}")).collect();
    let n = BATCH.to_string();
    let mut args: Vec<&str> = vec!["EVALSHA", RENEW_BATCH, &n];
    args.extend(keys.iter().map(String::as_str));
    args.push(&lease);
    args.extend(std::iter::repeat_n(OWNER, BATCH));
    cmd(&args)
}

fn workloads(all: &[CapturedScript]) -> Option<Vec<Workload>> {
    let (t, u) = (text(all, TRY_LOCK)?, text(all, UNLOCK_LATCH)?);
    let r = text(all, RENEW_BATCH)?;
    let (rt, ru) = (text(all, READ_TRY_LOCK)?, text(all, READ_UNLOCK_LATCH)?);
    let load: Vec<u8> = [t, u, r, rt, ru]
        .iter()
        .flat_map(|s| cmd(&["SCRIPT", "LOAD", s]))
        .collect();
    let mut held = load.clone();
    for i in 0..BATCH {
        let key = format!("{{batch}}:{i}");
        held.extend(cmd(&[
            "EVALSHA",
            TRY_LOCK,
            "1",
            &key,
            &LEASE.to_string(),
            OWNER,
        ]));
    }
    let w =
        |name: &str, module: bool, setup: Vec<u8>, op: Box<dyn Fn(usize) -> Vec<u8>>| Workload {
            name: leak(format!("redisson: {name}")),
            binary: None,
            module,
            module_args: &[],
            scene: Scene::Alone,
            setup,
            op,
            refused: false,
            without_timers: false,
        };
    let set = |i: usize| cmd(&["SET", &format!("user:{i}"), "v"]);
    let mut out = vec![
        w(
            "dlock cycle",
            true,
            vec![],
            Box::new(|i| {
                let lease = LEASE.to_string();
                let mut a = cmd(&["DLOCK.ACQUIRE", &key(i), OWNER, &lease]);
                a.extend(cmd(&["DLOCK.RELEASE", &key(i), OWNER]));
                a
            }),
        ),
        w(
            "cycle EVALSHA, native",
            true,
            load.clone(),
            Box::new(|i| cycle(i, None)),
        ),
        w(
            "cycle EVALSHA, Lua",
            false,
            load.clone(),
            Box::new(|i| cycle(i, None)),
        ),
        w(
            "cycle EVAL, native",
            true,
            vec![],
            Box::new(move |i| cycle(i, Some((t, u)))),
        ),
        w(
            "cycle EVAL, Lua",
            false,
            vec![],
            Box::new(move |i| cycle(i, Some((t, u)))),
        ),
        w(
            "renew 100, native",
            true,
            held.clone(),
            Box::new(|_| renew_batch()),
        ),
        w("renew 100, Lua", false, held, Box::new(|_| renew_batch())),
        w(
            "read cycle, native",
            true,
            load.clone(),
            Box::new(read_cycle),
        ),
        w("read cycle, Lua", false, load.clone(), Box::new(read_cycle)),
        w("SET, no module", false, vec![], Box::new(set)),
        w("SET, redisson native", true, vec![], Box::new(set)),
    ];
    let mut lua = w("SET, redisson lua", true, vec![], Box::new(set));
    lua.module_args = &["redisson", "lua"];
    out.push(lua);
    Some(out)
}

/// Runs the rows (those whose name contains one of `only`, if any) and prints them with the
/// targets.
pub fn run(only: &[String], dir: &Path) {
    let Some(all) = captured() else {
        println!(
            "\n(Redisson rows skipped: no capture of Redisson's scripts in {}; run `make redisson-scripts`)",
            capture_dir().display()
        );
        return;
    };
    let Some(rows) = workloads(&all) else {
        println!("\n(Redisson rows skipped: the capture lacks a 3.44+ lock script)");
        return;
    };
    let mut results: Vec<(&str, f64)> = vec![];
    for w in rows {
        if !only.is_empty() && !only.iter().any(|o| w.name.contains(o.as_str())) {
            continue;
        }
        let (per_op, low, high) = measure(&w, dir);
        println!(
            "{:<44} {:>10.0} instructions/op ({low:.0}–{high:.0})",
            w.name, per_op
        );
        results.push((w.name, per_op));
    }
    let get = |name: &str| {
        results
            .iter()
            .find(|(n, _)| *n == format!("redisson: {name}"))
            .map(|(_, v)| *v)
    };
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    println!("\n| Redisson's scripts | module serving | plain Lua | target |");
    println!("|---|---|---|---|");
    if let Some(d) = get("dlock cycle") {
        for (row, name, target) in [
            ("cycle by EVALSHA (3.24+)", "cycle EVALSHA", EVALSHA_TARGET),
            ("cycle by EVAL", "cycle EVAL", EVAL_TARGET),
        ] {
            if let (Some(n), Some(l)) = (
                get(&format!("{name}, native")),
                get(&format!("{name}, Lua")),
            ) {
                println!(
                    "| {row} | {} ({:.2}x dlock's {}) | {} ({:.2}x) | <= {target}x dlock's cycle: {} |",
                    k(n),
                    n / d,
                    k(d),
                    k(l),
                    l / d,
                    verdict(n / d <= target)
                );
            }
        }
    }
    if let (Some(n), Some(l)) = (get("renew 100, native"), get("renew 100, Lua")) {
        println!(
            "| batched renewal of {BATCH} locks | {} | {} ({:.2}x cheaper native) | >= {RENEW_TARGET}x cheaper: {} |",
            k(n),
            k(l),
            l / n,
            verdict(l / n >= RENEW_TARGET)
        );
    }
    if let (Some(n), Some(l)) = (get("read cycle, native"), get("read cycle, Lua")) {
        println!(
            "| RReadWriteLock read cycle by EVALSHA (3.24+) | {} | {} ({:.2}x cheaper native) | – |",
            k(n),
            k(l),
            l / n
        );
    }
    if let Some(base) = get("SET, no module") {
        for (row, name) in [
            ("unrelated SET, redisson native", "SET, redisson native"),
            ("unrelated SET, redisson lua", "SET, redisson lua"),
        ] {
            if let Some(v) = get(name) {
                let pct = (v / base - 1.0) * 100.0;
                println!(
                    "| {row} | {v:.0} ({pct:+.1}% vs no module, {base:.0}) | – | <= +{SET_TARGET_PCT:.0}%: {} |",
                    verdict(pct <= SET_TARGET_PCT)
                );
            }
        }
    }
}
