//! Deadlock detection's search, over a snapshot of who waits for whom: the wait a request
//! would add (the holders blocking it and the conflicting requests queued ahead,
//! [`crate::waits`]), the waits of the owners those wait for, and so on; then which of them
//! can never proceed. If the requester is among them, on a cycle back to itself, the request is
//! answered `DEADLOCK ...` instead of queueing. The module's engine supplies the snapshot (its
//! queues and the keys on the walked paths); the model checker (`model/`) supplies its own.
//!
//! An owner is stuck when one of its waits is stuck; a wait is stuck when one of the owners
//! it needs gone (`all`) is stuck, or when every holder of a full semaphore (`any`: one
//! leaving may make room) is. "Stuck" is the largest set closed under these rules: start
//! from every owner met, drop those with a way out, until nothing changes.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::model::{LockValue, Owner, Want};
use crate::waits::{blockers, queued_conflict};

/// At most this many waiting owners are examined for one request (beyond, no answer).
pub const MAX_OWNERS: usize = 10_000;

/// One wait of an owner: on `key`, for the owners in `all` (each `true` when it is a request
/// queued ahead rather than a holder) or for any one of `any`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub key: Vec<u8>,
    pub all: Vec<(Owner, bool)>,
    pub any: Vec<Owner>,
}

impl Wait {
    /// The wait of `owner`'s request `want` on `key` (holding `value`), queued behind `ahead`
    /// (the requests ahead of it, head first, as owner and request).
    pub fn of<'w>(
        key: &[u8],
        value: &LockValue,
        owner: &[u8],
        want: Want,
        ahead: impl DoubleEndedIterator<Item = (&'w [u8], Want)>,
        now: i64,
    ) -> Wait {
        let b = blockers(value, owner, want, now);
        // The conflicting requests ahead, nearest first, up to the first that is not a READ:
        // that one conflicts with everything ahead of it and waits for it in turn, so the rest
        // are reached through it (a queue of n waiters is n edges, not n²/2).
        let mut queued = vec![];
        for (other, other_want) in ahead.rev() {
            if other != owner && queued_conflict(other_want, want) {
                queued.push((other.to_vec(), true));
                if other_want != Want::Read {
                    break;
                }
            }
        }
        Wait {
            key: key.to_vec(),
            all: b
                .all
                .into_iter()
                .map(|o| (o, false))
                .chain(queued)
                .collect(),
            any: b.any,
        }
    }

    /// Waits for nobody (the request would be granted, or refused).
    pub fn is_empty(&self) -> bool {
        self.all.is_empty() && self.any.is_empty()
    }

    fn stuck(&self, stuck: &HashSet<Owner>) -> bool {
        self.all.iter().any(|(o, _)| stuck.contains(o))
            || (!self.any.is_empty() && self.any.iter().all(|o| stuck.contains(o)))
    }

    /// The owners this wait needs gone that are stuck, each with whether it is queued ahead.
    fn stuck_on<'w>(
        &'w self,
        stuck: &'w HashSet<Owner>,
    ) -> impl Iterator<Item = (&'w Owner, bool)> {
        let any_stuck = self.stuck(stuck);
        self.all
            .iter()
            .map(|(o, behind)| (o, *behind))
            .chain(
                self.any
                    .iter()
                    .map(|o| (o, false))
                    .filter(move |_| any_stuck),
            )
            .filter(|(o, _)| stuck.contains(*o))
    }
}

/// Who waits for whom beyond the request's own wait, read only when a request would queue:
/// the module's registry and the keys on the walked paths, or the model's own state.
/// `here` is the lock asked, as it stands (the caller's copy, which its store may not show
/// yet).
pub trait WaitsFor {
    /// Whether anybody can wait for `owner`: it waits itself, or holds a key that clients
    /// wait on. `false` means no cycle can close through it (checked before any walk).
    fn waited_for(&mut self, owner: &[u8], here: &LockValue) -> bool;
    /// The waits of every request `owner` has queued (empty when it waits for nothing).
    fn waits_of(&mut self, owner: &[u8], here: &LockValue) -> Vec<Wait>;
}

/// The cycle that `requester`'s new wait `first` would close, as the text after `DEADLOCK `;
/// `None` when there is none, or when more than [`MAX_OWNERS`] waiting owners would have to
/// be examined. `waits_of(owner)`: the waits of every request `owner` has queued (empty when
/// it waits for nothing), asked once per owner met.
pub fn cycle_through(
    requester: &[u8],
    first: Wait,
    waits_of: impl FnMut(&Owner) -> Vec<Wait>,
) -> Option<String> {
    let graph = collect(requester, first, waits_of)?;
    let stuck = stuck_owners(&graph);
    if !stuck.contains(requester) {
        return None;
    }
    cycle(&graph, &stuck, requester)
}

