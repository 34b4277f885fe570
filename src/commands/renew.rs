//! DLOCK.RENEW: resets the owner's lease.

use dlock_core::args;
use dlock_core::error::LockError;
use dlock_core::rules;

use super::docs::{BIND, KEY, LEASE, OWNER};
use crate::engine::bind;
use crate::engine::store::Requester;
use crate::engine::work;
use crate::ffi::command::{Args, Command};
use crate::ffi::command_info::{KeyUse, Spec};
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

/// `DLOCK.RENEW key owner lease-ms [BIND grace-ms]`
pub struct Renew;

impl Command for Renew {
    const SPEC: Spec = Spec {
        name: c"dlock.renew",
        flags: c"write fast",
        arity: -4,
        key_at: 1,
        key_use: KeyUse::Renew,
        acl: c"write fast",
        summary: c"Resets the lease of an owner's hold (what a watchdog sends)",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.1.0",
        tips: None,
        args: &[KEY, OWNER, LEASE, BIND],
    };

    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply::<Self>(args::renew(argv).and_then(|a| renew(ctx, a, strs)))
    }
}

fn renew(ctx: Ctx, a: args::RenewArgs, strs: Args) -> Result<Reply, LockError> {
    let db = ctx.selected_db();
    let owner = Requester {
        owner: a.owner,
        arg: strs.get(1),
    };
    let result = work::unit_of_work(ctx, db, a.key, strs.get(0), Some(owner), |_, lk, now| {
        rules::renew(&mut lk.value, a.owner, a.lease_ms, now)
    });
    if result == Ok(true) {
        Stats::add(&STATS.renewals, 1);
        // BIND binds to a user's connection: nothing from a script, a master or the AOF.
        if let Some((grace_ms, client)) = a.bind.zip(ctx.connection()) {
            bind::bind(client, db, a.key, a.owner, grace_ms);
        }
    }
    Ok(Reply::Int(result? as i64))
}
