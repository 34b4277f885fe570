//! DLOCK.RENEW: resets the owner's lease.

use dlock_core::args;
use dlock_core::error::LockError;
use dlock_core::rules;

use crate::engine::work;
use crate::ffi::command::Command;
use crate::ffi::string::ArgStr;
use crate::ffi::{Ctx, Reply};
use crate::stats::{Stats, STATS};

/// `DLOCK.RENEW key owner lease-ms`
pub struct Renew;

impl Command for Renew {
    fn run(ctx: Ctx, argv: &[&[u8]], key: Option<ArgStr>) -> Reply {
        super::reply(
            "dlock.renew",
            args::renew(argv).and_then(|a| renew(ctx, a, key)),
        )
    }
}

fn renew(ctx: Ctx, a: args::RenewArgs, name: Option<ArgStr>) -> Result<Reply, LockError> {
    let db = ctx.selected_db();
    let result = work::with_lock(ctx, db, a.key, name, Some(a.owner), |_, lk, now| {
        rules::renew(&mut lk.value, a.owner, a.lease_ms, now)
    });
    if result == Ok(true) {
        Stats::add(&STATS.renewals, 1);
    }
    Ok(Reply::Int(result? as i64))
}
