//! The engine's shell around the rules, as the model runs it: which actions are possible, and
//! what each does. A command or a wake-up is one unit of work on a key, as in the module's
//! `engine::work::unit_of_work`: Redis expires what has passed, lapsed holders are dropped, the
//! queue is served, the step runs, the lock-delay companion is saved. Which events mark a key
//! for a wake-up mirrors `engine::listen`/`blocked`/`fire`: a key deleted or flushed, the head
//! leaving, a lease or delay running out (the engine's lease timer) all leave a wake-up
//! pending ([`Action::Wake`]); a WAIT time-out serves the queue at once.

use dlock_core::deadlock::{self, Wait};
use dlock_core::delay;
use dlock_core::model::{LockValue, Mode, Want};
use dlock_core::rules::{self, Released};
use dlock_core::serve::Granted;
use dlock_core::terms::Terms;

use crate::live::{expire, live};
use crate::{broken, names, props, Action, Key, State, Waiter, World, DELAY, GRACE, LEASE};
use crate::{Opts, CAPACITY, MAX_COUNT, OWNERS};

/// The name of key `k`, as the deadlock text writes it.
const NAMES: [&[u8]; 2] = [b"k0", b"k1"];

fn owner(o: u8) -> &'static [u8] {
    OWNERS[o as usize]
}

/// The key `owner`'s client waits on (a blocked client sends nothing else).
fn waiting(s: &State, o: u8) -> Option<usize> {
    s.keys
        .iter()
        .position(|k| k.queue.iter().any(|w| w.owner == o))
}

/// `owner`'s count of the holds `want` asks for.
fn count(value: &LockValue, owner: &[u8], want: Want) -> i64 {
    match (value, want) {
        (LockValue::Exclusive(x), _) => x.holders.get(owner).copied().unwrap_or(0),
        (LockValue::ReadWrite(rw), Want::Read) => rw.holders.get(owner).map_or(0, |h| h.read),
        (LockValue::ReadWrite(rw), _) => rw.holders.get(owner).map_or(0, |h| h.write),
        (LockValue::Semaphore(sem), _) => sem.holders.get(owner).map_or(0, |h| h.permits),
        _ => 0,
    }
}

pub(crate) fn actions(w: &World, s: &State, out: &mut Vec<Action>) {
    for o in 0..w.owners as u8 {
        if waiting(s, o).is_some() {
            out.push(Action::Close { owner: o });
            continue;
        }
        for (k, kind) in w.keys.iter().enumerate() {
            let key = &s.keys[k];
            let value = live(key);
            for &want in kind.wants() {
                let most = if let Want::Permits { .. } = want {
                    CAPACITY
                } else {
                    MAX_COUNT
                };
                if count(&value, owner(o), want) >= most {
                    continue;
                }
                for &opts in &w.options {
                    if opts.fit(want) && !(opts.fence && key.counter >= w.max_token) {
                        let (owner, key) = (o, k as u8);
                        out.push(Action::Acquire {
                            owner,
                            key,
                            want,
                            opts,
                        });
                    }
                }
            }
            if rules::holds(&value, owner(o)) {
                out.push(Action::Release {
                    owner: o,
                    key: k as u8,
                });
                out.push(Action::Renew {
                    owner: o,
                    key: k as u8,
                });
            }
        }
        if s.keys.iter().any(|k| k.bound.iter().any(|b| b.0 == o)) {
            out.push(Action::Close { owner: o });
        }
    }
    if next_instant(s).is_some() {
        out.push(Action::Elapse);
    }
    for (k, key) in s.keys.iter().enumerate() {
        if key.dirty {
            out.push(Action::Wake { key: k as u8 });
        }
        for waiter in &key.queue {
            if waiter.opts.wait {
                let (owner, key) = (waiter.owner, k as u8);
                out.push(Action::TimeOut { owner, key });
            }
        }
        if w.deletes && key.value != LockValue::Free {
            out.push(Action::Delete { key: k as u8 });
        }
    }
    let anything = |k: &Key| k.value != LockValue::Free || k.delay.is_some() || k.counter > 0;
    if w.deletes && s.keys.iter().any(anything) {
        out.push(Action::Flush);
    }
}

