//! The wait policy of a request for a hold (DLOCK.ACQUIRE, RWLOCK, SEMAPHORE): granted now if
//! the lock and the queue allow it; otherwise, with WAIT where the client may block, queued at
//! the tail unless waiting would close a deadlock; otherwise not granted (the command answers
//! null).

use dlock_core::error::LockError;
use dlock_core::terms::Terms;

use crate::ffi::string::ArgStr;
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

use super::store::Requester;
use super::{blocked, deadlock, work};

/// How a request for a hold ended.
pub enum Acquired {
    /// Granted: the reply (hold count, and the token with FENCE).
    Now(Reply),
    /// The client waits in the key's queue (blocked; the grant or the time-out answers it).
    Queued,
    /// Not granted and not waiting (no WAIT, or a context that may not block).
    NotNow,
}

/// Asks for the hold `req` on `key` in the selected database, waiting up to `wait_ms`
/// (`Some(0)`: no limit) when given. `name`, `owner_arg`: the key and owner as the command's own argument
/// strings, shared instead of copied.
pub fn acquire(
    ctx: Ctx,
    key: &[u8],
    name: Option<ArgStr>,
    owner_arg: Option<ArgStr>,
    req: &Terms<&[u8]>,
    wait_ms: Option<i64>,
) -> Result<Acquired, LockError> {
    let db = ctx.selected_db();
    let owner = Requester {
        owner: req.owner,
        arg: owner_arg,
    };
    work::unit_of_work(ctx, db, key, name, Some(owner), |reg, lk, now| {
        let queue_ahead = reg.waiters_on(db, key) > 0;
        if let Some(reply) = work::try_grant(ctx, lk, req, now, queue_ahead)? {
            return Ok(Acquired::Now(reply));
        }
        let Some(wait_ms) = wait_ms.filter(|_| ctx.may_block()) else {
            return Ok(Acquired::NotNow);
        };
        if let Some(cycle) = deadlock::find(ctx, reg, db, lk, req, now) {
            Stats::add(&STATS.deadlocks, 1);
            return Err(LockError::Deadlock(cycle));
        }
        blocked::enqueue(ctx, reg, db, key, req, wait_ms)?;
        Ok(Acquired::Queued)
    })
}
