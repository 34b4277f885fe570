//! Where LOCKDELAY's companion keys may exist, so that a unit of work looks for one only
//! then: most servers have none, and the look-up (a name built, `RM_KeyExists`) was ~800
//! instructions of every unit of work.
//!
//! Two kinds of knowledge:
//! - `known`: the companions this module wrote or found, until seen gone (deleted by the
//!   module, expired or evicted, or found missing by a unit of work);
//! - `unknown`: companions may exist that the module did not write. Set at load (MODULE LOAD
//!   onto a data set), by an RDB or AOF load, a replication role change (a replica takes its
//!   master's writes; a promoted one keeps them), FLUSHDB/SWAPDB and a replica's async load;
//!   cleared by a walk over every database (`Job::DelayScan`, spread over timer ticks) that
//!   finds every companion present, provided nothing set it again meanwhile. In cluster mode
//!   it is never cleared: a slot migration brings keys with no event on this node.
//!
//! Not seen: a companion written by a client's own commands (HSET, RESTORE, COPY...) on a
//! standalone server is honoured once the next load or role change makes it `unknown`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::ffi::key::KeyCursor;
use crate::ffi::targets::KEYS_ARRIVED;
use crate::ffi::{timer, Ctx};

use super::job::Job;

/// `RedisModule_Scan` steps per timer tick (a step visits a few keys).
const STEPS_PER_TICK: usize = 1_000;

#[derive(Default)]
struct Presence {
    /// Companion names by database.
    known: FxHashMap<i32, FxHashSet<Vec<u8>>>,
    unknown: bool,
    /// Cluster mode: `unknown` for good.
    cluster: bool,
    /// Bumped whenever `unknown` is set: a walk begun before proves nothing.
    generation: u64,
    walk: Option<Walk>,
}

/// A walk over the databases in progress (its timer armed).
struct Walk {
    generation: u64,
    db: i32,
    cursor: KeyCursor,
}

static PRESENCE: Mutex<Option<Presence>> = Mutex::new(None);
/// `unknown || !known.is_empty()`: read without the lock on every unit of work.
static ANY: AtomicBool = AtomicBool::new(true);

fn presence() -> MutexGuard<'static, Option<Presence>> {
    PRESENCE.lock().unwrap_or_else(|e| e.into_inner())
}

impl Presence {
    fn publish(&self) {
        ANY.store(
            self.unknown || self.cluster || !self.known.is_empty(),
            Ordering::Relaxed,
        );
    }

    /// Companions may have arrived unseen: `unknown`, and a walk to clear it.
    fn arrived(&mut self, ctx: Ctx) {
        self.unknown = true;
        self.generation += 1;
        self.start_walk(ctx);
    }

    fn start_walk(&mut self, ctx: Ctx) {
        if self.walk.is_none() && !self.cluster && ctx.may_write() {
            self.walk = Some(Walk {
                generation: self.generation,
                db: 0,
                cursor: KeyCursor::new(),
            });
            timer::start(ctx, 0, Job::DelayScan);
        }
    }

    /// Takes the load and role-change events counted by `ffi::targets` into account.
    fn catch_up(&mut self, ctx: Ctx) {
        let arrivals = KEYS_ARRIVED.load(Ordering::Relaxed);
        if arrivals != SEEN.load(Ordering::Relaxed) {
            SEEN.store(arrivals, Ordering::Relaxed);
            self.arrived(ctx);
        }
    }
}

fn with<R>(f: impl FnOnce(&mut Presence) -> R) -> R {
    let mut guard = presence();
    let p = guard.get_or_insert_with(|| Presence {
        unknown: true,
        ..Presence::default()
    });
    let r = f(p);
    p.publish();
    r
}

/// At module load: whatever the databases hold is unknown (a walk follows).
pub fn init(ctx: Ctx) {
    with(|p| {
        p.cluster = ctx.in_cluster();
        SEEN.store(KEYS_ARRIVED.load(Ordering::Relaxed), Ordering::Relaxed);
        p.arrived(ctx);
    });
}

/// Companions may have arrived unseen (FLUSHDB, SWAPDB, a replica's async load).
pub fn arrived(ctx: Ctx) {
    with(|p| p.arrived(ctx));
}

/// Whether the companion `name` of a lock in `db` may exist (else it certainly does not).
/// Cheap when no companion can exist anywhere: two atomic loads.
pub fn may_exist(ctx: Ctx, db: i32, name: impl FnOnce() -> Vec<u8>) -> MayExist {
    let seen = SEEN.load(Ordering::Relaxed);
    if !ANY.load(Ordering::Relaxed) && KEYS_ARRIVED.load(Ordering::Relaxed) == seen {
        return MayExist::No;
    }
    with(|p| {
        p.catch_up(ctx);
        if p.unknown || p.cluster {
            p.start_walk(ctx);
            return MayExist::Maybe;
        }
        if p.known.is_empty() {
            return MayExist::No;
        }
        match p.known.get(&db) {
            Some(names) if names.contains(name().as_slice()) => MayExist::Maybe,
            _ => MayExist::No,
        }
    })
}

/// The answer of [`may_exist`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum MayExist {
    No,
    Maybe,
}

/// `KEYS_ARRIVED` as last taken into account.
static SEEN: AtomicU64 = AtomicU64::new(0);

/// The module wrote (or found) the companion `name` in `db`.
pub fn exists(db: i32, name: &[u8]) {
    with(|p| {
        let names = p.known.entry(db).or_default();
        if !names.contains(name) {
            names.insert(name.to_vec());
        }
    });
}

/// The companion `name` in `db` is gone (deleted, expired, evicted, or found missing).
pub fn gone(db: i32, name: &[u8]) {
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    with(|p| {
        if let Some(names) = p.known.get_mut(&db) {
            names.remove(name);
            if names.is_empty() {
                p.known.remove(&db);
            }
        }
    });
}

/// `Job::DelayScan`: the next steps of the walk; the companions it meets become `known`.
pub(super) fn walk_step(ctx: Ctx) {
    with(|p| {
        p.catch_up(ctx);
        let Some(mut walk) = p.walk.take() else {
            return;
        };
        if !ctx.may_write() {
            // Loading, or a replica (its master's writes keep arriving): `unknown` stays, and
            // the next load or role change starts a new walk.
            return;
        }
        if walk.generation != p.generation {
            walk = Walk {
                generation: p.generation,
                db: 0,
                cursor: KeyCursor::new(),
            };
        }
        let mut steps = 0;
        while steps < STEPS_PER_TICK {
            let db = walk.db;
            if !ctx.try_select_db(db) {
                // Every database walked, nothing set `unknown` again meanwhile.
                p.unknown = false;
                ctx.select_db(0);
                return;
            }
            let mut found = vec![];
            while steps < STEPS_PER_TICK {
                steps += 1;
                let more = walk.cursor.step(ctx, |name| {
                    if dlock_core::names::is_delay_key(name) {
                        found.push(name.to_vec());
                    }
                });
                if !more {
                    walk.db += 1;
                    walk.cursor = KeyCursor::new();
                    break;
                }
            }
            if !found.is_empty() {
                p.known.entry(db).or_default().extend(found);
            }
        }
        ctx.select_db(0);
        p.walk = Some(walk);
        timer::start(ctx, 1, Job::DelayScan);
    });
}

/// MODULE UNLOAD.
pub fn free_all() {
    *presence() = None;
    ANY.store(true, Ordering::Relaxed);
}
