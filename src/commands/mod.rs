//! The command handlers, one file each: parse (`dlock_core::args`), run the unit of work
//! (`engine::work::with_lock`) with the grant rules (`dlock_core::rules`), reply.

mod acquire;
mod docs;
mod info;
mod release;
mod renew;
mod waiters;

pub use acquire::{Acquire, RwLock, Semaphore};
pub use docs::DOCS;
pub use info::Info;
pub use release::Release;
pub use renew::Renew;
pub use waiters::Waiters;

use dlock_core::error::LockError;

use crate::ffi::Reply;
use crate::stats::{Stats, STATS};

/// The reply for a handler's result; errors are counted in `INFO dlock`. `command`: the
/// lower-case command name.
fn reply(command: &str, result: Result<Reply, LockError>) -> Reply {
    result.unwrap_or_else(|e| {
        Stats::add(&STATS.errors, 1);
        match e {
            LockError::WrongArity => Reply::WrongArity,
            other => Reply::Error(other.message(command)),
        }
    })
}
