//! Every error a DLOCK command answers with, and its text. Every one is a reply; none changes
//! anything. The texts are part of the protocol (docs/COMMANDS.md): clients and tests match on them.

use crate::limits::{MAX_CAPACITY, MAX_LOCK_DELAY_MS, MAX_MS, MAX_OWNER_LEN};

/// An error reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockError {
    /// Redis's own arity text, naming the command.
    WrongArity,
    /// `ERR syntax error`
    Syntax,
    /// The key holds a value that is not a lock of the kind the command works on.
    WrongType,
    /// The owner argument is empty or longer than [`MAX_OWNER_LEN`] bytes.
    OwnerLength,
    /// The owner is `mode`, a field name of the read-write layout.
    OwnerReserved,
    /// `lease-ms` is not a positive integer.
    LeaseNotPositive,
    /// `lease-ms` is above [`MAX_MS`].
    LeaseTooLong,
    /// `WAIT timeout-ms` is not a non-negative integer.
    TimeoutNegative,
    /// `WAIT timeout-ms` is above [`MAX_MS`].
    TimeoutTooLong,
    /// `BIND grace-ms` is not a non-negative integer.
    GraceNegative,
    /// `BIND grace-ms` is longer than the lease (named).
    GraceOverLease(i64),
    /// `LOCKDELAY ms` is not a non-negative integer.
    LockDelayNegative,
    /// `LOCKDELAY ms` is above [`MAX_LOCK_DELAY_MS`].
    LockDelayTooLong,
    /// `LOCKDELAY` on a READ request (only an exclusive hold has a lock-delay).
    LockDelayOnRead,
    /// A WAIT request would close a cycle of owners waiting for each other: the cycle, as
    /// `a waits for k2 held by b, b waits for k1 held by a`.
    Deadlock(String),
    /// DLOCK.RWLOCK's mode is neither READ nor WRITE.
    ModeWord,
    /// A reader asked for WRITE on the same lock.
    Upgrade,
    /// DLOCK.RELEASE without a mode by an owner holding READ and WRITE.
    NameTheMode,
    /// The queue of this key is full (the `max-waiters-per-key` module argument).
    TooManyWaitersOnKey(usize),
    /// All queues together are full (the `max-waiters` module argument).
    TooManyWaiters(usize),
    /// `capacity` or `COUNT` (named) is not an integer from 1 to [`MAX_CAPACITY`].
    PermitsWord(&'static str),
    /// DLOCK.SEMAPHORE asks for more permits than the semaphore has.
    CountOverCapacity { count: i64, capacity: i64 },
    /// DLOCK.SEMAPHORE names another capacity than the existing semaphore's.
    CapacityMismatch { stored: i64, asked: i64 },
    /// DLOCK.RELEASE ... COUNT gives back more permits than the owner holds.
    CountOverHeld { count: i64, held: i64 },
    /// The fencing counter is at `i64::MAX`.
    FenceOverflow,
    /// The fencing counter key (named here) holds something that is not an integer.
    FenceNotInteger(Vec<u8>),
    /// A fencing counter is needed, none is on this node, and the key's slot is being
    /// migrated: the counter may be on the other node (a new one would issue old tokens).
    FenceMigrating,
}

/// The answer to a waiter of a master that turned replica (outside cluster mode, where the
/// waiter gets the redirect instead): Redis's own text for blocked clients then.
pub const DEMOTED: &str =
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

/// The text of [`LockError::WrongType`] (Redis's own).
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl LockError {
    /// The text of the error reply for `command` (lower-case command name, used by the arity
    /// text only).
    pub fn message(&self, command: &str) -> String {
        match self {
            LockError::WrongArity => {
                format!("ERR wrong number of arguments for '{command}' command")
            }
            LockError::Syntax => "ERR syntax error".into(),
            LockError::WrongType => WRONGTYPE.into(),
            LockError::OwnerLength => format!("ERR owner must be 1 to {MAX_OWNER_LEN} bytes"),
            LockError::OwnerReserved => "ERR owner name 'mode' is reserved".into(),
            LockError::LeaseNotPositive => "ERR lease-ms must be a positive integer".into(),
            LockError::LeaseTooLong => format!("ERR lease-ms must be at most {MAX_MS}"),
            LockError::TimeoutNegative => "ERR timeout-ms must be a non-negative integer".into(),
            LockError::TimeoutTooLong => format!("ERR timeout-ms must be at most {MAX_MS}"),
            LockError::GraceNegative => "ERR grace-ms must be a non-negative integer".into(),
            LockError::GraceOverLease(lease) => {
                format!("ERR grace-ms must be at most the lease-ms ({lease})")
            }
            LockError::LockDelayNegative => {
                "ERR LOCKDELAY ms must be a non-negative integer".into()
            }
            LockError::LockDelayTooLong => {
                format!("ERR LOCKDELAY ms must be at most {MAX_LOCK_DELAY_MS}")
            }
            LockError::LockDelayOnRead => "ERR LOCKDELAY is an option of WRITE, not READ".into(),
            LockError::Deadlock(cycle) => format!("DEADLOCK {cycle}"),
            LockError::ModeWord => "ERR mode must be READ or WRITE".into(),
            LockError::Upgrade => {
                "ERR cannot upgrade a READ hold to WRITE (it would deadlock)".into()
            }
            LockError::NameTheMode => {
                "ERR owner holds READ and WRITE: name the mode to release".into()
            }
            LockError::TooManyWaitersOnKey(max) => {
                format!("ERR too many waiters on this key (max-waiters-per-key {max})")
            }
            LockError::TooManyWaiters(max) => {
                format!("ERR too many waiters (max-waiters {max})")
            }
            LockError::PermitsWord(name) => {
                format!("ERR {name} must be a positive integer up to {MAX_CAPACITY}")
            }
            LockError::CountOverCapacity { count, capacity } => {
                format!("ERR COUNT {count} is more than the capacity {capacity}")
            }
            LockError::CapacityMismatch { stored, asked } => {
                format!("ERR semaphore capacity is {stored}, not {asked}")
            }
            LockError::CountOverHeld { count, held } => {
                format!("ERR COUNT {count} is more than the {held} permits the owner holds")
            }
            LockError::FenceOverflow => "ERR fencing counter overflow".into(),
            LockError::FenceMigrating => {
                "TRYAGAIN the fencing counter may be on the other node while this slot migrates"
                    .into()
            }
            LockError::FenceNotInteger(name) => format!(
                "ERR fencing counter '{}' is not an integer",
                String::from_utf8_lossy(name)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_redis_errors() {
        assert_eq!(
            LockError::WrongArity.message("dlock.renew"),
            "ERR wrong number of arguments for 'dlock.renew' command"
        );
        assert_eq!(
            LockError::FenceNotInteger(b"dlock:fence:{k}".to_vec()).message("x"),
            "ERR fencing counter 'dlock:fence:{k}' is not an integer"
        );
        assert_eq!(
            LockError::TooManyWaiters(3).message("x"),
            "ERR too many waiters (max-waiters 3)"
        );
    }
}
