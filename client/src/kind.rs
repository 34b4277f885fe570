//! [`LockKind`]: which lock a handle takes, with its words on the wire and its hash field.

/// Which lock a [`Lock`](crate::Lock) handle takes.
///
/// ```
/// assert_ne!(dlock_client::LockKind::Read, dlock_client::LockKind::Write);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// An exclusive lock (`DLOCK.ACQUIRE`, Redisson's `RLock`).
    Exclusive,
    /// The read side of a read-write lock (`DLOCK.RWLOCK ... READ`).
    Read,
    /// The write side of a read-write lock (`DLOCK.RWLOCK ... WRITE`).
    Write,
    /// Permits of a counting semaphore (`DLOCK.SEMAPHORE`, see
    /// [`Semaphore`](crate::Semaphore)).
    Semaphore,
}

impl LockKind {
    /// The mode word of the module's commands (`READ`/`WRITE`), none for exclusive locks.
    pub(crate) fn word(self) -> Option<&'static str> {
        match self {
            LockKind::Exclusive | LockKind::Semaphore => None,
            LockKind::Read => Some("READ"),
            LockKind::Write => Some("WRITE"),
        }
    }
    /// The mode argument of the read-write Lua scripts.
    pub(crate) fn script_word(self) -> &'static str {
        match self {
            LockKind::Exclusive | LockKind::Semaphore => "",
            LockKind::Read => "read",
            LockKind::Write => "write",
        }
    }
    /// The hash field holding `owner`'s hold count (or permits) for this kind (the layout
    /// is dlock-core's, shared with the module).
    pub(crate) fn field(self, owner: &str) -> Vec<u8> {
        use dlock_core::model::{PERMITS_PREFIX, READ_PREFIX, WRITE_PREFIX};
        let prefix: &[u8] = match self {
            LockKind::Exclusive => b"",
            LockKind::Read => READ_PREFIX,
            LockKind::Write => WRITE_PREFIX,
            LockKind::Semaphore => PERMITS_PREFIX,
        };
        [prefix, owner.as_bytes()].concat()
    }
    /// Rank in a multi-lock's canonical order.
    pub(crate) fn rank(self) -> u8 {
        match self {
            LockKind::Exclusive => 0,
            LockKind::Read => 1,
            LockKind::Write => 2,
            LockKind::Semaphore => 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_words() {
        assert_eq!(LockKind::Exclusive.field("o"), b"o");
        assert!(LockKind::Read.field("o").ends_with(b"o"));
        assert_ne!(LockKind::Read.field("o"), LockKind::Write.field("o"));
        assert_eq!(LockKind::Exclusive.word(), None);
        assert_eq!(LockKind::Write.word(), Some("WRITE"));
        let mut ranks: Vec<u8> = [
            LockKind::Exclusive,
            LockKind::Read,
            LockKind::Write,
            LockKind::Semaphore,
        ]
        .iter()
        .map(|k| k.rank())
        .collect();
        ranks.dedup();
        assert_eq!(ranks.len(), 4);
    }
}
