//! The model checker's runs: every property holds in every reachable state of each world
//! (`make test`: small worlds; `make test-long`, DLOCK_LONG=1: larger ones), and each
//! deliberately broken rule is caught with a counterexample path. Each run prints the states
//! it explored, its depth and its time.

use std::collections::BTreeSet;
use std::time::Instant;

use dlock_model::{Broken, Kind, World};
use stateright::{Checker, HasDiscoveries, Model};

fn long() -> bool {
    std::env::var_os("DLOCK_LONG").is_some()
}

/// Explores all of `world`, breadth-first, and fails on any property broken, with its path.
/// One thread keeps the order (and the depth printed) the same from run to run; the larger
/// worlds take two.
fn explore(name: &str, world: World, threads: usize) {
    let started = Instant::now();
    let checker = world.checker().threads(threads).spawn_bfs().join();
    println!(
        "{name}: {} states ({} distinct), depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker.assert_properties();
}

/// The worlds of `make test`: every option with two owners on one key (three on the
/// semaphore); three owners and two keys with fewer options (the state space grows with each
/// option a waiter may carry).
fn small_worlds() -> Vec<(&'static str, World)> {
    use dlock_model::Opts as O;
    use Kind::*;
    vec![
        ("2 owners, a lock", World::new(2, &[Lock])),
        ("2 owners, a read-write lock", World::new(2, &[ReadWrite])),
        ("3 owners, a semaphore of 2", World::new(3, &[Semaphore])),
        (
            "3 owners, a lock (WAIT, FENCE, BIND)",
            World::new(3, &[Lock]).options(&[O::NONE, O::WAIT, O::FENCE, O::BIND]),
        ),
        (
            "3 owners, a read-write lock (WAIT, FENCE, LOCKDELAY)",
            World::new(3, &[ReadWrite]).options(&[O::NONE, O::WAIT, O::FENCE, O::LOCK_DELAY]),
        ),
        (
            "2 owners, two locks (WAIT, FENCE)",
            World::new(2, &[Lock, Lock]).options(&[O::NONE, O::WAIT, O::FENCE]),
        ),
        (
            "2 owners, two locks (WAIT, LOCKDELAY)",
            World::new(2, &[Lock, Lock]).options(&[O::WAIT, O::LOCK_DELAY]),
        ),
        (
            "3 owners, two locks (WAIT)",
            World::new(3, &[Lock, Lock]).options(&[O::WAIT]),
        ),
        (
            "3 owners, a read-write lock and a lock (WAIT)",
            World::new(3, &[ReadWrite, Lock]).options(&[O::WAIT]),
        ),
        (
            "3 owners, a lock and a semaphore (WAIT)",
            World::new(3, &[Lock, Semaphore]).options(&[O::WAIT]),
        ),
    ]
}

/// The worlds `make test-long` adds (DLOCK_LONG=1, ~12 minutes): every option with three
/// owners, two keys with BIND and LOCKDELAY, three owners on two keys with FENCE. (Three
/// owners on a lock and a semaphore with BIND passed 5 minutes unfinished.)
fn large_worlds() -> Vec<(&'static str, World)> {
    use dlock_model::Opts as O;
    use Kind::*;
    vec![
        ("3 owners, a lock", World::new(3, &[Lock])),
        ("3 owners, a read-write lock", World::new(3, &[ReadWrite])),
        (
            "2 owners, two locks (WAIT, BIND, LOCKDELAY)",
            World::new(2, &[Lock, Lock]).options(&[O::WAIT, O::BIND, O::LOCK_DELAY]),
        ),
        (
            "3 owners, a read-write lock and a lock (WAIT, FENCE)",
            World::new(3, &[ReadWrite, Lock]).options(&[O::WAIT, O::FENCE]),
        ),
    ]
}

#[test]
fn every_property_holds_in_every_reachable_state() {
    let started = Instant::now();
    for (name, world) in small_worlds() {
        explore(name, world, 1);
    }
    if long() {
        for (name, world) in large_worlds() {
            explore(name, world, 2);
        }
    }
    println!("all worlds: {:.1?}", started.elapsed());
}

/// The smallest world in which `broken` can show.
fn world_for(broken: Broken) -> World {
    use Kind::*;
    let world = match broken {
        // A command's request and a queue's head compete only where the head cannot be
        // served: a writer waiting behind readers.
        Broken::IgnoreQueue | Broken::SkipBusyHead | Broken::OneGrantPerServe => {
            World::new(3, &[ReadWrite])
        }
        Broken::HoldersNotFollowed => World::new(2, &[Lock, Lock]),
        _ => World::new(2, &[Lock]),
    };
    world.with(broken)
}

/// The shortest path to a state that breaks `property` in `world`, with the states explored
/// to find it. Breadth-first with a growing depth bound: stateright keeps the last violation
/// it met before stopping, not the first, so each bound is searched whole.
fn shortest_counterexample(world: &World, property: &'static str) -> Option<(Vec<String>, usize)> {
    let mut explored = 0;
    for depth in 2..=16 {
        let until = HasDiscoveries::AnyOf(BTreeSet::from([property]));
        let checker = world
            .clone()
            .checker()
            .target_max_depth(depth)
            .finish_when(until)
            .spawn_bfs()
            .join();
        explored += checker.unique_state_count();
        if let Some(path) = checker.discovery(property) {
            let steps = path.into_actions();
            let steps = steps.iter().map(|a| world.format_action(a)).collect();
            return Some((steps, explored));
        }
    }
    None
}

#[test]
fn each_broken_rule_is_caught_with_a_counterexample() {
    let mut missed = vec![];
    for (broken, property) in Broken::ALL {
        let started = Instant::now();
        let world = world_for(broken);
        let Some((steps, explored)) = shortest_counterexample(&world, property) else {
            missed.push(format!("{broken:?} not caught by '{property}'"));
            continue;
        };
        println!(
            "{broken:?} caught by '{property}' ({explored} states explored, depth {}, {:.1?}): {}",
            steps.len(),
            started.elapsed(),
            steps.join(" -> ")
        );
    }
    assert!(missed.is_empty(), "{missed:?}");
}
