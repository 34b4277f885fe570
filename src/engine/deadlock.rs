//! Deadlock detection: before a WAIT request queues, collect the owners it would wait for
//! (the holders blocking it and the conflicting requests queued ahead, `dlock_core::waits`),
//! the owners those wait for, and so on; then find which of them can never proceed. If the
//! requester is among them, on a cycle back to itself, the request is answered
//! `DEADLOCK ...` instead of queueing.
//!
//! An owner is stuck when one of its waits is stuck; a wait is stuck when one of the owners
//! it needs gone (`all`) is stuck, or when every holder of a full semaphore (`any`: one
//! leaving may make room) is. "Stuck" is the largest set closed under these rules: start
//! from every owner met, drop those with a way out, until nothing changes.
//!
//! Cost: only requests that are about to queue pay, and only for the keys on the walked
//! paths (the registry indexes where each owner waits; holders are read from those keys):
//! nothing depends on how many locks are held on the server.

use std::collections::{HashMap, HashSet, VecDeque};

use dlock_core::model::{LockValue, Owner, Want};
use dlock_core::rules;
use dlock_core::waits::{blockers, queued_conflict};

use crate::ffi::Ctx;

use super::queue::Waiter;
use super::registry::Registry;
use super::store::{LockKey, Open};

/// At most this many waiting owners are examined for one request (beyond, no answer).
const MAX_OWNERS: usize = 10_000;

/// The request about to queue, on its key already opened by the command.
pub struct AboutToQueue<'a> {
    pub db: i32,
    pub key: &'a [u8],
    pub value: &'a LockValue,
    pub owner: &'a [u8],
    pub want: Want,
}

/// One wait of an owner: on `key`, for the owners in `all` (each `true` when it is a request
/// queued ahead rather than a holder) or for any one of `any`.
struct Wait {
    key: Vec<u8>,
    all: Vec<(Owner, bool)>,
    any: Vec<Owner>,
}

impl Wait {
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

/// The cycle `req` would close if it queued, as the text after `DEADLOCK `; `None` when
/// there is none.
pub fn find(ctx: Ctx, reg: &Registry, req: &AboutToQueue, now: i64) -> Option<String> {
    // Nobody can wait for an owner that neither waits nor holds a key with a queue: no
    // cycle (the common case, checked without walking anything).
    let waited_for =
        !reg.places_of_owner(req.owner).is_empty() || holds_a_waited_key(ctx, reg, req);
    ctx.select_db(req.db);
    if !waited_for {
        return None;
    }
    let first = wait(
        req.key,
        req.value,
        req.owner,
        req.want,
        reg.queued_on(req.db, req.key),
        now,
    );
    if first.all.is_empty() && first.any.is_empty() {
        return None;
    }
    let graph = collect(ctx, reg, req, first, now);
    ctx.select_db(req.db);
    let graph = graph?;
    let stuck = stuck_owners(&graph);
    if !stuck.contains(req.owner) {
        return None;
    }
    cycle(&graph, &stuck, req.owner)
}

/// Whether the requester holds a key that clients wait on (costs one read per such key).
fn holds_a_waited_key(ctx: Ctx, reg: &Registry, req: &AboutToQueue) -> bool {
    reg.all_keys().into_iter().any(|(db, key)| {
        if db == req.db && key == req.key {
            return rules::holds(req.value, req.owner);
        }
        ctx.select_db(db);
        rules::holds(
            &LockKey::open(ctx, &key, Open::Read { name: None }).value,
            req.owner,
        )
    })
}

/// The wait of `owner`'s request `want` on `key`, queued behind `ahead`.
fn wait<'w>(
    key: &[u8],
    value: &LockValue,
    owner: &[u8],
    want: Want,
    ahead: impl DoubleEndedIterator<Item = &'w Waiter>,
    now: i64,
) -> Wait {
    let b = blockers(value, owner, want, now);
    // The conflicting requests ahead, nearest first, up to the first that is not a READ: that
    // one conflicts with everything ahead of it and waits for it in turn, so the rest are
    // reached through it (a queue of n waiters is n edges, not n²/2).
    let mut queued = vec![];
    for w in ahead.rev() {
        if w.request.owner != owner && queued_conflict(w.request.want, want) {
            queued.push((w.request.owner.clone(), true));
            if w.request.want != Want::Read {
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

/// Every waiting owner reachable from the requester's wait, with its waits (the requester:
/// only the new one). `None` when there are too many to examine.
fn collect(
    ctx: Ctx,
    reg: &Registry,
    req: &AboutToQueue,
    first: Wait,
    now: i64,
) -> Option<HashMap<Owner, Vec<Wait>>> {
    let mut graph: HashMap<Owner, Vec<Wait>> = HashMap::new();
    let mut todo: VecDeque<Owner> = VecDeque::new();
    let mut seen: HashSet<Owner> = HashSet::from([req.owner.to_vec()]);
    let mut visit = |w: &Wait, todo: &mut VecDeque<Owner>| {
        for o in w.all.iter().map(|(o, _)| o).chain(&w.any) {
            if seen.insert(o.clone()) {
                todo.push_back(o.clone());
            }
        }
    };
    visit(&first, &mut todo);
    graph.insert(req.owner.to_vec(), vec![first]);
    while let Some(owner) = todo.pop_front() {
        let places = reg.places_of_owner(&owner);
        if places.is_empty() {
            continue; // waits for nothing: not stuck
        }
        if graph.len() >= MAX_OWNERS {
            return None;
        }
        let mut waits = Vec::with_capacity(places.len());
        for place in places {
            let Some((w, ahead)) = reg.waiter_at(place) else {
                continue;
            };
            let value = if place.db == req.db && place.key == req.key {
                req.value.clone()
            } else {
                ctx.select_db(place.db);
                LockKey::open(ctx, &place.key, Open::Read { name: None }).value
            };
            let found = wait(&place.key, &value, &owner, w.request.want, ahead, now);
            visit(&found, &mut todo);
            waits.push(found);
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
