//! The grant rules of docs/COMMANDS.md as plain functions over a decoded [`LockValue`].
//!
//! No Redis here: the module's engine loads the value, calls these, and stores the result,
//! for a command and for a queued waiter alike. `now` is unix ms.

use crate::error::LockError;
use crate::model::{Exclusive, LockValue, Mode, ReadWrite, RwHolder, SemHolder, Semaphore, Want};

/// The answer to "may `owner` have this hold now?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Granted; `count` is the new hold count (of that mode).
    Granted {
        count: i64,
        /// Hold count went 0 -> 1 on an exclusive lock or on WRITE: advances the fence.
        fresh_exclusive: bool,
    },
    /// Held in a conflicting way, or others queue ahead: wait or answer null.
    Busy,
    Refused(LockError),
}

/// Reply of DLOCK.RELEASE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The owner's last hold (of that mode) is gone: reply 1.
    Last,
    /// Count went down, still held: reply 0.
    Decremented,
    /// The owner held nothing (of that mode): reply null.
    NotHeld,
}

/// Tries to grant `want` to `owner`. `queue_ahead`: other clients wait on this key in front of
/// this request, so only a holder's reentrant request may pass them.
#[inline]
pub fn acquire(
    value: &mut LockValue,
    owner: &[u8],
    want: Want,
    lease_ms: i64,
    now: i64,
    queue_ahead: bool,
) -> Grant {
    let deadline = now.saturating_add(lease_ms);
    if let Want::Permits { capacity, count } = want {
        return permits(value, owner, capacity, count, deadline, queue_ahead);
    }
    match (want, &mut *value) {
        (_, LockValue::NotALock | LockValue::Semaphore(_)) => Grant::Refused(LockError::WrongType),
        (Want::Exclusive, LockValue::ReadWrite(_)) => Grant::Refused(LockError::WrongType),
        (Want::Read | Want::Write, LockValue::Exclusive(_)) => Grant::Refused(LockError::WrongType),
        (Want::Exclusive, LockValue::Free) => {
            if queue_ahead {
                return Grant::Busy;
            }
            let mut x = Exclusive {
                expire_at: Some(deadline),
                ..Default::default()
            };
            x.holders.insert(owner, 1);
            *value = LockValue::Exclusive(x);
            Grant::Granted {
                count: 1,
                fresh_exclusive: true,
            }
        }
        (Want::Exclusive, LockValue::Exclusive(x)) => match x.holders.get_mut(owner) {
            // Reentrant: always, queue or not.
            Some(count) => {
                *count += 1;
                let count = *count;
                x.expire_at = Some(deadline);
                Grant::Granted {
                    count,
                    fresh_exclusive: false,
                }
            }
            None => Grant::Busy,
        },
        (Want::Read | Want::Write, LockValue::Free) => {
            if queue_ahead {
                return Grant::Busy;
            }
            let mut rw = ReadWrite::default();
            let (read, write) = if want == Want::Read { (1, 0) } else { (0, 1) };
            rw.holders.insert(
                owner.to_vec(),
                RwHolder {
                    read,
                    write,
                    deadline,
                },
            );
            *value = LockValue::ReadWrite(rw);
            Grant::Granted {
                count: 1,
                fresh_exclusive: want == Want::Write,
            }
        }
        (Want::Read, LockValue::ReadWrite(rw)) => {
            let held = rw.holders.contains_key(owner);
            // A reader's or the writer's READ is reentrant; a newcomer needs read mode and
            // nobody queued ahead (a waiting writer holds back later readers).
            if !held && (rw.is_write_locked() || queue_ahead) {
                return Grant::Busy;
            }
            let h = rw.holders.entry(owner.to_vec()).or_default();
            h.read += 1;
            h.deadline = deadline;
            Grant::Granted {
                count: h.read,
                fresh_exclusive: false,
            }
        }
        (Want::Write, LockValue::ReadWrite(rw)) => match rw.holders.get_mut(owner) {
            Some(h) if h.write > 0 => {
                h.write += 1;
                h.deadline = deadline;
                Grant::Granted {
                    count: h.write,
                    fresh_exclusive: false,
                }
            }
            Some(_) => Grant::Refused(LockError::Upgrade),
            None => Grant::Busy,
        },
        (Want::Permits { .. }, _) => unreachable!("handled above"),
    }
}

