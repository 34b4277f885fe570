//! Redisson's `RReadWriteLock` scripts served natively: the arguments each takes and what each
//! does for a given state of its keys (pure: the module reads the keys, asks here, writes what
//! it is told). The digests are in `redisson::SCRIPTS` (role [`Role::RwLock`]).
//!
//! Layout (Redisson's): the lock is a hash `mode -> read|write` plus `<owner> -> count` (a
//! reader) and `<owner>:write -> count` (the writer); every read hold `n` of an owner has a
//! string key `{lock}:<owner>:rwlock_timeout:<n>` with the hold's lease. As for `RLock`,
//! anything the scripts would treat in a way Redisson never causes (a key of another type, a
//! count that is not an integer, a hash with no `mode`) is [`Fallback`]: the real Lua runs.
//!
//! One decision is dlock's own: a read tryLock on a key where `DLOCK.RWLOCK` holds a lock
//! (dlock's layout: `mode` plus `read:` / `write:` / `lease:` fields) is answered as for a lock
//! held by others (the key's PTTL) and changes nothing. The Lua would take dlock's `mode=read`
//! for its own and join, leaving a hash in neither layout on which Redisson's read unlock and
//! renewal loop over dlock's lease deadline as a hold count (`BUSY`).
//!
//! [`Role::RwLock`]: crate::redisson::Role::RwLock

use crate::model::{LockValue, Stored};
use crate::redisson_terms::{ms, publish_command, strict_integer, Fallback, LatchState, LockState};
use crate::redisson_terms::{Publish, Publisher};

/// What a known read-write lock script does (keys and arguments: see [`parse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwRole {
    ReadTryLock,
    WriteTryLock,
    ReadUnlock(Publisher),
    WriteUnlock(Publisher),
    ReadForceUnlock(Publisher),
    WriteForceUnlock(Publisher),
    /// The read lock's watchdog renewal, 3.20-3.43.
    ReadRenew,
    /// The watchdog's batched renewal of read locks, 3.44+.
    RenewBatch(BatchForm),
}

/// The two texts of the batched read-lock renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchForm {
    /// 3.44-3.4x: `ARGV[j + 1]` the owner of pair `j`; every field of a held lock renewed,
    /// its timeout keys' prefix read as `KEYS[n + 1]` for hold `n` (an inner loop variable
    /// shadows the pair's index).
    Shadowed,
    /// 4.x: per pair, a count of owner names then the names.
    Named,
}

/// A call in the shape Redisson sends it. Keys and arguments stay where they are in argv;
/// the engine reads them by position: `KEYS[i]` at `2 + i - 1`, `ARGV[i]` after the keys.
#[derive(Debug, PartialEq, Eq)]
pub enum RwCall {
    /// `KEYS`: lock, timeout-key prefix; `ARGV`: lease, owner, the owner's write field.
    ReadTryLock { lease_ms: i64 },
    /// `KEYS`: lock; `ARGV`: lease, owner.
    WriteTryLock { lease_ms: i64 },
    /// `KEYS`: lock, channel, the owner's timeout-key prefix, the lock's prefix (, latch);
    /// `ARGV`: message, owner (, publish command (, latch ms)).
    ReadUnlock {
        publish: Publish,
        latch_ms: Option<i64>,
    },
    /// `KEYS`: lock, channel (, latch); `ARGV`: message, lease, owner (, publish (, latch ms)).
    WriteUnlock {
        lease_ms: i64,
        publish: Publish,
        latch_ms: Option<i64>,
    },
    /// `KEYS`: lock, channel; `ARGV`: message (, publish). Frees a lock in `mode`.
    ForceUnlock {
        mode: &'static [u8],
        publish: Publish,
    },
    /// `KEYS`: lock, prefix; `ARGV`: lease, owner.
    ReadRenew { lease_ms: i64 },
    /// `KEYS`: lock, prefix pairs. `groups[p]`: the `ARGV` indexes (0-based) of pair `p`'s
    /// owner names (the 3.4x form: one name each).
    RenewBatch {
        form: BatchForm,
        lease_ms: i64,
        groups: Vec<std::ops::Range<usize>>,
    },
}

