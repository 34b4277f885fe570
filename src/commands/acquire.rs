//! DLOCK.ACQUIRE, DLOCK.RWLOCK and DLOCK.SEMAPHORE: grant now, or queue the client (`WAIT`),
//! or answer null. The three differ only in their arguments: the kind of hold (`Want`) goes
//! through the same rules, queue and grant path.

use std::ffi::CStr;

use dlock_core::args::{self, AcquireArgs};
use dlock_core::error::LockError;

use super::docs::{BIND, FENCE, KEY, LEASE, LOCKDELAY, OWNER, READ, WAIT, WRITE};
use crate::engine::deadlock;
use crate::engine::store::Requester;
use crate::engine::work::{self, Request};
use crate::ffi::command::{Args, Command};
use crate::ffi::command_info::{arg, option, Arg, KeyUse, Kind, Spec};
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

/// `DLOCK.ACQUIRE key owner lease-ms [WAIT timeout-ms] [FENCE] [BIND grace-ms] [LOCKDELAY ms]`
pub struct Acquire;

impl Command for Acquire {
    const SPEC: Spec = taking(
        c"dlock.acquire",
        -4,
        c"Takes an exclusive lock (Redisson RLock layout), re-entrant per owner; with WAIT, queues FIFO until granted or timed out",
        c"O(1)",
        &[KEY, OWNER, LEASE, WAIT, FENCE, BIND, LOCKDELAY],
    );

    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply::<Self>(args::acquire(argv).and_then(|a| acquire(ctx, a, strs)))
    }
}

/// `DLOCK.RWLOCK key owner READ|WRITE lease-ms [WAIT timeout-ms] [FENCE] [BIND grace-ms] [LOCKDELAY ms]`
pub struct RwLock;

impl Command for RwLock {
    const SPEC: Spec = taking(
        c"dlock.rwlock",
        -5,
        c"Takes the read or the write side of a read-write lock with a lease per holder; with WAIT, queues FIFO until granted or timed out",
        c"O(N) where N is the number of holders",
        &[
        KEY,
        OWNER,
        arg(c"mode", Kind::OneOf(&[READ, WRITE])),
        LEASE,
        WAIT,
        FENCE,
        BIND,
        LOCKDELAY,
    ],
    );

    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply::<Self>(args::rwlock(argv).and_then(|a| acquire(ctx, a, strs)))
    }
}

/// `DLOCK.SEMAPHORE key owner capacity lease-ms [COUNT n] [WAIT timeout-ms] [BIND grace-ms]`
pub struct Semaphore;

impl Command for Semaphore {
    const SPEC: Spec = taking(
        c"dlock.semaphore",
        -5,
        c"Takes permits of a counting semaphore with a lease per holder; with WAIT, queues FIFO until granted or timed out",
        c"O(N) where N is the number of holders",
        &[
        KEY,
        OWNER,
        arg(c"capacity", Kind::Integer),
        LEASE,
        option(c"count", c"COUNT", Kind::Integer),
        WAIT,
        BIND,
    ],
    );

    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply::<Self>(args::semaphore(argv).and_then(|a| acquire(ctx, a, strs)))
    }
}

/// The declaration of a command that takes a hold: the three differ only in name, arity, docs
/// and arguments.
const fn taking(
    name: &'static CStr,
    arity: i32,
    summary: &'static CStr,
    complexity: &'static CStr,
    args: &'static [Arg],
) -> Spec {
    Spec {
        name,
        flags: c"write deny-oom",
        arity,
        key_at: 1,
        key_use: KeyUse::Grant,
        acl: c"write slow blocking",
        summary,
        complexity,
        since: c"0.1.0",
        tips: None,
        args,
    }
}

fn acquire(ctx: Ctx, a: AcquireArgs, strs: Args) -> Result<Reply, LockError> {
    let db = ctx.selected_db();
    let req = Request {
        owner: a.owner,
        want: a.want,
        lease_ms: a.lease_ms,
        fence: a.fence,
        bind: bind_to(ctx, a.bind),
        lock_delay: a.lock_delay,
    };
    let owner = Requester {
        owner: a.owner,
        arg: strs.get(1),
    };
    work::unit_of_work(ctx, db, a.key, strs.get(0), Some(owner), |reg, lk, now| {
        let queue_ahead = reg.waiters_on(db, a.key) > 0;
        match work::try_grant(ctx, lk, req, now, queue_ahead)? {
            Some(reply) => Ok(reply),
            None => match a.wait_ms {
                Some(wait_ms) if ctx.may_block() => {
                    let about_to_wait = deadlock::Request {
                        db,
                        key: a.key,
                        value: &lk.value,
                        owner: a.owner,
                        want: a.want,
                    };
                    if let Some(cycle) = deadlock::find(ctx, reg, &about_to_wait, now) {
                        Stats::add(&STATS.deadlocks, 1);
                        return Err(LockError::Deadlock(cycle));
                    }
                    work::enqueue(ctx, reg, db, a.key, req, wait_ms).map(|()| Reply::None)
                }
                _ => Ok(Reply::Null),
            },
        }
    })
}

/// `BIND grace-ms`: the sending connection and the grace; nothing from a script, a master or
/// the AOF (no user's connection to watch).
pub(super) fn bind_to(ctx: Ctx, grace_ms: Option<i64>) -> Option<(u64, i64)> {
    grace_ms
        .filter(|_| ctx.sent_by_a_connection())
        .map(|g| (ctx.client_id(), g))
}