/// DLOCK.SEMAPHORE: `count` permits of a semaphore of `capacity` for `owner`, until
/// `deadline`. Strict FIFO: with others queued ahead nobody is served at once, not even an
/// owner that already holds permits (its request is a new one, and permits add up).
fn permits(
    value: &mut LockValue,
    owner: &[u8],
    capacity: i64,
    count: i64,
    deadline: i64,
    queue_ahead: bool,
) -> Grant {
    let sem = match value {
        LockValue::Semaphore(sem) => sem,
        LockValue::Free => {
            *value = LockValue::Semaphore(Semaphore {
                capacity,
                holders: Default::default(),
            });
            let LockValue::Semaphore(sem) = value else {
                unreachable!()
            };
            sem
        }
        _ => return Grant::Refused(LockError::WrongType),
    };
    if sem.capacity != capacity {
        let stored = sem.capacity;
        value.normalize();
        return Grant::Refused(LockError::CapacityMismatch {
            stored,
            asked: capacity,
        });
    }
    if queue_ahead || sem.used() + count > capacity {
        value.normalize(); // a semaphore made above for this request goes back to Free
        return Grant::Busy;
    }
    let h = sem.holders.entry(owner.to_vec()).or_insert(SemHolder {
        permits: 0,
        deadline,
    });
    h.permits += count;
    h.deadline = deadline;
    Grant::Granted {
        count: h.permits,
        fresh_exclusive: false,
    }
}

/// DLOCK.RELEASE: takes one hold of `owner` away, or `count` permits of a semaphore.
#[inline]
pub fn release(
    value: &mut LockValue,
    owner: &[u8],
    mode: Option<Mode>,
    count: Option<i64>,
) -> Result<Released, LockError> {
    let released = match value {
        LockValue::NotALock => return Err(LockError::WrongType),
        LockValue::Free => return Ok(Released::NotHeld),
        LockValue::Semaphore(_) if mode.is_some() => return Err(LockError::WrongType),
        LockValue::Exclusive(_) | LockValue::ReadWrite(_) if count.is_some() => {
            return Err(LockError::WrongType)
        }
        LockValue::Semaphore(sem) => {
            let n = count.unwrap_or(1);
            match sem.holders.get_mut(owner) {
                None => Released::NotHeld,
                Some(h) if n > h.permits => {
                    return Err(LockError::CountOverHeld {
                        count: n,
                        held: h.permits,
                    })
                }
                Some(h) if n < h.permits => {
                    h.permits -= n;
                    Released::Decremented
                }
                Some(_) => {
                    sem.holders.remove(owner);
                    Released::Last
                }
            }
        }
        LockValue::Exclusive(_) if mode.is_some() => return Err(LockError::WrongType),
        LockValue::Exclusive(x) => match x.holders.get_mut(owner) {
            None => Released::NotHeld,
            Some(count) if *count > 1 => {
                *count -= 1;
                Released::Decremented
            }
            Some(_) => {
                x.holders.remove(owner);
                Released::Last
            }
        },
        LockValue::ReadWrite(rw) => {
            let Some(h) = rw.holders.get_mut(owner) else {
                return Ok(Released::NotHeld);
            };
            let mode = match mode {
                Some(m) => m,
                None if h.read > 0 && h.write > 0 => return Err(LockError::NameTheMode),
                None if h.write > 0 => Mode::Write,
                None => Mode::Read,
            };
            let count = if mode == Mode::Read {
                &mut h.read
            } else {
                &mut h.write
            };
            let released = match *count {
                0 => Released::NotHeld,
                1 => Released::Last,
                _ => Released::Decremented,
            };
            *count = (*count - 1).max(0);
            if h.read == 0 && h.write == 0 {
                rw.holders.remove(owner);
            }
            released
        }
    };
    value.normalize();
    Ok(released)
}