/// `keys` and `args` (after numkeys) as a call of `role`, or `None` when their shape is not
/// what Redisson sends (then the Lua runs).
pub fn parse(role: RwRole, keys: &[&[u8]], args: &[&[u8]]) -> Option<RwCall> {
    let latch_form = |p| matches!(p, Publisher::ArgumentLatch);
    match (role, keys.len(), args) {
        (RwRole::ReadTryLock, 2, [lease, _, _]) => Some(RwCall::ReadTryLock {
            lease_ms: ms(lease)?,
        }),
        (RwRole::WriteTryLock, 1, [lease, _]) => Some(RwCall::WriteTryLock {
            lease_ms: ms(lease)?,
        }),
        (RwRole::ReadUnlock(p), n, [_, _, rest @ ..]) if n == 4 + usize::from(latch_form(p)) => {
            let (publish, latch_ms) = publisher(p, rest)?;
            Some(RwCall::ReadUnlock { publish, latch_ms })
        }
        (RwRole::WriteUnlock(p), n, [_, lease, _, rest @ ..])
            if n == 2 + usize::from(latch_form(p)) =>
        {
            let (publish, latch_ms) = publisher(p, rest)?;
            Some(RwCall::WriteUnlock {
                lease_ms: ms(lease)?,
                publish,
                latch_ms,
            })
        }
        (RwRole::ReadForceUnlock(p) | RwRole::WriteForceUnlock(p), 2, [_, rest @ ..]) => {
            let (publish, _) = publisher(p, rest)?;
            let mode = match role {
                RwRole::ReadForceUnlock(_) => READ,
                _ => WRITE,
            };
            Some(RwCall::ForceUnlock { mode, publish })
        }
        (RwRole::ReadRenew, 2, [lease, _]) => Some(RwCall::ReadRenew {
            lease_ms: ms(lease)?,
        }),
        (RwRole::RenewBatch(form), n, [lease, rest @ ..]) if n > 0 && n % 2 == 0 => {
            let groups = match form {
                BatchForm::Shadowed => {
                    (rest.len() == n / 2).then(|| (1..=n / 2).map(|i| i..i + 1).collect())?
                }
                BatchForm::Named => named_groups(n / 2, rest)?,
            };
            Some(RwCall::RenewBatch {
                form,
                lease_ms: ms(lease)?,
                groups,
            })
        }
        _ => None,
    }
}

/// The publish command and latch lifetime after an unlock's fixed arguments, by form.
fn publisher(p: Publisher, rest: &[&[u8]]) -> Option<(Publish, Option<i64>)> {
    match (p, rest) {
        (Publisher::Literal, []) => Some((Publish::Publish, None)),
        (Publisher::Argument, [c]) => Some((publish_command(c)?, None)),
        (Publisher::ArgumentLatch, [c, latch]) => Some((publish_command(c)?, Some(ms(latch)?))),
        _ => None,
    }
}

/// 4.x's `count, names...` per pair, covering the arguments exactly.
fn named_groups(pairs: usize, rest: &[&[u8]]) -> Option<Vec<std::ops::Range<usize>>> {
    let mut groups = Vec::with_capacity(pairs);
    let mut at = 0;
    for _ in 0..pairs {
        let n = usize::try_from(strict_integer(rest.get(at)?)?).ok()?;
        let names = at + 2..at + 2 + n;
        if names.end > rest.len() + 1 {
            return None;
        }
        groups.push(names);
        at += 1 + n;
    }
    (at == rest.len()).then_some(groups)
}

/// The `mode` values.
pub const READ: &[u8] = b"read";
pub const WRITE: &[u8] = b"write";