pub(crate) fn apply(w: &World, s: &mut State, action: Action) {
    match action {
        Action::Acquire {
            owner: o,
            key: k,
            want,
            opts,
        } => acquire(w, s, o, k as usize, want, opts),
        Action::Release { owner: o, key: k } => unit(w, s, k as usize, |w, key, u| {
            let mode = match &key.value {
                LockValue::ReadWrite(rw) => Some(match rw.holders.get(owner(o)) {
                    Some(h) if h.write > 0 => Mode::Write,
                    _ => Mode::Read,
                }),
                _ => None,
            };
            let released = rules::release(&mut key.value, owner(o), mode, None);
            if let Ok(Released::Last | Released::Decremented) = released {
                serve_queue(w, key, u);
            }
            if released == Ok(Released::Last) && !rules::holds(&key.value, owner(o)) {
                key.bound.retain(|b| b.0 != o);
            }
        }),
        Action::Renew { owner: o, key: k } => unit(w, s, k as usize, |_, key, _| {
            if rules::renew(&mut key.value, owner(o), LEASE, 0) == Ok(true) {
                key.cuts.retain(|c| c.0 != o);
            }
        }),
        Action::Elapse => elapse(s),
        Action::Wake { key: k } => wake(w, s, k as usize),
        Action::TimeOut { owner: o, key: k } => {
            s.keys[k as usize].queue.retain(|wt| wt.owner != o);
            wake(w, s, k as usize);
        }
        Action::Close { owner: o } => close(w, s, o),
        Action::Delete { key: k } => {
            let key = &mut s.keys[k as usize];
            key.value = LockValue::Free;
            key.dirty |= !key.queue.is_empty();
        }
        Action::Flush => {
            for key in &mut s.keys {
                let queue = std::mem::take(&mut key.queue);
                let bound = std::mem::take(&mut key.bound);
                *key = Key {
                    dirty: !queue.is_empty(),
                    queue,
                    bound,
                    ..Key::default()
                };
            }
        }
    }
}

/// What one unit of work collects: the LOCKDELAY a grant asked for, a step property broken.
#[derive(Default)]
struct Unit {
    asked: Option<(u8, i64)>,
    broken: Option<&'static str>,
}

/// One unit of work on key `k` (`engine::work::unit_of_work`).
fn unit<R>(
    w: &World,
    s: &mut State,
    k: usize,
    step: impl FnOnce(&World, &mut Key, &mut Unit) -> R,
) -> R {
    let key = &mut s.keys[k];
    expire(key);
    rules::prune_lapsed(&mut key.value, 0);
    let mut u = Unit::default();
    serve_queue(w, key, &mut u);
    let result = step(w, key, &mut u);
    let asked = u.asked.map(|(o, ms)| (owner(o), ms));
    key.delay = delay::next(key.delay.as_ref(), asked, &key.value, 0);
    key.dirty = false;
    s.broken = s.broken.or(u.broken);
    result
}

/// A wake-up of key `k` (`engine::fire::wake_key`): a unit of work while clients wait.
fn wake(w: &World, s: &mut State, k: usize) {
    if s.keys[k].queue.is_empty() {
        s.keys[k].dirty = false;
        return;
    }
    unit(w, s, k, |_, _, _| ());
}

fn ask(o: u8, want: Want, fence: bool) -> Terms<&'static [u8]> {
    Terms {
        fence,
        ..Terms::new(owner(o), want, LEASE)
    }
}

