//! Whether anything receives what the module propagates: the AOF, replicas, or nothing.
//!
//! Redis drops a propagated command unless the AOF is on or the server is a master with
//! replicas or a replication backlog (`shouldPropagate` in server.c, Redis 7.0 to 8.x, Valkey
//! alike). `RedisModule_Replicate` pays ~2.5k instructions (a command-table look-up through
//! new strings, an argument vector) before that test, so on a standalone server without AOF
//! every propagated write cost that for nothing. This file keeps Redis's answer, cached:
//! [`replicate`](super::replicate) skips the call when Redis would drop the command.
//!
//! The answer can only turn from "nothing" to "something" at moments Redis announces:
//! - a replica syncs: the backlog is created in SYNC/PSYNC, then a child is forked for the
//!   snapshot (`fork`); what was written before the fork is in the snapshot, what comes
//!   after must be propagated (a partial resync needs a backlog, which only these paths
//!   create);
//! - the AOF is switched on at run time: Redis forks its rewrite (`fork`); writes before
//!   the fork are in the rewrite;
//! - the server turns replica or master (`role changed`), a replica comes or goes;
//! - start-up, MODULE LOAD, loading a data set (a master keeps the backlog of an RDB that
//!   has replication information).
//!
//! A Valkey 9+ cluster node always propagates: an atomic slot migration streams the slot's
//! propagated writes to its target, and it may start at any moment.
//!
//! Each of these only marks the answer unknown; the next propagation asks Redis again
//! (INFO replication, ~20k instructions once). Turning back to "nothing" (AOF switched off,
//! backlog freed after `repl-backlog-ttl`) is not announced: the module keeps propagating
//! (what Redis then drops), the safe direction.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use redis_module::raw;

use super::server_info::ServerInfo;
use super::{api, Ctx};

const KNOWN: u8 = 1;
/// The AOF is on (or being switched on).
const AOF: u8 = 2;
/// The server is a replica, or has replicas or a replication backlog.
const REPLICAS: u8 = 4;

/// `KNOWN | AOF? | REPLICAS?`, or 0 when Redis must be asked again.
static TARGETS: AtomicU8 = AtomicU8::new(0);

/// What receives propagated commands now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Targets {
    pub aof: bool,
    pub replicas: bool,
}

impl Targets {
    pub fn any(self) -> bool {
        self.aof || self.replicas
    }
}

/// Where Redis would send a command propagated now (asks Redis when not known).
#[inline]
pub fn get(ctx: Ctx) -> Targets {
    let mut t = TARGETS.load(Ordering::Relaxed);
    if t & KNOWN == 0 {
        t = KNOWN | ask(ctx);
        TARGETS.store(t, Ordering::Relaxed);
    }
    Targets {
        aof: t & AOF != 0,
        replicas: t & REPLICAS != 0,
    }
}

/// The next propagation asks Redis again.
pub fn forget() {
    TARGETS.store(0, Ordering::Relaxed);
}

/// AOF and replication state as Redis reports it; anything unreadable counts as a target.
/// Out of line: [`get`] runs on every propagation and asks only after an announced change.
#[cold]
#[inline(never)]
fn ask(ctx: Ctx) -> u8 {
    // SAFETY: a live context of the running callback.
    let flags = unsafe { api!(RedisModule_GetContextFlags)(ctx.as_ptr()) } as u32;
    let mut t = 0;
    if flags & raw::REDISMODULE_CTX_FLAGS_AOF != 0 {
        t |= AOF;
    }
    if flags & raw::REDISMODULE_CTX_FLAGS_MASTER == 0 || replication_in_use(ctx) {
        t |= REPLICAS;
    }
    // Valkey 9+ cluster: an atomic slot migration (`CLUSTER MIGRATESLOTS`) may start at any
    // moment and sends the target the slot's writes as propagated, replicas or not.
    let cluster = flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0;
    if cluster && super::cluster::server_has_atomic_slot_migration(ctx) {
        t |= REPLICAS;
    }
    t
}

/// `INFO replication` says this master has replicas or a backlog (or cannot be read).
fn replication_in_use(ctx: Ctx) -> bool {
    let Some(info) = ServerInfo::section(ctx, c"replication") else {
        return true;
    };
    let slaves = info.signed(c"connected_slaves");
    let backlog = info.signed(c"repl_backlog_active");
    !matches!((slaves, backlog), (Some(0), Some(0)))
}

/// Counts the moments keys may have arrived that no command of this server wrote: an RDB or
/// AOF load (also a replica's full sync), a change of replication role. Read by
/// `engine::delay`; counted here because Redis keeps one callback per event and module.
pub static KEYS_ARRIVED: AtomicU64 = AtomicU64::new(0);

/// The server events after which the answer is unknown. Redis keeps one callback per event
/// and module: `events::subscribe_server` subscribes to them and passes each to
/// [`on_server_event`] first.
pub const EVENTS: [u64; 4] = [
    raw::REDISMODULE_EVENT_FORK_CHILD,
    raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
    raw::REDISMODULE_EVENT_REPLICA_CHANGE,
    raw::REDISMODULE_EVENT_LOADING,
];

/// A server event arrived: any of [`EVENTS`] makes the next propagation ask Redis again.
pub fn on_server_event(id: u64) {
    if !EVENTS.contains(&id) {
        return;
    }
    forget();
    if id == raw::REDISMODULE_EVENT_LOADING || id == raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED
    {
        KEYS_ARRIVED.fetch_add(1, Ordering::Relaxed);
    }
}