/// The largest number of timeout keys one call walks natively (more: the Lua).
const MAX_HOLDS: i64 = 1000;

/// What a read or write tryLock does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryLock {
    /// No lock: `mode` and the owner's count of 1 are written, with the lease (reply nil).
    First,
    /// The owner's count becomes this (reply nil).
    Count(i64),
    /// Held by others: reply the key's PTTL.
    Busy,
}

/// The lock's `mode` (`LockState` of that field): `None` for no key or a hash without one
/// (an `RLock`'s, say: the scripts write `mode` and the owner's count into it as into none).
fn mode_of(state: LockState<'_>) -> Result<Option<&[u8]>, Fallback> {
    match state {
        LockState::Absent => Ok(None),
        LockState::Hash { field } => Ok(field),
        LockState::NotAHash => Err(Fallback),
    }
}

fn incremented(count: Option<&[u8]>, by: i64) -> Result<i64, Fallback> {
    match count {
        None => Ok(by),
        Some(v) => strict_integer(v)
            .and_then(|n| n.checked_add(by))
            .ok_or(Fallback),
    }
}

/// read tryLock. `mode`: `LockState` of the `mode` field; `own_write`: the owner's write field
/// exists; `count`: the owner's read count; `dlock`: the hash is a `DLOCK.RWLOCK` lock (see
/// [`is_dlock_rwlock`]; looked at only when `mode` is `read`).
pub fn read_try_lock(
    mode: LockState,
    own_write: bool,
    count: Option<&[u8]>,
    dlock: impl FnOnce() -> bool,
) -> Result<TryLock, Fallback> {
    match mode_of(mode)? {
        None => Ok(TryLock::First),
        Some(READ) if dlock() => Ok(TryLock::Busy),
        Some(READ) => incremented(count, 1).map(TryLock::Count),
        Some(WRITE) if own_write => incremented(count, 1).map(TryLock::Count),
        Some(_) => Ok(TryLock::Busy),
    }
}

/// Whether a hash's fields are a lock of `DLOCK.RWLOCK` with a holder.
pub fn is_dlock_rwlock(fields: &[(Vec<u8>, Vec<u8>)]) -> bool {
    let value = LockValue::decode(Stored::Hash {
        fields,
        expire_at: None,
    });
    matches!(value, LockValue::ReadWrite(rw) if !rw.holders.is_empty())
}

/// The lock's new TTL after a read hold is taken: the longer of what it had and the lease.
pub fn read_lock_ttl(pttl: i64, lease_ms: i64) -> i64 {
    pttl.max(lease_ms)
}

/// write tryLock. `count`: the owner's (write) field.
pub fn write_try_lock(mode: LockState, count: Option<&[u8]>) -> Result<TryLock, Fallback> {
    match (mode_of(mode)?, count) {
        (None, _) => Ok(TryLock::First),
        (Some(WRITE), Some(_)) => incremented(count, 1).map(TryLock::Count),
        _ => Ok(TryLock::Busy),
    }
}

/// The lock's new TTL after a reentrant write hold: the one it had plus the lease (`PTTL` -1
/// without one). A sum that would delete the key is the Lua's.
pub fn write_reentry_ttl(pttl: i64, lease_ms: i64) -> Result<i64, Fallback> {
    Some(pttl + lease_ms).filter(|t| *t > 0).ok_or(Fallback)
}

/// The latch of an earlier unlock attempt (3.24+): `Some(n)` answers the call.
pub fn latched(latch: LatchState) -> Result<Option<i64>, Fallback> {
    match latch {
        LatchState::Absent => Ok(None),
        LatchState::String(v) => strict_integer(v).map(Some).ok_or(Fallback),
        LatchState::NotAString => Err(Fallback),
    }
}

