//! One request's turn at a lock, and whom a key's queue serves: the queue policy of
//! docs/COMMANDS.md as pure functions over plain data. The module's engine keeps the blocked
//! clients and their timers, and asks these who is granted, in which order, and with which
//! fencing token; the model checker (`model/`) drives the same functions.

use crate::deadlock::{self, Wait, WaitsFor};
use crate::delay::{self, Delay};
use crate::error::LockError;
use crate::model::{LockValue, Want};
use crate::rules::{self, Grant};
use crate::terms::Terms;

/// A granted turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    /// The owner's hold count after the grant (of the mode asked; permits: its total).
    pub count: i64,
    /// The fencing token, when FENCE was asked.
    pub token: Option<i64>,
    /// The owner held something on the lock before this grant (any mode, any permits).
    pub held_before: bool,
    /// The owner held nothing of what it asked for before (a first grant, not a reentrant
    /// one; for permits: exactly the count it just got).
    pub fresh: bool,
}

impl Granted {
    /// A grant of `count` (the owner's hold count after it) for `want`.
    pub fn new(want: Want, count: i64, token: Option<i64>, held_before: bool) -> Self {
        let fresh = match want {
            Want::Permits { count: asked, .. } => count == asked,
            _ => count == 1,
        };
        Granted {
            count,
            token,
            held_before,
            fresh,
        }
    }
}

/// A lock as a request finds it: its key, its value, its lock-delay as stored, and the
/// requests queued on it, head first (each as owner and request; `None`: nobody waits).
pub struct Lock<'l, Q> {
    pub key: &'l [u8],
    pub value: &'l mut LockValue,
    pub delay: Option<&'l Delay>,
    pub queue: Option<Q>,
}

/// What a request for a hold comes to ([`admit`]). A refusal is the error, `DEADLOCK`
/// included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// Granted now.
    Now(Granted),
    /// It must wait, and may: it joins the tail of the queue.
    Queue,
    /// Not granted, and it may not wait (no WAIT, or a client that may not block).
    NotNow,
}

/// The whole decision on a command's request for a hold (the wait policy of
/// docs/COMMANDS.md): its [`turn`] behind the queue; if it must wait and `may_wait()`, the
/// cycle it would close by queueing (`waits`, read only then: the requester waited for at
/// all, then the waits beyond its own) refuses it `DEADLOCK`; else it queues. `draw`: the
/// fencing counter, as for [`turn`]. Nothing of `lock` changes unless it is granted.
pub fn admit<'q, O: AsRef<[u8]>>(
    lock: Lock<'_, impl DoubleEndedIterator<Item = (&'q [u8], Want)>>,
    ask: &Terms<O>,
    now: i64,
    may_wait: impl FnOnce() -> bool,
    waits: &mut dyn WaitsFor,
    draw: impl FnOnce(bool) -> Result<i64, LockError>,
) -> Result<Admitted, LockError> {
    let Lock {
        key,
        value,
        delay,
        queue,
    } = lock;
    let queue_ahead = queue.is_some();
    if let Some(granted) = turn(value, delay, ask, now, queue_ahead, draw)? {
        return Ok(Admitted::Now(granted));
    }
    if !may_wait() {
        return Ok(Admitted::NotNow);
    }
    // Nobody can wait for an owner that neither waits nor holds a key with a queue: no cycle
    // (the common case, answered without walking anything).
    let requester = ask.owner();
    if !waits.waited_for(requester, value) {
        return Ok(Admitted::Queue);
    }
    let first = Wait::of(
        key,
        value,
        requester,
        ask.want,
        queue.into_iter().flatten(),
        now,
    );
    if first.is_empty() {
        return Ok(Admitted::Queue);
    }
    match deadlock::cycle_through(requester, first, |owner| waits.waits_of(owner, value)) {
        Some(cycle) => Err(LockError::Deadlock(cycle)),
        None => Ok(Admitted::Queue),
    }
}

/// One turn of `ask` at the lock `value` (a command's request, or the head of the queue's
/// with `queue_ahead` false): during a running lock-delay (`delay`) nobody is granted but a
/// holder re-entering; then the grant rules (`rules::acquire`); then the fencing token from
/// the key's counter, `draw(advance)` its next value (`true`) or its current one. `Ok(None)`:
/// it must wait. An error, the counter's included, leaves `value` as it was.
#[inline]
pub fn turn<O: AsRef<[u8]>>(
    value: &mut LockValue,
    delay: Option<&Delay>,
    ask: &Terms<O>,
    now: i64,
    queue_ahead: bool,
    draw: impl FnOnce(bool) -> Result<i64, LockError>,
) -> Result<Option<Granted>, LockError> {
    let held_before = rules::holds(value, ask.owner());
    if delay::running_until(delay, value, now).is_some() && !held_before {
        return Ok(None);
    }
    // The counter can only fail when a fence is asked for or the grant is fresh, never on an
    // exclusive lock re-entered without FENCE: skip the copy in that (hot) case.
    let undo = (ask.fence || !matches!(value, LockValue::Exclusive(_))).then(|| value.clone());
    match rules::acquire(value, ask.owner(), ask.want, ask.lease_ms, now, queue_ahead) {
        Grant::Granted {
            count,
            fresh_exclusive,
        } => match fence(value, ask.want, fresh_exclusive, ask.fence, draw) {
            Ok(token) => Ok(Some(Granted::new(ask.want, count, token, held_before))),
            Err(e) => {
                if let Some(before) = undo {
                    *value = before;
                }
                Err(e)
            }
        },
        Grant::Busy => Ok(None),
        Grant::Refused(e) => Err(e),
    }
}

