//! DLOCK.RELEASE: one hold (or `COUNT` permits) less; what comes free is handed to the queue
//! inside the command.

use dlock_core::args;
use dlock_core::error::LockError;
use dlock_core::model::LockValue;
use dlock_core::rules::{self, Released};

use crate::engine::bind;
use crate::engine::store::{self, Requester};
use crate::engine::work;
use crate::ffi::command::{Args, Command};
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

/// `DLOCK.RELEASE key owner [READ|WRITE|COUNT n]`
pub struct Release;

impl Command for Release {
    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply(
            "dlock.release",
            args::release(argv).and_then(|a| release(ctx, a, strs)),
        )
    }
}

fn release(ctx: Ctx, a: args::ReleaseArgs, strs: Args) -> Result<Reply, LockError> {
    let db = ctx.selected_db();
    let owner = Requester {
        owner: a.owner,
        arg: strs.get(1),
    };
    let (result, freed_exclusive) =
        work::with_lock(ctx, db, a.key, strs.get(0), Some(owner), |reg, lk, now| {
            let was_exclusive = matches!(lk.value, LockValue::Exclusive(_));
            let result = rules::release(&mut lk.value, a.owner, a.mode, a.count);
            if let Ok(Released::Last | Released::Decremented) = result {
                // Hand-off inside this command: no window for another client or script.
                // (Permits given back by a partial release can let the head waiter in too.)
                work::serve(ctx, reg, db, lk, now);
            }
            let freed =
                result == Ok(Released::Last) && was_exclusive && lk.value == LockValue::Free;
            if result == Ok(Released::Last) && !rules::holds(&lk.value, a.owner) {
                bind::unbind(db, a.key, a.owner);
            }
            (result, freed)
        });
    if let Ok(Released::Last | Released::Decremented) = result {
        Stats::add(&STATS.releases, 1);
    }
    if freed_exclusive {
        // Nobody in the queue took it: wake Redisson-style waiters (same MULTI as the DEL).
        let cfg = crate::config::get();
        if cfg.publish {
            store::publish_unlock(ctx, &cfg.channel_prefix, a.key);
        }
    }
    Ok(match result? {
        Released::Last => Reply::Int(1),
        Released::Decremented => Reply::Int(0),
        Released::NotHeld => Reply::Null,
    })
}
