//! Reliability (issue #7), promise 6b: a model-based randomized test against a real server.
//!
//! Random sequences of DLOCK.ACQUIRE / DLOCK.RWLOCK (with and without FENCE, sometimes with a
//! short WAIT) / DLOCK.RELEASE (with and without a mode) / DLOCK.RENEW / DEL / SET (a non-lock
//! value) / "lapse" from several owners on a few keys, each reply checked against an in-memory
//! model written here from docs/COMMANDS.md (not from the module's own
//! `rules`/`model`), and after every step the key's DLOCK.INFO (kind, mode, holders and counts,
//! remaining leases, waiters, fencing counter) is compared with the model.
//!
//! Leases: model steps use long leases (5 and 10 minutes), so nothing runs out by itself; a
//! "lapse" step makes one holder's lease run out on purpose (`DLOCK.RENEW key owner 1`, then
//! waits until DLOCK.INFO no longer lists it) and the model drops that holder.
//! `DLOCK_SEED` replays a run; `make test` runs 5 000 steps, `DLOCK_LONG=1` 50 000.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: [&str; 3] = ["m:a", "m:b", "m:{t}c"];
const OWNERS: [&str; 3] = ["o1", "o2", "o3"];
const LEASES: [i64; 2] = [300_000, 600_000];
const UPGRADE: &str = "ERR cannot upgrade a READ hold to WRITE (it would deadlock)";
const BOTH: &str = "ERR owner holds READ and WRITE: name the mode to release";

#[derive(Clone, Debug, Default)]
struct RwHold {
    read: i64,
    write: i64,
    deadline: f64,
}

#[derive(Clone, Debug)]
enum Lock {
    Free,
    Excl {
        owner: String,
        count: i64,
        deadline: f64,
    },
    Rw(BTreeMap<String, RwHold>),
    /// The key holds a value of another type (a string), so DLOCK commands answer WRONGTYPE.
    WrongType,
}

/// What a hold asks for: the exclusive lock (DLOCK.ACQUIRE) or a mode of the read-write
/// lock (DLOCK.RWLOCK).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Exclusive,
    Read,
    Write,
}

/// DLOCK.ACQUIRE or DLOCK.RWLOCK: `wait` adds a short WAIT, `fence` FENCE.
#[derive(Clone, Debug, PartialEq)]
struct Hold {
    key: usize,
    owner: usize,
    mode: Mode,
    lease: i64,
    fence: bool,
    wait: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Hold(Hold),
    Release {
        key: usize,
        owner: usize,
        mode: Option<bool>, // Some(true) = WRITE
    },
    Renew {
        key: usize,
        owner: usize,
        lease: i64,
    },
    Del {
        key: usize,
    },
    SetString {
        key: usize,
    },
    Lapse {
        key: usize,
        owner: usize,
    },
}

struct Model {
    locks: Vec<Lock>,
    /// The fencing counter of each slot, by its key name.
    fences: BTreeMap<String, i64>,
    /// The token of each lock's current hold, if it took one.
    tokens: Vec<Option<i64>>,
    t0: Instant,
}

fn int(n: i64) -> Reply {
    Reply::Int(n)
}

fn wrongtype() -> Reply {
    Reply::Err(WRONGTYPE.into())
}

fn granted(count: i64, fence: Option<i64>) -> Reply {
    match fence {
        Some(f) => Reply::Arr(vec![Reply::Int(count), Reply::Int(f)]),
        None => Reply::Int(count),
    }
}