/// Every waiting owner reachable from the requester's wait, with its waits (the requester:
/// only the new one). `None` when there are too many to examine.
fn collect(
    requester: &[u8],
    first: Wait,
    mut waits_of: impl FnMut(&Owner) -> Vec<Wait>,
) -> Option<HashMap<Owner, Vec<Wait>>> {
    let mut graph: HashMap<Owner, Vec<Wait>> = HashMap::new();
    let mut todo: VecDeque<Owner> = VecDeque::new();
    let mut seen: HashSet<Owner> = HashSet::from([requester.to_vec()]);
    let mut visit = |w: &Wait, todo: &mut VecDeque<Owner>| {
        for o in w.all.iter().map(|(o, _)| o).chain(&w.any) {
            if seen.insert(o.clone()) {
                todo.push_back(o.clone());
            }
        }
    };
    visit(&first, &mut todo);
    graph.insert(requester.to_vec(), vec![first]);
    while let Some(owner) = todo.pop_front() {
        let waits = waits_of(&owner);
        if waits.is_empty() {
            continue; // waits for nothing: not stuck
        }
        if graph.len() >= MAX_OWNERS {
            return None;
        }
        for w in &waits {
            visit(w, &mut todo);
        }
        graph.insert(owner, waits);
    }
    Some(graph)
}

/// The owners that can never proceed: the largest set in which every owner has a stuck wait.
fn stuck_owners(graph: &HashMap<Owner, Vec<Wait>>) -> HashSet<Owner> {
    let mut stuck: HashSet<Owner> = graph.keys().cloned().collect();
    loop {
        let free: Vec<Owner> = stuck
            .iter()
            .filter(|o| !graph[*o].iter().any(|w| w.stuck(&stuck)))
            .cloned()
            .collect();
        if free.is_empty() {
            return stuck;
        }
        for o in free {
            stuck.remove(&o);
        }
    }
}

/// A path of stuck waits from the requester back to itself, as the `DEADLOCK` text.
fn cycle(
    graph: &HashMap<Owner, Vec<Wait>>,
    stuck: &HashSet<Owner>,
    start: &[u8],
) -> Option<String> {
    // Depth-first, iteratively: each frame is an owner and its steps not tried yet (`key`,
    // `blocker`, `behind`), in the order the waits list them.
    type Steps<'g> = Vec<(&'g [u8], &'g Owner, bool)>;
    let steps_of = |owner: &[u8]| -> Steps {
        let mut steps: Steps = graph[owner]
            .iter()
            .flat_map(|w| w.stuck_on(stuck).map(|(b, behind)| (&w.key[..], b, behind)))
            .collect();
        steps.reverse(); // popped from the end
        steps
    };
    let mut visited: HashSet<&[u8]> = HashSet::from([start]);
    let mut path: Vec<(&[u8], &[u8], &Owner, bool)> = vec![];
    let mut frames: Vec<(&[u8], Steps)> = vec![(start, steps_of(start))];
    while let Some((owner, steps)) = frames.last_mut() {
        let owner: &[u8] = owner;
        let Some((key, blocker, behind)) = steps.pop() else {
            frames.pop();
            path.pop();
            continue;
        };
        if blocker.as_slice() == start {
            path.push((owner, key, blocker, behind));
            return Some(describe(&path));
        }
        if visited.insert(blocker.as_slice()) {
            path.push((owner, key, blocker, behind));
            frames.push((blocker.as_slice(), steps_of(blocker)));
        }
    }
    None
}

fn describe(path: &[(&[u8], &[u8], &Owner, bool)]) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    path.iter()
        .map(|(waiter, key, blocker, behind)| {
            let how = if *behind { "behind" } else { "held by" };
            format!(
                "{} waits for {} {how} {}",
                text(waiter),
                text(key),
                text(blocker)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::acquire;

    fn held(owner: &[u8]) -> LockValue {
        let mut v = LockValue::Free;
        acquire(&mut v, owner, Want::Exclusive, 100, 0, false);
        v
    }

    #[test]
    fn a_cycle_through_the_requester_and_none_without_it() {
        // b holds k2 and waits for k1 (held by a); a now asks for k2.
        let k1 = held(b"a");
        let k2 = held(b"b");
        let none = std::iter::empty();
        let b_waits = Wait::of(b"k1", &k1, b"b", Want::Exclusive, none.clone(), 0);
        let first = Wait::of(b"k2", &k2, b"a", Want::Exclusive, none, 0);
        let waits_of = |o: &Owner| match o.as_slice() {
            b"b" => vec![b_waits.clone()],
            _ => vec![],
        };
        assert_eq!(
            cycle_through(b"a", first.clone(), waits_of).as_deref(),
            Some("a waits for k2 held by b, b waits for k1 held by a")
        );
        assert_eq!(
            cycle_through(b"a", first, |_| vec![]),
            None,
            "b waits for nothing"
        );
    }
}
