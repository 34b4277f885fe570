//! The properties, each checked in every reachable state (docs/DESIGN.md, *The safety
//! argument*, states each in one sentence). Those of a state are read from it; those of a
//! step (fairness, fencing, deadlock detection) are checked by the step itself, which records
//! the one it broke in [`State::broken`].

use dlock_core::delay::State as DelayState;
use dlock_core::error::LockError;
use dlock_core::model::{LockValue, Want};
use dlock_core::rules;
use dlock_core::serve;
use dlock_core::terms::Terms;
use stateright::Property;

use crate::live::live;
pub use crate::names::{
    BIND_CUT, DEADLOCK, EXCLUSION, FAIRNESS, FENCING, LOCK_DELAY, NOT_FORGOTTEN,
};
use crate::{Key, State, World, CAPACITY, LEASE, OWNERS};

/// Every property.
pub fn all() -> Vec<Property<World>> {
    vec![
        Property::always(EXCLUSION, |_, s: &State| s.keys.iter().all(exclusive)),
        Property::always(FAIRNESS, |_, s: &State| s.broken != Some(FAIRNESS)),
        Property::always(NOT_FORGOTTEN, |_, s: &State| {
            s.keys.iter().all(not_forgotten)
        }),
        Property::always(FENCING, |_, s: &State| s.broken != Some(FENCING)),
        Property::always(LOCK_DELAY, |_, s: &State| {
            s.keys.iter().all(no_grant_in_delay)
        }),
        Property::always(BIND_CUT, |_, s: &State| s.keys.iter().all(cut_holds_gone)),
        Property::always(DEADLOCK, |_, s: &State| s.broken != Some(DEADLOCK)),
    ]
}

/// A lock has at most one owner; a write hold excludes every other hold; a semaphore's permits
/// never exceed its capacity (counting the holds whose lease has not ended).
fn exclusive(key: &Key) -> bool {
    match live(key) {
        LockValue::Exclusive(x) => x.holders.len() <= 1,
        LockValue::ReadWrite(rw) => {
            rw.holders.len() <= 1 || rw.holders.values().all(|h| h.write == 0)
        }
        LockValue::Semaphore(sem) => {
            sem.holders.values().map(|h| h.permits).sum::<i64>() <= CAPACITY
        }
        _ => true,
    }
}

/// A queue whose head a unit of work would grant (or answer) now has a wake-up pending.
fn not_forgotten(key: &Key) -> bool {
    let Some(head) = key.queue.first() else {
        return true;
    };
    if key.dirty {
        return true;
    }
    let mut value = live(key);
    let ask = Terms {
        fence: head.opts.fence,
        ..Terms::new(OWNERS[head.owner as usize], head.want, LEASE)
    };
    let draw = |_| Ok::<i64, LockError>(key.counter + 1);
    serve::turn(&mut value, key.delay.as_ref(), &ask, 0, false, draw) == Ok(None)
}

/// While a lock-delay runs, nobody holds the lock.
fn no_grant_in_delay(key: &Key) -> bool {
    let value = live(key);
    match key.delay.as_ref().map(|d| d.state(&value, 0)) {
        Some(DelayState::Running { .. }) => value == LockValue::Free,
        _ => true,
    }
}

/// A hold cut by a closed connection is gone once its grace has passed (unless its owner
/// was granted or renewed it again since).
fn cut_holds_gone(key: &Key) -> bool {
    let value = live(key);
    key.cuts
        .iter()
        .all(|(o, at)| *at >= 0 || !rules::holds(&value, OWNERS[*o as usize]))
}

/// One wait of an owner, as the oracle sees it: every owner that must leave (`all`), or any
/// one of which leaving makes room (`any`).
struct Wait {
    all: u8,
    any: u8,
}

fn bit(o: u8) -> u8 {
    1 << o
}

/// The holders of `key` that block `me`'s request `want`, written from docs/COMMANDS.md
/// without dlock-core's `waits`.
fn held_by(key: &Key, me: u8, want: Want) -> Wait {
    let others = |owners: Vec<&[u8]>| {
        owners
            .into_iter()
            .filter(|o| *o != OWNERS[me as usize])
            .map(|o| bit(OWNERS.iter().position(|n| *n == o).unwrap() as u8))
            .fold(0, |a, b| a | b)
    };
    let mut w = Wait { all: 0, any: 0 };
    match (live(key), want) {
        (LockValue::Exclusive(x), Want::Exclusive) => {
            w.all = others(x.holders.iter().map(|(o, _)| o).collect())
        }
        (LockValue::ReadWrite(rw), Want::Read) => {
            w.all = others(
                rw.holders
                    .iter()
                    .filter(|(_, h)| h.write > 0)
                    .map(|(o, _)| o.as_slice())
                    .collect(),
            )
        }
        (LockValue::ReadWrite(rw), Want::Write) => {
            w.all = others(rw.holders.keys().map(|o| o.as_slice()).collect())
        }
        (LockValue::Semaphore(sem), Want::Permits { count, .. })
            if sem.holders.values().map(|h| h.permits).sum::<i64>() + count > CAPACITY =>
        {
            w.any = others(sem.holders.keys().map(|o| o.as_slice()).collect());
        }
        _ => {}
    }
    w
}

/// The wait of `me`'s request `want` on `key` behind the requests `ahead`: its blocking
/// holders and every request ahead that conflicts (two READs do not).
fn wait(key: &Key, me: u8, want: Want, ahead: &[crate::Waiter]) -> Wait {
    let mut w = held_by(key, me, want);
    for a in ahead {
        if a.owner != me && !(a.want == Want::Read && want == Want::Read) {
            w.all |= bit(a.owner);
        }
    }
    w
}

/// The oracle of deadlock detection: whether `me`'s WAIT request `want` on key `k` closes a
/// cycle through `me` of owners that can never proceed. Brute force over the sets of owners:
/// a set is closed when each of its owners has a wait that needs one of the set gone (or,
/// for a full semaphore, all of whose holders are in the set); the owners that can never
/// proceed are the union of the closed sets; a cycle is a path among them back to `me`.
pub fn closes_a_cycle(s: &State, me: u8, k: usize, want: Want) -> bool {
    let mut waits: [Vec<Wait>; 3] = Default::default();
    waits[me as usize].push(wait(&s.keys[k], me, want, &s.keys[k].queue));
    for key in &s.keys {
        for (i, wt) in key.queue.iter().enumerate() {
            waits[wt.owner as usize].push(wait(key, wt.owner, wt.want, &key.queue[..i]));
        }
    }
    let stuck_in = |set: u8, w: &Wait| w.all & set != 0 || (w.any != 0 && w.any & !set == 0);
    let closed = |set: u8| {
        (0..3u8)
            .filter(|o| set & bit(*o) != 0)
            .all(|o| waits[o as usize].iter().any(|w| stuck_in(set, w)))
    };
    let stuck = (1..8u8).filter(|set| closed(*set)).fold(0, |a, b| a | b);
    if stuck & bit(me) == 0 {
        return false;
    }
    // Edges among the stuck owners; a path from `me` back to `me`.
    let next = |o: u8| -> u8 {
        waits[o as usize]
            .iter()
            .filter(|w| stuck_in(stuck, w))
            .map(|w| (w.all | if w.any & !stuck == 0 { w.any } else { 0 }) & stuck)
            .fold(0, |a, b| a | b)
    };
    let mut reached = next(me);
    loop {
        let more = (0..3u8)
            .filter(|o| reached & bit(*o) != 0)
            .fold(reached, |a, o| a | next(o));
        if more == reached {
            return reached & bit(me) != 0;
        }
        reached = more;
    }
}
