//! DLOCK.RELEASE: one hold (or `COUNT` permits) less; what comes free is handed to the queue
//! inside the command.

use dlock_core::args;
use dlock_core::error::LockError;
use dlock_core::model::LockValue;
use dlock_core::rules::{self, Released};

use super::docs::{KEY, OWNER, READ, WRITE};
use crate::engine::bind;
use crate::engine::store::Requester;
use crate::engine::{unlock, work};
use crate::ffi::command::{Args, Command};
use crate::ffi::command_info::{tagged, Arg, KeyUse, Kind, Spec};
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

/// `DLOCK.RELEASE key owner [READ|WRITE|COUNT n]`
pub struct Release;

impl Command for Release {
    const SPEC: Spec = Spec {
        name: c"dlock.release",
        flags: c"write fast",
        arity: -3,
        key_at: 1,
        key_use: KeyUse::Release,
        acl: c"write fast",
        summary: c"Gives back one hold (or COUNT permits); the last one deletes the key and hands the lock to the next waiter",
        complexity: c"O(N) where N is the number of holders and of waiters granted",
        since: c"0.1.0",
        tips: None,
        args: &[
            KEY,
            OWNER,
            Arg {
                name: c"which",
                kind: Kind::OneOf(&[READ, WRITE, tagged(c"count", c"COUNT", Kind::Integer)]),
                token: None,
                optional: true,
            },
        ],
    };

    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply::<Self>(args::release(argv).and_then(|a| release(ctx, a, strs)))
    }
}

fn release(ctx: Ctx, a: args::ReleaseArgs, strs: Args) -> Result<Reply, LockError> {
    let db = ctx.selected_db();
    let owner = Requester {
        owner: a.owner,
        arg: strs.get(1),
    };
    let result = work::unit_of_work(ctx, db, a.key, strs.get(0), Some(owner), |reg, lk, now| {
        let was_exclusive = matches!(lk.value, LockValue::Exclusive(_));
        let result = rules::release(&mut lk.value, a.owner, a.mode, a.count);
        if let Ok(Released::Last | Released::Decremented) = result {
            // Hand-off inside this command: no window for another client or script.
            // (Permits given back by a partial release can let the head waiter in too.)
            work::serve(ctx, reg, db, lk, now);
        }
        let freed = result == Ok(Released::Last) && was_exclusive && lk.value == LockValue::Free;
        // Nobody in the queue took it: wake Redisson-style waiters (with the DEL).
        if freed {
            let cfg = crate::config::get();
            if unlock::publish_now(ctx, cfg.publish, a.key, now) {
                lk.publish_unlock(&cfg.channel_prefix);
            }
        }
        if result == Ok(Released::Last) && !rules::holds(&lk.value, a.owner) {
            bind::unbind(db, a.key, a.owner);
        }
        result
    });
    if let Ok(Released::Last | Released::Decremented) = result {
        Stats::add(&STATS.releases, 1);
    }
    Ok(match result? {
        Released::Last => Reply::Int(1),
        Released::Decremented => Reply::Int(0),
        Released::NotHeld => Reply::Null,
    })
}