impl Model {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1000.0
    }

    /// The fencing token on a grant (docs/BEHAVIOUR.md "Fencing tokens"): a fresh exclusive
    /// hold drops the previous token; FENCE returns the hold's token, else draws the next value
    /// of the slot's counter (READ: its current value, nothing kept).
    fn fence_on_grant(
        &mut self,
        key: usize,
        fresh_exclusive: bool,
        want: bool,
        read: bool,
    ) -> Option<i64> {
        if fresh_exclusive {
            self.tokens[key] = None;
        }
        if !want {
            return None;
        }
        if let Some(t) = self.tokens[key] {
            return Some(t);
        }
        let name = slot_fence_key(KEYS[key]);
        if read {
            return Some(self.fences.get(&name).copied().unwrap_or(0));
        }
        let counter = self.fences.entry(name).or_insert(0);
        *counter += 1;
        self.tokens[key] = Some(*counter);
        Some(*counter)
    }

    /// [`Model::apply_op`], then a lock that is gone takes its token with it.
    fn apply(&mut self, op: &Op, sent: f64) -> Reply {
        let reply = self.apply_op(op, sent);
        for (key, lock) in self.locks.iter().enumerate() {
            if matches!(lock, Lock::Free | Lock::WrongType) {
                self.tokens[key] = None;
            }
        }
        reply
    }

    /// Applies `op` (sent at `sent`, model ms) and returns the reply the spec demands.
    fn apply_op(&mut self, op: &Op, sent: f64) -> Reply {
        match *op {
            Op::Hold(ref h) => {
                let o = OWNERS[h.owner].to_string();
                let deadline = sent + h.lease as f64;
                match h.mode {
                    Mode::Exclusive => self.grant_exclusive(h.key, o, deadline, h.fence),
                    Mode::Read | Mode::Write => {
                        self.grant_rw(h.key, o, h.mode == Mode::Write, deadline, h.fence)
                    }
                }
            }
            Op::Release { key, owner, mode } => {
                let o = OWNERS[owner];
                match &mut self.locks[key] {
                    Lock::WrongType => wrongtype(),
                    Lock::Free => Reply::Nil,
                    Lock::Excl {
                        owner: h, count, ..
                    } => {
                        if mode.is_some() {
                            return wrongtype();
                        }
                        if h != o {
                            return Reply::Nil;
                        }
                        *count -= 1;
                        if *count == 0 {
                            self.locks[key] = Lock::Free;
                            int(1)
                        } else {
                            int(0)
                        }
                    }
                    Lock::Rw(holders) => {
                        let Some(h) = holders.get_mut(o) else {
                            return Reply::Nil;
                        };
                        let write = match mode {
                            Some(w) => w,
                            None if h.read > 0 && h.write > 0 => return Reply::Err(BOTH.into()),
                            None => h.write > 0,
                        };
                        let c = if write { &mut h.write } else { &mut h.read };
                        if *c == 0 {
                            return Reply::Nil;
                        }
                        *c -= 1;
                        let reply = int(i64::from(*c == 0));
                        if h.read == 0 && h.write == 0 {
                            holders.remove(o);
                        }
                        if holders.is_empty() {
                            self.locks[key] = Lock::Free;
                        }
                        reply
                    }
                }
            }
            Op::Renew { key, owner, lease } => {
                let o = OWNERS[owner];
                let deadline = sent + lease as f64;
                match &mut self.locks[key] {
                    Lock::WrongType => wrongtype(),
                    Lock::Free => int(0),
                    Lock::Excl {
                        owner: h,
                        deadline: d,
                        ..
                    } => {
                        if h == o {
                            *d = deadline;
                            int(1)
                        } else {
                            int(0)
                        }
                    }
                    Lock::Rw(holders) => match holders.get_mut(o) {
                        Some(h) => {
                            h.deadline = deadline;
                            int(1)
                        }
                        None => int(0),
                    },
                }
            }
            Op::Del { key } => {
                self.locks[key] = Lock::Free;
                Reply::Int(-1) // not compared (DEL's reply is Redis's)
            }
            Op::SetString { key } => {
                self.locks[key] = Lock::WrongType;
                Reply::Status("OK".into())
            }
            Op::Lapse { key, owner } => {
                let o = OWNERS[owner];
                match &mut self.locks[key] {
                    Lock::Excl { owner: h, .. } if h == o => self.locks[key] = Lock::Free,
                    Lock::Rw(holders) => {
                        holders.remove(o);
                        if holders.is_empty() {
                            self.locks[key] = Lock::Free;
                        }
                    }
                    _ => {}
                }
                int(1)
            }
        }
    }

    /// DLOCK.ACQUIRE of `o` with a lease to `deadline` (model ms).
    fn grant_exclusive(&mut self, key: usize, o: String, deadline: f64, fence: bool) -> Reply {
        match &mut self.locks[key] {
            Lock::WrongType | Lock::Rw(_) => wrongtype(),
            Lock::Free => {
                self.locks[key] = Lock::Excl {
                    owner: o,
                    count: 1,
                    deadline,
                };
                let f = self.fence_on_grant(key, true, fence, false);
                granted(1, f)
            }
            Lock::Excl {
                owner: h,
                count,
                deadline: d,
            } => {
                if *h != o {
                    return Reply::Nil;
                }
                *count += 1;
                *d = deadline;
                let c = *count;
                let f = self.fence_on_grant(key, false, fence, false);
                granted(c, f)
            }
        }
    }

    /// DLOCK.RWLOCK of `o` in one mode with a lease to `deadline` (model ms).
    fn grant_rw(
        &mut self,
        key: usize,
        o: String,
        write: bool,
        deadline: f64,
        fence: bool,
    ) -> Reply {
        let lock = &mut self.locks[key];
        if matches!(lock, Lock::WrongType | Lock::Excl { .. }) {
            return wrongtype();
        }
        if matches!(lock, Lock::Free) {
            *lock = Lock::Rw(BTreeMap::new());
        }
        let Lock::Rw(holders) = lock else {
            unreachable!()
        };
        let writer = holders
            .iter()
            .find(|(_, h)| h.write > 0)
            .map(|(n, _)| n.clone());
        let mine = holders.get(&o).cloned().unwrap_or_default();
        let (count, fresh) = if write {
            if mine.write > 0 {
                (mine.write + 1, false)
            } else if mine.read > 0 {
                return Reply::Err(UPGRADE.into());
            } else if !holders.is_empty() {
                return Reply::Nil;
            } else {
                (1, true)
            }
        } else {
            match &writer {
                Some(w) if *w != o => {
                    if holders.is_empty() {
                        unreachable!()
                    }
                    return Reply::Nil;
                }
                _ => (mine.read + 1, false),
            }
        };
        let h = holders.entry(o).or_default();
        if write {
            h.write = count;
        } else {
            h.read = count;
        }
        h.deadline = deadline;
        let f = self.fence_on_grant(key, fresh, fence, !write);
        granted(count, f)
    }

    fn holds(&self, key: usize, owner: usize) -> bool {
        match &self.locks[key] {
            Lock::Excl { owner: h, .. } => h == OWNERS[owner],
            Lock::Rw(holders) => holders.contains_key(OWNERS[owner]),
            _ => false,
        }
    }
}