/// What the first part of an unlock does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unlock {
    /// No lock (no key, or no `mode`): the message is published, the latch set to 1; reply
    /// nil with a latch, 1 without.
    NoLock,
    /// Not the owner's (or, for a write unlock, not in write mode): reply nil.
    NotHeld,
    /// The owner's count becomes this (at 0 or below, for a reader, its field is deleted;
    /// for a writer see [`write_unlock_last`]).
    Count(i64),
}

fn unlock(
    mode: LockState,
    count: Option<&[u8]>,
    wanted: Option<&[u8]>,
) -> Result<Unlock, Fallback> {
    let mode = match mode {
        LockState::Absent | LockState::Hash { field: None } => return Ok(Unlock::NoLock),
        LockState::Hash { field: Some(m) } => m,
        LockState::NotAHash => return Err(Fallback),
    };
    match count {
        Some(_) if wanted.is_none_or(|w| w == mode) => incremented(count, -1).map(Unlock::Count),
        _ => Ok(Unlock::NotHeld),
    }
}

/// read unlock (after the latch): `count` the owner's read field.
pub fn read_unlock(mode: LockState, count: Option<&[u8]>) -> Result<Unlock, Fallback> {
    unlock(mode, count, None)
}

/// write unlock (after the latch): `count` the owner's write field.
pub fn write_unlock(mode: LockState, count: Option<&[u8]>) -> Result<Unlock, Fallback> {
    unlock(mode, count, Some(WRITE))
}

/// A writer's last hold gone, `fields_left` fields remaining: `true` the key is deleted and
/// the message published; `false` readers remain (the writer's own read holds), `mode`
/// becomes `read`.
pub fn write_unlock_last(fields_left: usize) -> bool {
    fields_left == 1
}

/// The hold counts of a read-write lock hash's fields as the scripts' `tonumber` reads them:
/// `(index, count)` for every field holding an integer (`mode`'s `read` / `write` skipped).
/// A value `tonumber` would read otherwise (`1.5`, `0x10`, ` 2`...), or more than
/// `MAX_HOLDS` holds in all, is the Lua's.
pub fn hold_counts<'f>(
    values: impl Iterator<Item = &'f [u8]>,
) -> Result<Vec<(usize, i64)>, Fallback> {
    let mut out = vec![];
    let mut total = 0;
    for (i, v) in values.enumerate() {
        if v == READ || v == WRITE {
            continue;
        }
        let n = strict_integer(v).ok_or(Fallback)?;
        total += n.max(0);
        if total > MAX_HOLDS {
            return Err(Fallback);
        }
        out.push((i, n));
    }
    Ok(out)
}

/// How a read unlock ends once the owner's hold is gone, `fields_left` fields remaining and
/// `longest` the largest PTTL of the remaining holds' timeout keys (-3 when none were read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadUnlockEnd {
    /// Others hold it: the lock's TTL becomes `Some(ms)` (or stays), latch 0, reply 0.
    Held(Option<i64>),
    /// The last hold: the key is deleted, the message published, latch 1, reply 1.
    Free,
}

pub fn read_unlock_end(fields_left: usize, longest: i64, mode: &[u8]) -> ReadUnlockEnd {
    match fields_left {
        0 | 1 => ReadUnlockEnd::Free,
        _ if longest > 0 => ReadUnlockEnd::Held(Some(longest)),
        _ if mode == WRITE => ReadUnlockEnd::Held(None),
        _ => ReadUnlockEnd::Free,
    }
}

/// forceUnlock: whether the lock is in `wanted` mode (then deleted, published, reply 1).
pub fn force_unlock(mode: LockState, wanted: &[u8]) -> Result<bool, Fallback> {
    match mode {
        LockState::Absent => Ok(false),
        LockState::Hash { field } => Ok(field == Some(wanted)),
        LockState::NotAHash => Err(Fallback),
    }
}