/// DLOCK.RENEW: resets the owner's lease. `Ok(false)`: the owner holds nothing.
#[inline]
pub fn renew(
    value: &mut LockValue,
    owner: &[u8],
    lease_ms: i64,
    now: i64,
) -> Result<bool, LockError> {
    let deadline = now.saturating_add(lease_ms);
    match value {
        LockValue::NotALock => Err(LockError::WrongType),
        LockValue::Free => Ok(false),
        LockValue::Exclusive(x) => {
            let held = x.holders.contains_key(owner);
            if held {
                x.expire_at = Some(deadline);
            }
            Ok(held)
        }
        LockValue::ReadWrite(rw) => Ok(match rw.holders.get_mut(owner) {
            Some(h) => {
                h.deadline = deadline;
                true
            }
            None => false,
        }),
        LockValue::Semaphore(sem) => Ok(match sem.holders.get_mut(owner) {
            Some(h) => {
                h.deadline = deadline;
                true
            }
            None => false,
        }),
    }
}

/// BIND: cuts `owner`'s lease on this lock to end at `deadline` (unix ms), never lengthening
/// it. Returns whether it was cut (the owner held, and its lease ended later).
pub fn cut_lease(value: &mut LockValue, owner: &[u8], deadline: i64) -> bool {
    let lease = match value {
        LockValue::Exclusive(x) if x.holders.contains_key(owner) => {
            if x.expire_at.is_some_and(|at| at <= deadline) {
                return false;
            }
            x.expire_at = Some(deadline);
            return true;
        }
        LockValue::ReadWrite(rw) => rw.holders.get_mut(owner).map(|h| &mut h.deadline),
        LockValue::Semaphore(sem) => sem.holders.get_mut(owner).map(|h| &mut h.deadline),
        _ => None,
    };
    match lease {
        Some(at) if *at > deadline => {
            *at = deadline;
            true
        }
        _ => false,
    }
}

/// Whether `owner` holds anything on this lock (any mode, any permits).
pub fn holds(value: &LockValue, owner: &[u8]) -> bool {
    match value {
        LockValue::Exclusive(x) => x.holders.contains_key(owner),
        LockValue::ReadWrite(rw) => rw.holders.contains_key(owner),
        LockValue::Semaphore(sem) => sem.holders.contains_key(owner),
        LockValue::Free | LockValue::NotALock => false,
    }
}

/// Removes read-write and semaphore holders whose own lease has passed (`now > deadline`, as
/// Redis expires keys): their holds and permits come back. Returns how many lapsed.
#[inline]
pub fn prune_lapsed(value: &mut LockValue, now: i64) -> usize {
    let lapsed = match value {
        LockValue::ReadWrite(rw) => {
            let before = rw.holders.len();
            rw.holders.retain(|_, h| h.deadline >= now);
            before - rw.holders.len()
        }
        LockValue::Semaphore(sem) => {
            let before = sem.holders.len();
            sem.holders.retain(|_, h| h.deadline >= now);
            before - sem.holders.len()
        }
        _ => return 0,
    };
    value.normalize();
    lapsed
}