/// Serves the queue of `key` (`engine::work::serve`): the requests served are answered and
/// leave it; each grant has its effects.
fn serve_queue(w: &World, key: &mut Key, u: &mut Unit) {
    if key.queue.is_empty() {
        return;
    }
    let asks: Vec<Terms<&[u8]>> = key
        .queue
        .iter()
        .map(|wt| ask(wt.owner, wt.want, wt.opts.fence))
        .collect();
    let counter = &mut key.counter;
    let draw = |advance: bool| {
        *counter += i64::from(advance);
        Ok(*counter)
    };
    let served = broken::serve(w, &mut key.value, key.delay.as_ref(), &asks, draw);
    // Fairness: the requests served are the first ones of the queue.
    if served.iter().enumerate().any(|(n, (i, _))| n != *i) {
        u.broken = u.broken.or(Some(names::FAIRNESS));
    }
    let waiters: Vec<Waiter> = served.iter().map(|(i, _)| key.queue[*i]).collect();
    for (i, _) in served.iter().rev() {
        key.queue.remove(*i);
    }
    for (waiter, (_, outcome)) in waiters.into_iter().zip(served) {
        if let Ok(granted) = outcome {
            on_grant(key, u, waiter, granted);
        }
    }
}

/// What a grant means beyond the lock's value (`engine::work::on_grant`): the LOCKDELAY it
/// asked for, its BIND or a binding left from an earlier hold undone; and the fencing
/// property, checked on every token an exclusive hold is given.
fn on_grant(key: &mut Key, u: &mut Unit, waiter: Waiter, granted: Granted) {
    let Waiter {
        owner: o,
        want,
        opts,
    } = waiter;
    if opts.lock_delay {
        u.asked = Some((o, DELAY));
    }
    if opts.bind {
        key.bound.retain(|b| b.0 != o);
        key.bound.push((o, GRACE));
        key.bound.sort();
    } else if !granted.held_before {
        key.bound.retain(|b| b.0 != o);
    }
    key.cuts.retain(|c| c.0 != o);
    if let (Want::Exclusive | Want::Write, Some(token)) = (want, granted.token) {
        let above = if granted.fresh {
            token > key.last_token
        } else {
            token >= key.last_token
        };
        if !above {
            u.broken = u.broken.or(Some(names::FENCING));
        }
        key.last_token = key.last_token.max(token);
    }
}

fn acquire(w: &World, s: &mut State, o: u8, k: usize, want: Want, opts: Opts) {
    let must_wait = unit(w, s, k, |w, key, u| {
        let queue_ahead = !key.queue.is_empty();
        let counter = &mut key.counter;
        let draw = |advance: bool| {
            *counter += i64::from(advance);
            Ok(*counter)
        };
        let a = ask(o, want, opts.fence);
        match broken::turn(w, &mut key.value, key.delay.as_ref(), &a, queue_ahead, draw) {
            Ok(Some(granted)) => {
                // Fairness: only a holder's reentrant request passes the queue, never a
                // semaphore's (docs/COMMANDS.md).
                let permits = matches!(want, Want::Permits { .. });
                if queue_ahead && (!granted.held_before || permits) {
                    u.broken = u.broken.or(Some(names::FAIRNESS));
                }
                let waiter = Waiter {
                    owner: o,
                    want,
                    opts,
                };
                on_grant(key, u, waiter, granted);
                false
            }
            Ok(None) => opts.wait,
            Err(_) => false,
        }
    });
    if !must_wait {
        return;
    }
    // Before it queues: the cycle it would close, by the rule and by the oracle.
    let found = cycle(w, s, o, k, want);
    if found != props::closes_a_cycle(s, o, k, want) {
        s.broken = s.broken.or(Some(names::DEADLOCK));
    }
    if !found {
        s.keys[k].queue.push(Waiter {
            owner: o,
            want,
            opts,
        });
    }
}

