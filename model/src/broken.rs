//! The rules the model calls, each with a deliberately broken copy: a checker that never
//! fails proves nothing, so every property has a mutation here that it must catch with a
//! counterexample path (model/tests/check.rs). Without one, each function is exactly
//! dlock-core's.

use dlock_core::deadlock::Wait;
use dlock_core::delay::{self, Delay};
use dlock_core::error::LockError;
use dlock_core::model::LockValue;
use dlock_core::rules;
use dlock_core::serve::{self, Granted};
use dlock_core::terms::Terms;

use crate::World;

/// A rule broken on purpose, and the property that must catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Broken {
    /// Mutual exclusion: an exclusive lock held by another owner is granted to a second one.
    SecondHolder,
    /// Fairness: a command's request is granted past the clients queued ahead of it.
    IgnoreQueue,
    /// Fairness: a queue's head that must wait is skipped and the next request served.
    SkipBusyHead,
    /// No waiter forgotten: a queue is served one grant at a time (readers and fitting permit
    /// requests behind a granted head are left waiting with nothing to wake them).
    OneGrantPerServe,
    /// Fencing: a fresh exclusive grant reads the counter without advancing it.
    FenceNotAdvanced,
    /// Lock-delay: a turn does not look at a running lock-delay.
    NoLockDelayGate,
    /// BIND: a closed connection's cut leaves the lease as it was.
    CutIgnored,
    /// Deadlock detection: other owners' waits are followed through queues only, not
    /// through the holders that block them.
    HoldersNotFollowed,
}

impl Broken {
    /// Every broken rule, each with the property that must catch it.
    pub const ALL: [(Broken, &'static str); 8] = [
        (Broken::SecondHolder, crate::names::EXCLUSION),
        (Broken::IgnoreQueue, crate::names::FAIRNESS),
        (Broken::SkipBusyHead, crate::names::FAIRNESS),
        (Broken::OneGrantPerServe, crate::names::NOT_FORGOTTEN),
        (Broken::FenceNotAdvanced, crate::names::FENCING),
        (Broken::NoLockDelayGate, crate::names::LOCK_DELAY),
        (Broken::CutIgnored, crate::names::BIND_CUT),
        (Broken::HoldersNotFollowed, crate::names::DEADLOCK),
    ];
}

/// `serve::turn` at now (0).
pub fn turn(
    w: &World,
    value: &mut LockValue,
    stored: Option<&Delay>,
    ask: &Terms<&[u8]>,
    queue_ahead: bool,
    mut draw: impl FnMut(bool) -> Result<i64, LockError>,
) -> Result<Option<Granted>, LockError> {
    let (delay, queue_ahead) = match w.broken {
        Some(Broken::NoLockDelayGate) => (None, queue_ahead),
        Some(Broken::IgnoreQueue) => (stored, false),
        _ => (stored, queue_ahead),
    };
    let advance = w.broken != Some(Broken::FenceNotAdvanced);
    let turn = serve::turn(value, delay, ask, 0, queue_ahead, |a| draw(a && advance))?;
    let second = turn.is_none()
        && w.broken == Some(Broken::SecondHolder)
        && !queue_ahead
        && delay::running_until(delay, value, 0).is_none();
    if let (true, LockValue::Exclusive(x)) = (second, &mut *value) {
        x.holders.insert(ask.owner, 1);
        x.expire_at = Some(ask.lease_ms);
        return Ok(Some(Granted::new(ask.want, 1, None, false)));
    }
    Ok(turn)
}

/// `serve::serve` at now (0): the index in the queue of each request served, and its outcome.
pub fn serve<'q>(
    w: &World,
    value: &mut LockValue,
    stored: Option<&Delay>,
    queue: impl IntoIterator<Item = &'q Terms<&'q [u8]>>,
    mut draw: impl FnMut(bool) -> Result<i64, LockError>,
) -> Vec<(usize, Result<Granted, LockError>)> {
    let mutated = matches!(
        w.broken,
        Some(Broken::SkipBusyHead | Broken::OneGrantPerServe)
    );
    if !mutated {
        let served = serve::serve(value, stored, 0, queue, |a| {
            draw(a && w.broken != Some(Broken::FenceNotAdvanced))
        });
        return served.into_iter().enumerate().collect();
    }
    // The mutated copies of `serve::serve`'s loop.
    let mut served = vec![];
    for (i, ask) in queue.into_iter().enumerate() {
        match serve::turn(value, stored, ask, 0, false, &mut draw) {
            Ok(None) if w.broken == Some(Broken::SkipBusyHead) => continue,
            Ok(None) => break,
            Ok(Some(granted)) => {
                served.push((i, Ok(granted)));
                if w.broken == Some(Broken::OneGrantPerServe) {
                    break;
                }
            }
            Err(e) => served.push((i, Err(e))),
        }
    }
    served
}

/// `rules::cut_lease`.
pub fn cut_lease(w: &World, value: &mut LockValue, owner: &[u8], deadline: i64) -> bool {
    if w.broken == Some(Broken::CutIgnored) {
        return rules::holds(value, owner);
    }
    rules::cut_lease(value, owner, deadline)
}

/// Another owner's wait as the deadlock search is given it.
pub fn wait(w: &World, mut wait: Wait) -> Wait {
    if w.broken == Some(Broken::HoldersNotFollowed) {
        wait.all.retain(|(_, behind)| *behind);
        wait.any.clear();
    }
    wait
}