/// When this value may change by itself (a lease running out), in unix ms.
#[inline]
pub fn next_change(value: &LockValue) -> Option<i64> {
    match value {
        LockValue::Exclusive(x) => x.expire_at,
        LockValue::ReadWrite(rw) => rw.holders.values().map(|h| h.deadline).min(),
        LockValue::Semaphore(sem) => sem.holders.values().map(|h| h.deadline).min(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &[u8] = b"a";
    const B: &[u8] = b"b";
    const C: &[u8] = b"c";

    fn granted(count: i64, fresh: bool) -> Grant {
        Grant::Granted {
            count,
            fresh_exclusive: fresh,
        }
    }

    #[test]
    fn cut_lease_never_lengthens() {
        let mut v = LockValue::Free;
        acquire(&mut v, A, Want::Exclusive, 100, 1000, false);
        assert!(!cut_lease(&mut v, B, 1050), "not B's hold");
        assert!(cut_lease(&mut v, A, 1050));
        assert_eq!(v.expire_at(), Some(1050));
        assert!(!cut_lease(&mut v, A, 1080), "a cut never lengthens");
        assert_eq!(v.expire_at(), Some(1050));
        let mut rw = LockValue::Free;
        acquire(&mut rw, A, Want::Read, 100, 1000, false);
        acquire(&mut rw, B, Want::Read, 100, 1000, false);
        assert!(cut_lease(&mut rw, A, 1010));
        assert_eq!(next_change(&rw), Some(1010));
        assert_eq!(rw.expire_at(), Some(1100), "B keeps its lease");
        assert!(holds(&rw, A) && !holds(&rw, C));
        let mut sem = LockValue::Free;
        acquire(
            &mut sem,
            A,
            Want::Permits {
                capacity: 2,
                count: 1,
            },
            100,
            1000,
            false,
        );
        assert!(cut_lease(&mut sem, A, 1000));
        assert_eq!(prune_lapsed(&mut sem, 1001), 1);
        assert!(!holds(&sem, A));
    }

    #[test]
    fn exclusive_grant_reentry_and_exclusion() {
        let mut v = LockValue::Free;
        assert_eq!(
            acquire(&mut v, A, Want::Exclusive, 100, 1000, false),
            granted(1, true)
        );
        assert_eq!(v.expire_at(), Some(1100));
        assert_eq!(
            acquire(&mut v, A, Want::Exclusive, 500, 1010, true),
            granted(2, false)
        );
        assert_eq!(v.expire_at(), Some(1510), "reentry resets the lease");
        assert_eq!(
            acquire(&mut v, B, Want::Exclusive, 100, 1020, false),
            Grant::Busy
        );
        assert_eq!(release(&mut v, B, None, None), Ok(Released::NotHeld));
        assert_eq!(release(&mut v, A, None, None), Ok(Released::Decremented));
        assert_eq!(v.expire_at(), Some(1510), "release keeps the lease");
        assert_eq!(release(&mut v, A, None, None), Ok(Released::Last));
        assert_eq!(v, LockValue::Free);
        assert_eq!(release(&mut v, A, None, None), Ok(Released::NotHeld));
    }

    #[test]
    fn free_lock_respects_the_queue() {
        let mut v = LockValue::Free;
        assert_eq!(
            acquire(&mut v, A, Want::Exclusive, 100, 0, true),
            Grant::Busy
        );
        assert_eq!(acquire(&mut v, A, Want::Read, 100, 0, true), Grant::Busy);
        assert_eq!(v, LockValue::Free);
    }

    #[test]
    fn kinds_do_not_mix() {
        let mut v = LockValue::Free;
        acquire(&mut v, A, Want::Exclusive, 100, 0, false);
        let before = v.clone();
        assert_eq!(
            acquire(&mut v, A, Want::Read, 100, 0, false),
            Grant::Refused(LockError::WrongType)
        );
        assert_eq!(
            release(&mut v, A, Some(Mode::Read), None),
            Err(LockError::WrongType)
        );
        assert_eq!(v, before);
        let mut v = LockValue::Free;
        acquire(&mut v, A, Want::Write, 100, 0, false);
        assert_eq!(
            acquire(&mut v, A, Want::Exclusive, 100, 0, false),
            Grant::Refused(LockError::WrongType)
        );
        let mut v = LockValue::NotALock;
        assert_eq!(
            acquire(&mut v, A, Want::Exclusive, 1, 0, false),
            Grant::Refused(LockError::WrongType)
        );
        assert_eq!(renew(&mut v, A, 1, 0), Err(LockError::WrongType));
        assert_eq!(release(&mut v, A, None, None), Err(LockError::WrongType));
    }

    #[test]
    fn readers_share_writers_exclude() {
        let mut v = LockValue::Free;
        assert_eq!(
            acquire(&mut v, A, Want::Read, 100, 0, false),
            granted(1, false)
        );
        assert_eq!(
            acquire(&mut v, B, Want::Read, 200, 0, false),
            granted(1, false)
        );
        assert_eq!(
            acquire(&mut v, A, Want::Read, 100, 0, true),
            granted(2, false),
            "reentrant read passes the queue"
        );
        assert_eq!(
            acquire(&mut v, C, Want::Read, 100, 0, true),
            Grant::Busy,
            "newcomer queues behind waiters"
        );
        assert_eq!(acquire(&mut v, C, Want::Write, 100, 0, false), Grant::Busy);
        assert!(matches!(
            acquire(&mut v, A, Want::Write, 100, 0, false),
            Grant::Refused(LockError::Upgrade)
        ));
        assert_eq!(
            v.expire_at(),
            Some(200),
            "key TTL is the latest holder deadline"
        );
        assert_eq!(release(&mut v, A, None, None), Ok(Released::Decremented));
        assert_eq!(
            release(&mut v, A, Some(Mode::Read), None),
            Ok(Released::Last)
        );
        assert_eq!(
            release(&mut v, B, Some(Mode::Write), None),
            Ok(Released::NotHeld)
        );
        assert_eq!(release(&mut v, B, None, None), Ok(Released::Last));
        assert_eq!(v, LockValue::Free);
    }

    #[test]
    fn writer_may_read_and_downgrade() {
        let mut v = LockValue::Free;
        assert_eq!(
            acquire(&mut v, A, Want::Write, 100, 0, false),
            granted(1, true)
        );
        assert_eq!(acquire(&mut v, B, Want::Read, 100, 0, false), Grant::Busy);
        assert_eq!(
            acquire(&mut v, A, Want::Read, 100, 0, true),
            granted(1, false)
        );
        assert_eq!(
            acquire(&mut v, A, Want::Write, 100, 0, true),
            granted(2, false)
        );
        assert!(
            matches!(release(&mut v, A, None, None), Err(LockError::NameTheMode)),
            "holds both: must name one"
        );
        assert_eq!(
            release(&mut v, A, Some(Mode::Write), None),
            Ok(Released::Decremented)
        );
        assert_eq!(
            release(&mut v, A, Some(Mode::Write), None),
            Ok(Released::Last)
        );
        // Now only a read hold: read mode, other readers may join.
        assert_eq!(
            acquire(&mut v, B, Want::Read, 100, 0, false),
            granted(1, false)
        );
        assert_eq!(
            v.encode().get(&b"mode"[..]).map(|m| m.as_slice()),
            Some(&b"read"[..])
        );
    }

    #[test]
    fn renew_and_lapse() {
        let mut v = LockValue::Free;
        acquire(&mut v, A, Want::Read, 100, 0, false);
        acquire(&mut v, B, Want::Read, 100, 0, false);
        assert_eq!(renew(&mut v, B, 1000, 50), Ok(true));
        assert_eq!(renew(&mut v, C, 1000, 50), Ok(false));
        assert_eq!(next_change(&v), Some(100));
        assert_eq!(
            prune_lapsed(&mut v, 100),
            0,
            "a deadline is still valid at its own millisecond"
        );
        assert_eq!(prune_lapsed(&mut v, 101), 1);
        assert_eq!(next_change(&v), Some(1050));
        assert_eq!(
            acquire(&mut v, C, Want::Write, 100, 200, false),
            Grant::Busy
        );
        assert_eq!(prune_lapsed(&mut v, 1051), 1);
        assert_eq!(v, LockValue::Free);

        let mut v = LockValue::Free;
        acquire(&mut v, A, Want::Exclusive, 100, 0, false);
        assert_eq!(renew(&mut v, A, 300, 10), Ok(true));
        assert_eq!(next_change(&v), Some(310));
        assert_eq!(renew(&mut v, B, 300, 10), Ok(false));
    }

    fn permits(capacity: i64, count: i64) -> Want {
        Want::Permits { capacity, count }
    }

    #[test]
    fn semaphore_grants_until_full_then_queues() {
        let mut v = LockValue::Free;
        assert_eq!(
            acquire(&mut v, A, permits(3, 2), 100, 0, false),
            granted(2, false)
        );
        assert_eq!(
            acquire(&mut v, B, permits(3, 2), 100, 0, false),
            Grant::Busy
        );
        assert_eq!(
            acquire(&mut v, B, permits(3, 1), 200, 0, false),
            granted(1, false)
        );
        assert_eq!(
            v.expire_at(),
            Some(200),
            "key TTL is the latest holder deadline"
        );
        assert_eq!(
            acquire(&mut v, C, permits(3, 1), 100, 0, false),
            Grant::Busy
        );
        // Free permits, but others queue ahead: no barging, not even by a holder.
        assert_eq!(release(&mut v, B, None, None), Ok(Released::Last));
        assert_eq!(acquire(&mut v, A, permits(3, 1), 100, 0, true), Grant::Busy);
        assert_eq!(
            acquire(&mut v, A, permits(3, 1), 300, 10, false),
            granted(3, false)
        );
        assert_eq!(next_change(&v), Some(310));
        // Refusals change nothing.
        let before = v.clone();
        assert!(matches!(
            acquire(&mut v, C, permits(4, 1), 100, 0, false),
            Grant::Refused(LockError::CapacityMismatch {
                stored: 3,
                asked: 4
            })
        ));
        assert!(matches!(
            release(&mut v, A, None, Some(4)),
            Err(LockError::CountOverHeld { count: 4, held: 3 })
        ));
        assert_eq!(v, before);
        assert_eq!(release(&mut v, A, None, Some(2)), Ok(Released::Decremented));
        assert_eq!(
            next_change(&v),
            Some(310),
            "a partial release keeps the lease"
        );
        assert_eq!(release(&mut v, C, None, None), Ok(Released::NotHeld));
        assert_eq!(release(&mut v, A, None, None), Ok(Released::Last));
        assert_eq!(v, LockValue::Free, "deleted when the last holder leaves");
        // A busy request on a free key leaves it free.
        assert_eq!(acquire(&mut v, A, permits(3, 1), 100, 0, true), Grant::Busy);
        assert_eq!(v, LockValue::Free);
    }

    #[test]
    fn semaphore_kinds_and_lapses() {
        let mut v = LockValue::Free;
        acquire(&mut v, A, permits(2, 1), 100, 0, false);
        acquire(&mut v, B, permits(2, 1), 100, 0, false);
        for want in [Want::Exclusive, Want::Read, Want::Write] {
            assert_eq!(
                acquire(&mut v, A, want, 100, 0, false),
                Grant::Refused(LockError::WrongType)
            );
        }
        assert_eq!(
            release(&mut v, A, Some(Mode::Read), None),
            Err(LockError::WrongType)
        );
        assert_eq!(renew(&mut v, B, 1000, 50), Ok(true));
        assert_eq!(renew(&mut v, C, 1000, 50), Ok(false));
        assert_eq!(prune_lapsed(&mut v, 101), 1, "A lapses while B renews");
        assert_eq!(
            acquire(&mut v, C, permits(2, 1), 100, 200, false),
            granted(1, false)
        );
        let mut lock = LockValue::Free;
        acquire(&mut lock, A, Want::Exclusive, 100, 0, false);
        assert_eq!(
            acquire(&mut lock, A, permits(2, 1), 100, 0, false),
            Grant::Refused(LockError::WrongType)
        );
        assert_eq!(
            release(&mut lock, A, None, Some(1)),
            Err(LockError::WrongType)
        );
        let mut rw = LockValue::Free;
        acquire(&mut rw, A, Want::Read, 100, 0, false);
        assert_eq!(
            acquire(&mut rw, B, permits(2, 1), 100, 0, false),
            Grant::Refused(LockError::WrongType)
        );
        assert_eq!(
            release(&mut rw, A, None, Some(1)),
            Err(LockError::WrongType)
        );
    }
}