/// Whether `deadlock::cycle_through` answers DEADLOCK to `o`'s request `want` on key `k`.
fn cycle(w: &World, s: &State, o: u8, k: usize, want: Want) -> bool {
    let wait_of = |k: usize, o: u8, want: Want, ahead: &[Waiter]| {
        let ahead = ahead.iter().map(|a| (owner(a.owner), a.want));
        Wait::of(NAMES[k], &s.keys[k].value, owner(o), want, ahead, 0)
    };
    let first = wait_of(k, o, want, &s.keys[k].queue);
    if first.is_empty() {
        return false;
    }
    let waits_of = |other: &Vec<u8>| -> Vec<Wait> {
        let mut waits = vec![];
        for (k, key) in s.keys.iter().enumerate() {
            for (i, wt) in key.queue.iter().enumerate() {
                if owner(wt.owner) == other.as_slice() {
                    waits.push(broken::wait(
                        w,
                        wait_of(k, wt.owner, wt.want, &key.queue[..i]),
                    ));
                }
            }
        }
        waits
    };
    deadlock::cycle_through(owner(o), first, waits_of).is_some()
}

/// `owner`'s connection closes (`engine::blocked::DepartingClients`, `engine::bind`): its
/// waiting client leaves (a head leaving marks the key), then each hold bound to it has its
/// lease cut to the grace, in a unit of work of its own.
fn close(w: &World, s: &mut State, o: u8) {
    for key in &mut s.keys {
        if let Some(i) = key.queue.iter().position(|wt| wt.owner == o) {
            key.queue.remove(i);
            key.dirty |= i == 0 && !key.queue.is_empty();
        }
    }
    for k in 0..s.keys.len() {
        let Some(&(_, grace)) = s.keys[k].bound.iter().find(|b| b.0 == o) else {
            continue;
        };
        s.keys[k].bound.retain(|b| b.0 != o);
        unit(w, s, k, |w, key, _| {
            broken::cut_lease(w, &mut key.value, owner(o), grace);
            if rules::holds(&key.value, owner(o)) {
                key.cuts.retain(|c| c.0 != o);
                key.cuts.push((o, grace));
                key.cuts.sort();
            }
        });
    }
}

/// The next instant at which something changes by itself: a lease, a lock-delay, a cut's
/// deadline.
fn next_instant(s: &State) -> Option<i64> {
    let mut times = vec![];
    for key in &s.keys {
        match &key.value {
            LockValue::Exclusive(x) => times.extend(x.expire_at),
            LockValue::ReadWrite(rw) => times.extend(rw.holders.values().map(|h| h.deadline)),
            LockValue::Semaphore(sem) => times.extend(sem.holders.values().map(|h| h.deadline)),
            _ => {}
        }
        if let Some(d) = &key.delay {
            times.extend([d.until, d.expire_at()]);
        }
        times.extend(key.cuts.iter().map(|c| c.1));
    }
    times.into_iter().filter(|t| *t >= 0).min()
}

/// Time passes to just beyond the next instant; every time is shifted so that now is 0 again,
/// and what passed long ago is clamped (it only compares as "before now").
fn elapse(s: &mut State) {
    let Some(at) = next_instant(s) else {
        return;
    };
    let by = at + 1;
    let shift = |t: &mut i64| *t = (*t - by).max(-1);
    for key in &mut s.keys {
        match &mut key.value {
            LockValue::Exclusive(x) => {
                if let Some(t) = x.expire_at.as_mut() {
                    *t -= by;
                }
            }
            LockValue::ReadWrite(rw) => {
                rw.holders.values_mut().for_each(|h| shift(&mut h.deadline))
            }
            LockValue::Semaphore(sem) => sem
                .holders
                .values_mut()
                .for_each(|h| shift(&mut h.deadline)),
            _ => {}
        }
        if let Some(d) = key.delay.as_mut() {
            d.until -= by;
        }
        expire(key);
        let value = live(key);
        key.cuts
            .retain(|c| c.1 >= by || rules::holds(&value, owner(c.0)));
        key.cuts.iter_mut().for_each(|c| shift(&mut c.1));
        // The engine's lease timer (and the delay's end) wakes a key that clients wait on.
        key.dirty |= !key.queue.is_empty();
    }
}
