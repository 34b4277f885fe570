//! A request for a hold (DLOCK.ACQUIRE, RWLOCK, SEMAPHORE) in one unit of work: the lock,
//! its queue and the request's terms handed to `dlock_core::serve::admit`, which decides
//! once (granted now; else, with WAIT where the client may block, queued at the tail unless
//! waiting would close a deadlock; else not granted: the command answers null); then what the
//! decision means here: the grant's effects (`work::on_grant`) or the client blocked
//! (`blocked::enqueue`).

use dlock_core::error::LockError;
use dlock_core::serve::{self, Admitted, Lock};
use dlock_core::terms::Terms;

use crate::ffi::string::ArgStr;
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

use super::store::{FenceCounter, Requester};
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
/// (`Some(0)`: no limit) when given. `name`, `owner_arg`: the key and owner as the
/// command's own argument strings, shared instead of copied.
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
        let lock = Lock {
            key,
            value: &mut lk.value,
            delay: lk.delay.stored(),
            queue: (reg.waiters_on(db, key) > 0).then(|| {
                reg.queued_on(db, key)
                    .map(|w| (w.terms.owner(), w.terms.want))
            }),
        };
        // Asked only when the request must wait: a context-flags call.
        let may_wait = || wait_ms.is_some() && ctx.may_block();
        // Read only when it would queue, and then lazily (`deadlock`).
        let mut waits = deadlock::Snapshot::new(ctx, reg, db, key, now);
        let draw = |advance| FenceCounter::of(key).token(ctx, advance);
        let admitted = serve::admit(lock, req, now, may_wait, &mut waits, draw);
        match admitted {
            Ok(Admitted::Now(granted)) => {
                // The connection is asked for only where a BIND needs it (a context-flags call).
                let connection = req.bind.and_then(|_| ctx.connection());
                Ok(Acquired::Now(work::on_grant(
                    ctx, lk, req, connection, granted,
                )))
            }
            Ok(Admitted::Queue) => {
                let wait_ms = wait_ms.expect("admitted to wait with WAIT");
                blocked::enqueue(ctx, reg, db, key, req, wait_ms)?;
                Ok(Acquired::Queued)
            }
            Ok(Admitted::NotNow) => Ok(Acquired::NotNow),
            Err(e) => {
                if matches!(e, LockError::Deadlock(_)) {
                    Stats::add(&STATS.deadlocks, 1);
                }
                Err(e)
            }
        }
    })
}