/// The fencing token of a grant, kept in the lock's own hash for the length of the hold and
/// drawn from the key's counter (docs/BEHAVIOUR.md, *Fencing tokens*). `Ok(Some(token))` when
/// FENCE was asked.
///
/// A fresh exclusive hold without FENCE drops the previous holder's token and draws nothing;
/// one with FENCE draws the counter's next value, above every token given before. A reentrant
/// FENCE returns the hold's token, drawing it first when the hold was taken without FENCE;
/// READ returns the hold's token or else the counter's current value, without advancing it.
/// So no lock needs to remember that it was ever fenced.
fn fence(
    value: &mut LockValue,
    want: Want,
    fresh_exclusive: bool,
    want_fence: bool,
    draw: impl FnOnce(bool) -> Result<i64, LockError>,
) -> Result<Option<i64>, LockError> {
    if fresh_exclusive {
        value.set_fence(None);
    }
    if !want_fence {
        return Ok(None);
    }
    if let Some(token) = value.fence() {
        return Ok(Some(token));
    }
    let advance = want != Want::Read;
    let token = draw(advance)?;
    if advance {
        value.set_fence(Some(token));
    }
    Ok(Some(token))
}

/// Serves a key's queue (`queue`: the waiting requests, head first): offers the head its turn
/// as the head (nobody ahead) and, once it is granted or refused, the next one; stops at the
/// first that must keep waiting. So grants follow arrival order (FIFO), consecutive readers
/// and consecutive permit requests that fit are granted together, and a head that does not
/// fit holds back everyone behind it (a writer at the head is granted alone; no barging, so a
/// large request is never starved). Returns the outcome of each request served, in queue
/// order: they are the first ones of the queue, to be answered and taken out of it.
pub fn serve<'q, O: AsRef<[u8]> + 'q>(
    value: &mut LockValue,
    delay: Option<&Delay>,
    now: i64,
    queue: impl IntoIterator<Item = &'q Terms<O>>,
    mut draw: impl FnMut(bool) -> Result<i64, LockError>,
) -> Vec<Result<Granted, LockError>> {
    let mut served = vec![];
    for ask in queue {
        match turn(value, delay, ask, now, false, &mut draw) {
            Ok(None) => break,
            Ok(Some(granted)) => served.push(Ok(granted)),
            Err(e) => served.push(Err(e)),
        }
    }
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(owner: &[u8], want: Want) -> Terms<&[u8]> {
        Terms::new(owner, want, 100)
    }

    fn no_counter(_: bool) -> Result<i64, LockError> {
        unreachable!("no FENCE asked")
    }

    #[test]
    fn readers_together_a_writer_alone_and_nobody_past_a_busy_head() {
        let mut v = LockValue::Free;
        let queue = [
            ask(b"r1", Want::Read),
            ask(b"r2", Want::Read),
            ask(b"w", Want::Write),
            ask(b"r3", Want::Read),
        ];
        let served = serve(&mut v, None, 0, &queue, no_counter);
        assert_eq!(
            served.len(),
            2,
            "the writer waits for the readers; r3 behind it"
        );
        assert!(rules::holds(&v, b"r1") && rules::holds(&v, b"r2"));
        assert!(!rules::holds(&v, b"r3"));
        // A refused head is answered and the next one served.
        let mut x = LockValue::Free;
        let queue = [ask(b"a", Want::Read), ask(b"b", Want::Exclusive)];
        assert!(matches!(
            serve(&mut x, None, 0, &queue, no_counter)[..],
            [Ok(_), Err(LockError::WrongType)]
        ));
        // A semaphore head that does not fit holds back a smaller request behind it.
        let p = |count| Want::Permits { capacity: 2, count };
        let mut sem = LockValue::Free;
        rules::acquire(&mut sem, b"h", p(1), 100, 0, false);
        let queue = [ask(b"big", p(2)), ask(b"small", p(1))];
        assert!(serve(&mut sem, None, 0, &queue, no_counter).is_empty());
    }

    /// A snapshot in which `b` waits for `k2` (its value `k2`); it counts what is read.
    struct BWaitsForK2 {
        k2: LockValue,
        reads: usize,
    }

    impl WaitsFor for BWaitsForK2 {
        fn waited_for(&mut self, owner: &[u8], _: &LockValue) -> bool {
            self.reads += 1;
            owner == b"a"
        }
        fn waits_of(&mut self, owner: &[u8], _: &LockValue) -> Vec<Wait> {
            self.reads += 1;
            let none = std::iter::empty();
            match owner {
                b"b" => vec![Wait::of(b"k2", &self.k2, b"b", Want::Exclusive, none, 0)],
                _ => vec![],
            }
        }
    }

    #[test]
    fn admitted_now_queued_refused_or_not_now() {
        let held = |owner: &[u8]| {
            let mut v = LockValue::Free;
            rules::acquire(&mut v, owner, Want::Exclusive, 100, 0, false);
            v
        };
        type Queue<'q> = Vec<(&'q [u8], Want)>;
        // `owner` asks `k1` (holding `value`, `queue` waiting on it), with WAIT or without.
        fn decide(
            value: &mut LockValue,
            queue: Queue,
            owner: &[u8],
            wait: bool,
            snapshot: &mut BWaitsForK2,
        ) -> Result<Admitted, LockError> {
            let lock = Lock {
                key: b"k1",
                value,
                delay: None,
                queue: (!queue.is_empty()).then(|| queue.into_iter()),
            };
            let ask = ask(owner, Want::Exclusive);
            admit(lock, &ask, 0, || wait, snapshot, no_counter)
        }
        let mut snapshot = BWaitsForK2 {
            k2: held(b"a"),
            reads: 0,
        };
        // Free: granted, nothing read.
        let now = decide(&mut LockValue::Free, vec![], b"a", true, &mut snapshot);
        assert!(matches!(now, Ok(Admitted::Now(g)) if g.fresh));
        // Behind a queue: not granted; without WAIT not queued, and nothing read.
        let mut free = LockValue::Free;
        let queue = vec![(&b"c"[..], Want::Exclusive)];
        let busy = decide(&mut free, queue, b"a", false, &mut snapshot);
        assert_eq!(busy, Ok(Admitted::NotNow));
        assert_eq!(free, LockValue::Free);
        assert_eq!(snapshot.reads, 0);
        // Held by b, which waits for k2 held by a: DEADLOCK.
        let mut k1 = held(b"b");
        assert_eq!(
            decide(&mut k1, vec![], b"a", true, &mut snapshot),
            Err(LockError::Deadlock(
                "a waits for k1 held by b, b waits for k2 held by a".into()
            ))
        );
        // c is waited for by nobody: it queues, the walk not begun.
        let reads = snapshot.reads;
        let queued = decide(&mut k1, vec![], b"c", true, &mut snapshot);
        assert_eq!(queued, Ok(Admitted::Queue));
        assert_eq!(snapshot.reads, reads + 1, "only whether c is waited for");
    }

    #[test]
    fn a_running_delay_holds_back_all_but_the_holder() {
        let mut v = LockValue::Free;
        let d = Delay {
            owner: b"gone".to_vec(),
            until: 100,
            delay_ms: 50,
            begun: false,
        };
        assert_eq!(
            turn(
                &mut v,
                Some(&d),
                &ask(b"a", Want::Exclusive),
                120,
                false,
                no_counter
            ),
            Ok(None)
        );
        let granted = turn(
            &mut v,
            Some(&d),
            &ask(b"a", Want::Exclusive),
            151,
            false,
            no_counter,
        );
        assert_eq!(granted.unwrap().unwrap().count, 1);
    }

    #[test]
    fn tokens_drawn_reused_and_undone() {
        let mut counter = 0;
        let mut draw = |advance: bool| {
            counter += i64::from(advance);
            Ok(counter)
        };
        let fenced = |owner| Terms {
            fence: true,
            ..ask(owner, Want::Write)
        };
        let mut v = LockValue::Free;
        let first = turn(&mut v, None, &fenced(b"a"), 0, false, &mut draw);
        assert_eq!(first.unwrap().unwrap().token, Some(1));
        let again = turn(&mut v, None, &fenced(b"a"), 0, false, &mut draw);
        assert_eq!(
            again.unwrap().unwrap().token,
            Some(1),
            "reentrant: the hold's token"
        );
        let read = Terms {
            fence: true,
            ..ask(b"a", Want::Read)
        };
        assert_eq!(
            turn(&mut v, None, &read, 0, false, &mut draw)
                .unwrap()
                .unwrap()
                .token,
            Some(1)
        );
        // A counter that fails undoes the grant.
        let mut free = LockValue::Free;
        let broken = |_| Err(LockError::WrongType);
        assert_eq!(
            turn(&mut free, None, &fenced(b"b"), 0, false, broken),
            Err(LockError::WrongType)
        );
        assert_eq!(free, LockValue::Free);
    }
}
