//! The command handlers, one file each: parse (`dlock_core::args`), run the unit of work
//! (`engine::work::unit_of_work`) with the grant rules (`dlock_core::rules`), reply. Each
//! declares itself beside its handler (`Command::SPEC`); `ALL` lists them for registration.
//! The layers they sit on: the list in `src/lib.rs`.

mod acquire;
mod docs;
mod info;
mod redisson;
mod release;
mod renew;
mod waiters;

use dlock_core::error::LockError;

use crate::ffi::command::{declare, Command, Declared};
use crate::ffi::Reply;
use crate::stats::{Stats, STATS};

/// Every DLOCK command, registered in this order.
pub const ALL: &[Declared] = &[
    declare::<acquire::Acquire>(),
    declare::<acquire::RwLock>(),
    declare::<acquire::Semaphore>(),
    declare::<release::Release>(),
    declare::<renew::Renew>(),
    declare::<info::Info>(),
    declare::<waiters::Waiters>(),
    declare::<redisson::Redisson>(),
];

/// The reply for `C`'s result; errors are counted in `INFO dlock`.
fn reply<C: Command>(result: Result<Reply, LockError>) -> Reply {
    result.unwrap_or_else(|e| {
        Stats::add(&STATS.errors, 1);
        match e {
            LockError::WrongArity => Reply::WrongArity,
            other => Reply::Error(other.message(C::SPEC.name.to_str().unwrap_or_default())),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::command_info::{KeyUse, Kind};

    /// Redis refuses a call with too few words before the module sees it: the arity must be
    /// exactly what the required arguments need, and a minimum when options may follow.
    #[test]
    fn arity_matches_the_arguments() {
        for c in ALL.iter().filter(|c| c.spec.key_use != KeyUse::Script) {
            let s = &c.spec;
            let required = s.args.iter().filter(|a| !a.optional).count() as i32 + 1;
            let has_options = s.args.iter().any(|a| a.optional);
            let expected = if has_options { -required } else { required };
            assert_eq!(s.arity, expected, "{:?}", s.name);
            assert!(
                matches!(s.args.first().map(|a| &a.kind), Some(Kind::Key)),
                "{:?}: the key comes first",
                s.name
            );
            assert_eq!(s.key_at, 1, "{:?}: the key is the first argument", s.name);
        }
    }

    #[test]
    fn writers_write_and_readers_read() {
        for c in ALL.iter().filter(|c| c.spec.key_use != KeyUse::Script) {
            let s = &c.spec;
            let acl = s.acl.to_str().unwrap();
            let flags = s.flags.to_str().unwrap();
            let reads = s.key_use == KeyUse::Read;
            assert_eq!(acl.starts_with("read "), reads, "{:?}", s.name);
            assert_eq!(acl.starts_with("write "), !reads, "{:?}", s.name);
            assert_eq!(flags.starts_with("readonly"), reads, "{:?}", s.name);
            assert_eq!(flags.starts_with("write"), !reads, "{:?}", s.name);
            assert!(
                acl.contains("fast") != acl.contains("slow"),
                "{:?}: fast or slow",
                s.name
            );
        }
    }

    #[test]
    fn names_are_unique_and_lower_case() {
        let mut names: Vec<&str> = ALL.iter().map(|c| c.spec.name.to_str().unwrap()).collect();
        assert!(names
            .iter()
            .all(|n| *n == n.to_lowercase() && n.starts_with("dlock.")));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }
}