fn random_op(rng: &mut StdRng, m: &Model) -> Op {
    // Key 0 is mostly an exclusive lock, key 1 mostly a read-write lock, key 2 sees both.
    let any_key = rng.gen_range(0..KEYS.len());
    let excl_key = [0, 0, 0, 2][rng.gen_range(0..4)];
    let rw_key = [1, 1, 1, 2][rng.gen_range(0..4)];
    let owner = rng.gen_range(0..OWNERS.len());
    let lease = LEASES[rng.gen_range(0..LEASES.len())];
    let fence = rng.gen_bool(0.3);
    let wait = rng.gen_bool(0.03);
    let hold = |key, mode| {
        Op::Hold(Hold {
            key,
            owner,
            mode,
            lease,
            fence,
            wait,
        })
    };
    match rng.gen_range(0..100) {
        0..=24 => hold(excl_key, Mode::Exclusive),
        25..=54 if rng.gen_bool(0.4) => hold(rw_key, Mode::Write),
        25..=54 => hold(rw_key, Mode::Read),
        55..=79 => Op::Release {
            key: any_key,
            owner,
            mode: match rng.gen_range(0..5) {
                0..=2 => None,
                3 => Some(false),
                _ => Some(true),
            },
        },
        80..=87 => Op::Renew {
            key: any_key,
            owner,
            lease,
        },
        88..=91 => Op::Del { key: any_key },
        92 if rng.gen_bool(0.5) => Op::SetString { key: any_key },
        92 => Op::Del { key: any_key },
        _ => {
            // Lapse a real holder when there is one.
            let held: Vec<(usize, usize)> = (0..KEYS.len())
                .flat_map(|k| (0..OWNERS.len()).map(move |o| (k, o)))
                .filter(|&(k, o)| m.holds(k, o))
                .collect();
            match held.get(rng.gen_range(0..held.len().max(1))) {
                Some(&(key, owner)) => Op::Lapse { key, owner },
                None => Op::Del { key: any_key },
            }
        }
    }
}

