//! DLOCK.ACQUIRE, DLOCK.RWLOCK and DLOCK.SEMAPHORE: grant now, or queue the client (`WAIT`),
//! or answer null. The three differ only in their arguments: the kind of hold (`Want`) goes
//! through the same rules, queue and grant path.

use dlock_core::args::{self, AcquireArgs};
use dlock_core::error::LockError;

use crate::engine::deadlock;
use crate::engine::store::Requester;
use crate::engine::work::{self, Request};
use crate::ffi::command::{Args, Command};
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

/// `DLOCK.ACQUIRE key owner lease-ms [WAIT timeout-ms] [FENCE] [BIND grace-ms] [LOCKDELAY ms]`
pub struct Acquire;

impl Command for Acquire {
    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply(
            "dlock.acquire",
            args::acquire(argv).and_then(|a| acquire(ctx, a, strs)),
        )
    }
}

/// `DLOCK.RWLOCK key owner READ|WRITE lease-ms [WAIT timeout-ms] [FENCE] [BIND grace-ms] [LOCKDELAY ms]`
pub struct RwLock;

impl Command for RwLock {
    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply(
            "dlock.rwlock",
            args::rwlock(argv).and_then(|a| acquire(ctx, a, strs)),
        )
    }
}

/// `DLOCK.SEMAPHORE key owner capacity lease-ms [COUNT n] [WAIT timeout-ms] [BIND grace-ms]`
pub struct Semaphore;

impl Command for Semaphore {
    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply(
            "dlock.semaphore",
            args::semaphore(argv).and_then(|a| acquire(ctx, a, strs)),
        )
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
    work::with_lock(ctx, db, a.key, strs.get(0), Some(owner), |reg, lk, now| {
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
                    crate::events::watch_changes(ctx);
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
