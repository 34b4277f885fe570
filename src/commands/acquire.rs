//! DLOCK.ACQUIRE, DLOCK.RWLOCK and DLOCK.SEMAPHORE: grant now, or queue the client (`WAIT`),
//! or answer null. The three differ only in their arguments: the kind of hold (`Want`) goes
//! through the same rules, queue and grant path.

use std::ffi::CStr;

use dlock_core::args::{self, AcquireArgs};
use dlock_core::error::LockError;

use super::docs::{BIND, FENCE, KEY, LEASE, LOCKDELAY, OWNER, READ, WAIT, WRITE};
use crate::engine;
use crate::engine::acquire::Acquired;
use crate::ffi::command::{Args, Command};
use crate::ffi::command_info::{arg, option, Arg, KeyUse, Kind, Spec};
use crate::ffi::{Ctx, Reply};

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
    let (name, owner) = (strs.get(0), strs.get(1));
    Ok(
        match engine::acquire::acquire(ctx, a.key, name, owner, &a.terms, a.wait_ms)? {
            Acquired::Now(reply) => reply,
            // Queued: `blocked::enqueue` blocked the client; its answer comes from there.
            Acquired::Queued => Reply::None,
            Acquired::NotNow => Reply::Null,
        },
    )
}