fn words(op: &Op) -> Vec<String> {
    let s = |x: &str| x.to_string();
    match *op {
        Op::Hold(ref h) => {
            let (key, owner) = (s(KEYS[h.key]), s(OWNERS[h.owner]));
            let mut v = match h.mode {
                Mode::Exclusive => vec![s("DLOCK.ACQUIRE"), key, owner],
                Mode::Read => vec![s("DLOCK.RWLOCK"), key, owner, s("READ")],
                Mode::Write => vec![s("DLOCK.RWLOCK"), key, owner, s("WRITE")],
            };
            v.push(h.lease.to_string());
            if h.wait {
                v.extend([s("WAIT"), s("20")]);
            }
            if h.fence {
                v.push(s("FENCE"));
            }
            v
        }
        Op::Release { key, owner, mode } => {
            let mut v = vec![s("DLOCK.RELEASE"), s(KEYS[key]), s(OWNERS[owner])];
            if let Some(w) = mode {
                v.push(s(if w { "WRITE" } else { "READ" }));
            }
            v
        }
        Op::Renew { key, owner, lease } => vec![
            s("DLOCK.RENEW"),
            s(KEYS[key]),
            s(OWNERS[owner]),
            lease.to_string(),
        ],
        Op::Del { key } => vec![s("DEL"), s(KEYS[key])],
        Op::SetString { key } => vec![s("SET"), s(KEYS[key]), s("not-a-lock")],
        Op::Lapse { key, owner } => {
            vec![s("DLOCK.RENEW"), s(KEYS[key]), s(OWNERS[owner]), s("1")]
        }
    }
}

/// A lock's holders as DLOCK.INFO lists them: (owner, mode, count).
type Holders = BTreeSet<(String, String, i64)>;

