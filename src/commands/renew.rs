//! DLOCK.RENEW: resets the owner's lease.

use dlock_core::args;
use dlock_core::error::LockError;
use dlock_core::rules;

use crate::engine::bind;
use crate::engine::store::Requester;
use crate::engine::work;
use crate::ffi::command::{Args, Command};
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

/// `DLOCK.RENEW key owner lease-ms [BIND grace-ms]`
pub struct Renew;

impl Command for Renew {
    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply(
            "dlock.renew",
            args::renew(argv).and_then(|a| renew(ctx, a, strs)),
        )
    }
}

fn renew(ctx: Ctx, a: args::RenewArgs, strs: Args) -> Result<Reply, LockError> {
    let db = ctx.selected_db();
    let owner = Requester {
        owner: a.owner,
        arg: strs.get(1),
    };
    let result = work::with_lock(ctx, db, a.key, strs.get(0), Some(owner), |_, lk, now| {
        rules::renew(&mut lk.value, a.owner, a.lease_ms, now)
    });
    if result == Ok(true) {
        Stats::add(&STATS.renewals, 1);
        if let Some((client, grace_ms)) = super::acquire::bind_to(ctx, a.bind) {
            bind::bind(client, db, a.key, a.owner, grace_ms);
        }
    }
    Ok(Reply::Int(result? as i64))
}
