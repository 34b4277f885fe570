//! DLOCK.WAITERS: who waits on a key, in FIFO order; read only (a replica answers it, with an
//! empty list: clients wait on the master).

use std::time::Instant;

use dlock_core::args;
use dlock_core::error::LockError;
use dlock_core::model::LockValue;

use super::docs::KEY;
use crate::engine::registry;
use crate::engine::store::{LockKey, Open};
use crate::ffi::command::{Args, Command};
use crate::ffi::command_info::{option, KeyUse, Kind, Spec};
use crate::ffi::reply::Replier;
use crate::ffi::string::ArgStr;
use crate::ffi::{Ctx, Reply};

/// `DLOCK.WAITERS key [COUNT n]`
pub struct Waiters;

impl Command for Waiters {
    const SPEC: Spec = Spec {
        name: c"dlock.waiters",
        flags: c"readonly fast",
        arity: -2,
        key_at: 1,
        key_use: KeyUse::Read,
        acl: c"read slow",
        summary: c"Lists the clients waiting on a lock, in FIFO order",
        complexity: c"O(N) where N is the number of waiters listed",
        since: c"0.1.0",
        tips: Some(c"nondeterministic_output"),
        args: &[KEY, option(c"count", c"COUNT", Kind::Integer)],
    };

    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        super::reply::<Self>(
            args::waiters(argv).and_then(|(k, limit)| waiters(ctx, k, limit, strs.get(0))),
        )
    }
}

/// The key is opened only to tell a non-lock value (WRONGTYPE) from a lock or a missing key;
/// the rows come from the queue registry.
fn waiters(
    ctx: Ctx,
    key: &[u8],
    limit: Option<usize>,
    name: Option<ArgStr>,
) -> Result<Reply, LockError> {
    let db = ctx.selected_db();
    if LockKey::open(ctx, key, Open::Read { name }).value == LockValue::NotALock {
        return Err(LockError::WrongType);
    }
    let rows = registry().view(db, key, limit.unwrap_or(usize::MAX), Instant::now());
    let r = Replier(ctx);
    r.array(rows.len());
    for w in &rows {
        r.array(4);
        r.bytes(&w.owner);
        r.bytes(w.request.as_bytes());
        r.int(w.waited_ms);
        r.int(w.timeout_left_ms);
    }
    Ok(Reply::None)
}
