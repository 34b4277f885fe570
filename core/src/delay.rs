//! LOCKDELAY: after a hold taken with `LOCKDELAY ms` ends without a RELEASE (its lease
//! lapsed, or was cut by BIND), nobody is granted the lock for `ms`. The delay is kept in a
//! companion hash beside the lock (`names::write_delay_key`): the owner, the end of its
//! lease (`until`, unix ms), the delay, and whether the module has seen the delay begin; its
//! TTL is `until + delay`. These rules decide what the companion means and what it becomes.

use crate::model::{LockValue, Owner};

/// Companion field: the owner whose hold has the delay.
pub const OWNER_FIELD: &[u8] = b"owner";
/// Companion field: the end of that owner's lease (unix ms).
pub const UNTIL_FIELD: &[u8] = b"until";
/// Companion field: the delay (ms).
pub const DELAY_FIELD: &[u8] = b"delay";
/// Companion field, present once the module saw the delay running (counted once).
pub const BEGUN_FIELD: &[u8] = b"begun";

/// A lock-delay as stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Delay {
    pub owner: Owner,
    pub until: i64,
    pub delay_ms: i64,
    pub begun: bool,
}

/// What a stored delay means for the lock now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The owner still holds the lock exclusively: no delay yet.
    Holding,
    /// The hold lapsed: nobody is granted the lock until `ends` (unix ms).
    Running { ends: i64 },
    /// Released or deleted before its lease ended, or the delay has passed.
    Over,
}

/// `Some(lease end)` when `owner` holds `value` exclusively (the exclusive lock, or WRITE);
/// the inner `None` when its lease end was not read.
fn exclusive_lease(value: &LockValue, owner: &[u8]) -> Option<Option<i64>> {
    match value {
        LockValue::Exclusive(x) if x.holders.contains_key(owner) => Some(x.expire_at),
        LockValue::ReadWrite(rw) => rw
            .holders
            .get(owner)
            .filter(|h| h.write > 0)
            .map(|h| Some(h.deadline)),
        _ => None,
    }
}

impl Delay {
    /// What this delay means for `value` at `now`.
    pub fn state(&self, value: &LockValue, now: i64) -> State {
        if exclusive_lease(value, &self.owner).is_some() {
            return State::Holding;
        }
        let ends = self.until.saturating_add(self.delay_ms);
        // Redis expires at `now > deadline`: the hold lapsed once `now > until`.
        if now > self.until && now <= ends {
            State::Running { ends }
        } else {
            State::Over
        }
    }

    /// The absolute expiry of the companion key.
    pub fn expire_at(&self) -> i64 {
        self.until.saturating_add(self.delay_ms)
    }
}

/// When the running lock-delay of `delay` (as stored, if any) ends, in unix ms: nobody may be
/// granted `value` before. `None` when none runs.
#[inline]
pub fn running_until(delay: Option<&Delay>, value: &LockValue, now: i64) -> Option<i64> {
    match delay?.state(value, now) {
        State::Running { ends } => Some(ends),
        _ => None,
    }
}

/// What the companion holds after a unit of work: `stored` as it was, `asked` the delay a
/// grant of this unit asked for (owner, ms), `value` the lock as it will be saved.
pub fn next(
    stored: Option<&Delay>,
    asked: Option<(&[u8], i64)>,
    value: &LockValue,
    now: i64,
) -> Option<Delay> {
    if let Some((owner, delay_ms)) = asked {
        if let Some(Some(until)) = exclusive_lease(value, owner) {
            return Some(Delay {
                owner: owner.to_vec(),
                until,
                delay_ms,
                begun: false,
            });
        }
    }
    let d = stored?;
    match d.state(value, now) {
        // The lease moved (renewal, reentry, a BIND cut): the delay follows it.
        State::Holding => {
            let until = exclusive_lease(value, &d.owner)
                .flatten()
                .unwrap_or(d.until);
            Some(Delay { until, ..d.clone() })
        }
        State::Running { .. } => Some(Delay {
            begun: true,
            ..d.clone()
        }),
        State::Over => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Want;
    use crate::rules::{acquire, release};

    fn delay(until: i64, ms: i64) -> Delay {
        Delay {
            owner: b"a".to_vec(),
            until,
            delay_ms: ms,
            begun: false,
        }
    }

    #[test]
    fn a_lapsed_hold_delays_a_released_one_does_not() {
        let mut v = LockValue::Free;
        acquire(&mut v, b"a", Want::Exclusive, 100, 1000, false);
        let d = next(None, Some((b"a", 50)), &v, 1000).unwrap();
        assert_eq!(d, delay(1100, 50));
        assert_eq!(d.state(&v, 1050), State::Holding);
        // Lapsed (the key is gone): running until 1150.
        let free = LockValue::Free;
        assert_eq!(d.state(&free, 1101), State::Running { ends: 1150 });
        assert_eq!(d.state(&free, 1151), State::Over);
        let seen = next(Some(&d), None, &free, 1101).unwrap();
        assert!(seen.begun);
        assert_eq!(next(Some(&d), None, &free, 1151), None);
        // Released (or deleted) before its lease ended: no delay.
        release(&mut v, b"a", None, None).unwrap();
        assert_eq!(d.state(&v, 1050), State::Over);
        assert_eq!(next(Some(&d), None, &v, 1050), None);
    }

    #[test]
    fn the_delay_follows_the_lease_and_only_exclusive_holds() {
        let mut v = LockValue::Free;
        acquire(&mut v, b"a", Want::Exclusive, 100, 1000, false);
        let d = delay(1100, 50);
        crate::rules::renew(&mut v, b"a", 500, 1050).unwrap();
        assert_eq!(next(Some(&d), None, &v, 1050).unwrap().until, 1550);
        let mut rw = LockValue::Free;
        acquire(&mut rw, b"a", Want::Read, 100, 1000, false);
        assert_eq!(
            next(None, Some((b"a", 50)), &rw, 1000),
            None,
            "READ has no delay"
        );
        let mut rw = LockValue::Free;
        acquire(&mut rw, b"a", Want::Write, 100, 1000, false);
        assert_eq!(
            next(None, Some((b"a", 50)), &rw, 1000),
            Some(delay(1100, 50))
        );
    }
}