/// 4.x batch: the hold count of one named owner (its timeout keys `1..=n` are renewed). A
/// value the Lua's numeric `for` would coerce otherwise, or too many holds, is the Lua's.
pub fn named_count(v: &[u8]) -> Result<i64, Fallback> {
    strict_integer(v)
        .filter(|n| *n <= MAX_HOLDS)
        .ok_or(Fallback)
}

/// 3.4x batch: the key index (0-based) whose value prefixes hold `n`'s timeout key, as that
/// text computes it (`KEYS[n + 1]`); one it does not have is the Lua's (an error, after
/// writes).
pub fn shadowed_prefix(n: i64, numkeys: usize) -> Result<usize, Fallback> {
    usize::try_from(n)
        .ok()
        .filter(|&n| n < numkeys)
        .ok_or(Fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(role: RwRole, s: &str) -> Option<RwCall> {
        let w: Vec<&[u8]> = s.split(' ').map(str::as_bytes).collect();
        let n: usize = std::str::from_utf8(w[0]).unwrap().parse().unwrap();
        parse(role, &w[1..=n], &w[n + 1..])
    }

    #[test]
    fn calls_in_redissons_shape() {
        use Publisher::*;
        assert_eq!(
            parsed(RwRole::ReadTryLock, "2 k t 10000 o o:write"),
            Some(RwCall::ReadTryLock { lease_ms: 10000 })
        );
        assert_eq!(parsed(RwRole::ReadTryLock, "2 k t 0 o o:write"), None);
        assert_eq!(
            parsed(
                RwRole::ReadUnlock(ArgumentLatch),
                "5 k c t p l 0 o SPUBLISH 500"
            ),
            Some(RwCall::ReadUnlock {
                publish: Publish::SPublish,
                latch_ms: Some(500)
            })
        );
        assert_eq!(parsed(RwRole::ReadUnlock(Argument), "4 k c t p 0 o"), None);
        assert_eq!(
            parsed(RwRole::WriteUnlock(Literal), "2 k c 0 1500 o"),
            Some(RwCall::WriteUnlock {
                lease_ms: 1500,
                publish: Publish::Publish,
                latch_ms: None
            })
        );
        assert_eq!(
            parsed(RwRole::WriteForceUnlock(Argument), "2 k c 1 PUBLISH"),
            Some(RwCall::ForceUnlock {
                mode: WRITE,
                publish: Publish::Publish
            })
        );
        let Some(RwCall::RenewBatch { groups, .. }) = parsed(
            RwRole::RenewBatch(BatchForm::Named),
            "4 a p b q 1500 2 o1 o2 0",
        ) else {
            panic!("not parsed");
        };
        assert_eq!(groups, vec![2..4, 5..5]);
        for bad in [
            "4 a p b q 1500 2 o1 o2",
            "4 a p b q 1500 1 o1 0 x",
            "3 a p b 1500 1 o 0",
        ] {
            assert_eq!(
                parsed(RwRole::RenewBatch(BatchForm::Named), bad),
                None,
                "{bad}"
            );
        }
        let Some(RwCall::RenewBatch { groups, .. }) = parsed(
            RwRole::RenewBatch(BatchForm::Shadowed),
            "4 a p b q 1500 o1 o2",
        ) else {
            panic!("not parsed");
        };
        assert_eq!(groups, vec![1..2, 2..3]);
    }

    /// read tryLock's inputs (mode, own write field, count, dlock layout) and its answer.
    type ReadCase<'a> = (
        LockState<'a>,
        bool,
        Option<&'a [u8]>,
        bool,
        Result<TryLock, Fallback>,
    );

    #[test]
    fn the_scripts_answers() {
        let m = |v: &'static str| LockState::Hash {
            field: Some(v.as_bytes()),
        };
        let rlock = LockState::Hash { field: None };
        let read_cases: [ReadCase; 9] = [
            (LockState::Absent, false, None, false, Ok(TryLock::First)),
            (rlock, false, Some(b"x"), false, Ok(TryLock::First)),
            (m("read"), false, None, false, Ok(TryLock::Count(1))),
            (m("read"), false, Some(b"2"), false, Ok(TryLock::Count(3))),
            (m("read"), false, None, true, Ok(TryLock::Busy)),
            (m("write"), false, None, false, Ok(TryLock::Busy)),
            (m("write"), true, None, false, Ok(TryLock::Count(1))),
            (m("read"), false, Some(b"x"), false, Err(Fallback)),
            (LockState::NotAHash, false, None, false, Err(Fallback)),
        ];
        for (i, (mode, own_write, count, dlock, want)) in read_cases.into_iter().enumerate() {
            assert_eq!(
                read_try_lock(mode, own_write, count, || dlock),
                want,
                "case {i}"
            );
        }
        assert_eq!(
            write_try_lock(m("write"), Some(b"1")),
            Ok(TryLock::Count(2))
        );
        assert_eq!(write_try_lock(m("write"), None), Ok(TryLock::Busy));
        assert_eq!(write_try_lock(m("read"), Some(b"1")), Ok(TryLock::Busy));
        assert_eq!(write_reentry_ttl(-1, 1), Err(Fallback));
        assert_eq!(write_reentry_ttl(-1, 1500), Ok(1499));

        assert_eq!(read_unlock(LockState::Absent, None), Ok(Unlock::NoLock));
        assert_eq!(read_unlock(m("write"), Some(b"1")), Ok(Unlock::Count(0)));
        assert_eq!(write_unlock(m("read"), Some(b"1")), Ok(Unlock::NotHeld));
        assert_eq!(write_unlock(m("write"), None), Ok(Unlock::NotHeld));
        assert_eq!(write_unlock(m("write"), Some(b"3")), Ok(Unlock::Count(2)));
        assert_eq!(latched(LatchState::String(b"1")), Ok(Some(1)));
        assert_eq!(latched(LatchState::String(b"1.0")), Err(Fallback));

        let vals: [&[u8]; 4] = [b"read", b"2", b"1", b"-1"];
        assert_eq!(
            hold_counts(vals.into_iter()),
            Ok(vec![(1, 2), (2, 1), (3, -1)])
        );
        let odd: [&[u8]; 2] = [b"read", b"0x10"];
        assert_eq!(hold_counts(odd.into_iter()), Err(Fallback));
        assert_eq!(read_unlock_end(1, -3, b"read"), ReadUnlockEnd::Free);
        assert_eq!(
            read_unlock_end(2, 900, b"read"),
            ReadUnlockEnd::Held(Some(900))
        );
        assert_eq!(read_unlock_end(2, -2, b"write"), ReadUnlockEnd::Held(None));
        assert_eq!(read_unlock_end(2, -2, b"read"), ReadUnlockEnd::Free);

        assert_eq!(force_unlock(m("read"), READ), Ok(true));
        assert_eq!(force_unlock(m("read"), WRITE), Ok(false));
        assert_eq!(force_unlock(LockState::Absent, READ), Ok(false));
        assert_eq!(force_unlock(LockState::NotAHash, READ), Err(Fallback));
        assert_eq!(shadowed_prefix(1, 2), Ok(1));
        assert_eq!(shadowed_prefix(2, 2), Err(Fallback));
    }

    #[test]
    fn a_dlock_read_write_lock_is_told_apart() {
        let f = |pairs: &[(&str, &str)]| -> Vec<(Vec<u8>, Vec<u8>)> {
            pairs
                .iter()
                .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect()
        };
        assert!(is_dlock_rwlock(&f(&[
            ("mode", "read"),
            ("read:d1", "1"),
            ("lease:d1", "5")
        ])));
        assert!(!is_dlock_rwlock(&f(&[("mode", "read"), ("u:1", "1")])));
        assert!(!is_dlock_rwlock(&f(&[("u:1", "2")])));
    }
}