/// Compares the server's view of `key` with the model; `Err` describes the difference.
fn compare(c: &mut Connection, m: &Model, key: usize) -> Result<(), String> {
    let k = KEYS[key];
    let counter = slot_fence_key(k);
    let fence = get_int(c, &counter);
    if fence != m.fences.get(&counter).copied() {
        return Err(format!(
            "fence {fence:?}, model {:?}",
            m.fences.get(&counter)
        ));
    }
    let r = cmd(c, &["DLOCK.INFO", k]);
    if let Lock::WrongType = m.locks[key] {
        return match r {
            Reply::Err(e) if e == WRONGTYPE => Ok(()),
            other => Err(format!("DLOCK.INFO on a non-lock: {other:?}")),
        };
    }
    let Reply::Arr(a) = r else {
        return Err(format!("DLOCK.INFO: {r:?}"));
    };
    let f: HashMap<String, Reply> = a.chunks(2).map(|p| (p[0].str(), p[1].clone())).collect();
    let now = m.now();
    let (kind, mode, holders, lease): (&str, Reply, Holders, Option<f64>) = match &m.locks[key] {
        Lock::Free => ("none", Reply::Nil, BTreeSet::new(), None),
        Lock::Excl {
            owner,
            count,
            deadline,
        } => (
            "lock",
            Reply::Bulk("exclusive".into()),
            [(owner.clone(), "exclusive".to_string(), *count)].into(),
            Some(*deadline),
        ),
        Lock::Rw(hs) => {
            let mut set = BTreeSet::new();
            for (o, h) in hs {
                if h.write > 0 {
                    set.insert((o.clone(), "write".to_string(), h.write));
                }
                if h.read > 0 {
                    set.insert((o.clone(), "read".to_string(), h.read));
                }
            }
            let mode = if hs.values().any(|h| h.write > 0) {
                "write"
            } else {
                "read"
            };
            let latest = hs.values().map(|h| h.deadline).fold(f64::MIN, f64::max);
            ("rwlock", Reply::Bulk(mode.into()), set, Some(latest))
        }
        Lock::WrongType => unreachable!(),
    };
    if f["kind"] != Reply::Bulk(kind.into()) {
        return Err(format!("kind {:?}, model {kind}", f["kind"]));
    }
    if f["mode"] != mode {
        return Err(format!("mode {:?}, model {mode:?}", f["mode"]));
    }
    if f["waiters"] != Reply::Int(0) {
        return Err(format!("waiters {:?}", f["waiters"]));
    }
    let token = m.tokens[key].map_or(Reply::Nil, Reply::Int);
    if f["fence"] != token {
        return Err(format!("INFO fence {:?}, model {token:?}", f["fence"]));
    }
    let got: Holders = f["holders"]
        .arr()
        .iter()
        .map(|h| {
            let h = h.arr();
            (h[0].str(), h[1].str(), h[2].int())
        })
        .collect();
    if got != holders {
        return Err(format!("holders {got:?}, model {holders:?}"));
    }
    // Remaining leases: the key's and each read-write holder's, within 2 s of the model (the
    // two lease lengths differ by 5 minutes).
    let close = |server: i64, deadline: f64| (server as f64 - (deadline - now)).abs() <= 2000.0;
    match lease {
        None => {
            if f["lease-ms"] != Reply::Int(-2) || exists(c, k) {
                return Err(format!("free lock but lease-ms {:?}", f["lease-ms"]));
            }
        }
        Some(d) => {
            if !close(f["lease-ms"].int(), d) {
                return Err(format!(
                    "lease-ms {:?}, model {:.0}",
                    f["lease-ms"],
                    d - now
                ));
            }
        }
    }
    if let Lock::Rw(hs) = &m.locks[key] {
        for h in f["holders"].arr() {
            let h = h.arr();
            let want = hs[&h[0].str()].deadline;
            if !close(h[3].int(), want) {
                return Err(format!(
                    "holder {:?} lease {:?}, model {:.0}",
                    h[0],
                    h[3],
                    want - now
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn random_operations_follow_the_spec_model() {
    let steps = dlock_testutil::workers::scale(5000, 50_000);
    let seed: u64 = std::env::var("DLOCK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    println!("model test: seed {seed} (DLOCK_SEED={seed} to replay), {steps} steps");
    let mut rng = StdRng::seed_from_u64(seed);
    let srv = Server::start();
    let mut c = srv.connection();
    let mut m = Model {
        locks: vec![Lock::Free; KEYS.len()],
        fences: BTreeMap::new(),
        tokens: vec![None; KEYS.len()],
        t0: Instant::now(),
    };
    let mut history: Vec<String> = vec![];
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let t0 = Instant::now();
    for step in 0..steps {
        let op = random_op(&mut rng, &m);
        let w = words(&op);
        let refs: Vec<&str> = w.iter().map(|s| s.as_str()).collect();
        let sent = m.now();
        let got = cmd(&mut c, &refs);
        let expect = m.apply(&op, sent);
        history.push(format!("{step}: {} -> {got:?}", w.join(" ")));
        if history.len() > 30 {
            history.remove(0);
        }
        let fail = |why: String, history: &[String]| -> ! {
            panic!(
                "step {step} (seed {seed}): {why}\nlast steps:\n{}",
                history.join("\n")
            )
        };
        let name = match op {
            Op::Lapse { .. } => "lapse".to_string(),
            _ => refs[0].to_string(),
        };
        *counts.entry(name).or_default() += 1;
        match &op {
            Op::Del { .. } => {}
            Op::Lapse { key, owner } => {
                if got != Reply::Int(1) {
                    fail(format!("RENEW to lapse answered {got:?}"), &history);
                }
                // Wait until the server no longer lists the holder (its lease ran out).
                let k = KEYS[*key];
                let o = Reply::Bulk(OWNERS[*owner].into());
                wait_for(Duration::from_secs(5), "the lease to lapse", || {
                    let h = match cmd(&mut c, &["DLOCK.INFO", k]) {
                        Reply::Arr(a) => a[7].arr(),
                        _ => return Some(()),
                    };
                    (!h.iter().any(|e| e.arr()[0] == o)).then_some(())
                });
            }
            _ => {
                if got != expect {
                    fail(format!("expected {expect:?}"), &history);
                }
            }
        }
        let key = match op {
            Op::Hold(Hold { key, .. })
            | Op::Release { key, .. }
            | Op::Renew { key, .. }
            | Op::Del { key }
            | Op::SetString { key }
            | Op::Lapse { key, .. } => key,
        };
        if let Err(why) = compare(&mut c, &m, key) {
            fail(
                format!("state of {} after the step: {why}", KEYS[key]),
                &history,
            );
        }
        if step % 100 == 99 {
            for (k, name) in KEYS.iter().enumerate() {
                if let Err(why) = compare(&mut c, &m, k) {
                    fail(format!("state of {name}: {why}"), &history);
                }
            }
        }
    }
    let stats = info_dlock(&mut c);
    println!(
        "model test: {steps} steps in {:?}, all replies and states as the model says; ops \
         {counts:?}; server grants {} reentrant {} releases {} renewals {} errors {}",
        t0.elapsed(),
        stats["dlock_grants"],
        stats["dlock_reentrant_grants"],
        stats["dlock_releases"],
        stats["dlock_renewals"],
        stats["dlock_errors"]
    );
}
