//! dlock's rules, model-checked (docs/DESIGN.md, *The safety argument*).
//!
//! A small world (a few owners, one or two keys, each a lock, a read-write lock or a
//! semaphore) is explored breadth-first by `stateright`: every interleaving of acquires (with
//! and without WAIT, FENCE, BIND, LOCKDELAY; reentrant ones too), renewals, releases, lease
//! expiry, connections closing, waits timing out, keys deleted or flushed, and the wake-ups
//! that serve a queue. Every step runs **dlock-core's own functions**, the ones the module
//! runs: `serve::turn` and `serve::serve` (lock-delay, grant rules, fencing token, whom a queue
//! serves), `rules::release`, `renew`, `cut_lease`, `prune_lapsed`, `delay::next`,
//! `deadlock::cycle_through`. What the model writes itself is the engine's shell around them
//! ([`step`]): the unit of work, the queue of blocked clients, the fencing counter, the
//! bindings, which events mark a key for a wake-up. The properties ([`props`]) are checked in
//! every reachable state; each has a deliberately broken rule ([`Broken`]) that the checker
//! must catch with a counterexample path.
//!
//! Time is abstracted to the instants that matter: a step [`Action::Elapse`] moves the clock
//! just past the next lease end, lock-delay end or cut deadline, and every time is kept
//! relative to now (now is always 0), so a world has finitely many states.

#![forbid(unsafe_code)]

mod broken;
mod live;
mod names;
pub mod props;
mod step;

use dlock_core::delay::Delay;
use dlock_core::model::{LockValue, Want};
use stateright::{Model, Property};

pub use broken::Broken;

/// A lease, in the model's time units (a grant's, a renewal's).
pub const LEASE: i64 = 2;
/// BIND's grace: shorter than the lease, so that a cut shortens it.
pub const GRACE: i64 = 1;
/// LOCKDELAY's delay.
pub const DELAY: i64 = 1;
/// A semaphore's capacity.
pub const CAPACITY: i64 = 2;
/// The most holds of one mode an owner takes on one key (reentrancy is bounded).
pub const MAX_COUNT: i64 = 2;

/// The owners' names, as the rules see them.
pub const OWNERS: [&[u8]; 3] = [b"a", b"b", b"c"];

/// What a key of the world is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Lock,
    ReadWrite,
    Semaphore,
}

impl Kind {
    /// The requests an owner may make on a key of this kind.
    pub fn wants(self) -> &'static [Want] {
        const PERMIT: Want = Want::Permits {
            capacity: CAPACITY,
            count: 1,
        };
        match self {
            Kind::Lock => &[Want::Exclusive],
            Kind::ReadWrite => &[Want::Read, Want::Write],
            Kind::Semaphore => &[PERMIT],
        }
    }
}

/// The options of an acquire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Opts {
    pub wait: bool,
    pub fence: bool,
    pub bind: bool,
    pub lock_delay: bool,
}

impl Opts {
    pub const NONE: Opts = Opts {
        wait: false,
        fence: false,
        bind: false,
        lock_delay: false,
    };
    pub const WAIT: Opts = Opts {
        wait: true,
        ..Opts::NONE
    };
    pub const FENCE: Opts = Opts {
        fence: true,
        ..Opts::WAIT
    };
    pub const BIND: Opts = Opts {
        bind: true,
        ..Opts::WAIT
    };
    pub const LOCK_DELAY: Opts = Opts {
        lock_delay: true,
        ..Opts::WAIT
    };

    /// Whether a request `want` may carry these options (FENCE: not on a semaphore;
    /// LOCKDELAY: the exclusive lock and WRITE only).
    fn fit(self, want: Want) -> bool {
        let permits = matches!(want, Want::Permits { .. });
        !(self.fence && permits
            || self.lock_delay && matches!(want, Want::Read)
            || self.lock_delay && permits)
    }
}

/// A world: who acts, on what, with which options; and the rule broken on purpose, if any.
#[derive(Clone, Debug)]
pub struct World {
    pub owners: usize,
    pub keys: Vec<Kind>,
    /// The option sets acquires are made with.
    pub options: Vec<Opts>,
    /// FENCE requests stop once a key's counter reaches this (bounds the state space).
    pub max_token: i64,
    /// Whether keys are deleted and the database flushed.
    pub deletes: bool,
    pub broken: Option<Broken>,
}

impl World {
    /// The options of every acquire: none, WAIT, and WAIT with each of FENCE, BIND,
    /// LOCKDELAY.
    pub const ALL_OPTIONS: [Opts; 5] = [
        Opts::NONE,
        Opts::WAIT,
        Opts::FENCE,
        Opts::BIND,
        Opts::LOCK_DELAY,
    ];

    /// `owners` owners on `keys`, every option, deletes and flushes.
    pub fn new(owners: usize, keys: &[Kind]) -> World {
        World {
            owners,
            keys: keys.to_vec(),
            options: World::ALL_OPTIONS.to_vec(),
            max_token: 2,
            deletes: true,
            broken: None,
        }
    }

    /// The same world with acquires made only with `options`.
    pub fn options(mut self, options: &[Opts]) -> World {
        self.options = options.to_vec();
        self
    }

    /// The same world with `broken` in place of the rule it breaks.
    pub fn with(mut self, broken: Broken) -> World {
        self.broken = Some(broken);
        self
    }
}

/// A request waiting in a key's queue (its client blocked).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Waiter {
    pub owner: u8,
    pub want: Want,
    pub opts: Opts,
}

/// One key: the lock as Redis holds it, its lock-delay companion, its queue, and the rest of
/// what the engine keeps about it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub value: LockValue,
    pub delay: Option<Delay>,
    /// Head first.
    pub queue: Vec<Waiter>,
    /// The fencing counter of the key's slot (one key per slot here).
    pub counter: i64,
    /// The highest token an exclusive hold of the key was given (the history the fencing
    /// property reads; erased with the counter by a flush).
    pub last_token: i64,
    /// A wake-up of the key is pending (an event marked it, or a timer is due).
    pub dirty: bool,
    /// Holds bound to their owner's connection (BIND), with their grace.
    pub bound: Vec<(u8, i64)>,
    /// Holds cut by a closed connection: owner and the deadline after which it must be gone
    /// (until the owner is granted or renews again).
    pub cuts: Vec<(u8, i64)>,
}

impl Default for Key {
    fn default() -> Key {
        Key {
            value: LockValue::Free,
            delay: None,
            queue: vec![],
            counter: 0,
            last_token: 0,
            dirty: false,
            bound: vec![],
            cuts: vec![],
        }
    }
}

/// The whole world at an instant (now is 0: every time is relative to it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct State {
    pub keys: Vec<Key>,
    /// A property of a step (fairness, fencing, deadlock detection) that a step broke.
    pub broken: Option<&'static str>,
}

/// What can happen next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// DLOCK.ACQUIRE / RWLOCK / SEMAPHORE by `owner` on `key` (reentrant when it holds).
    Acquire {
        owner: u8,
        key: u8,
        want: Want,
        opts: Opts,
    },
    /// DLOCK.RELEASE of one hold (the write hold first on a read-write lock).
    Release { owner: u8, key: u8 },
    /// DLOCK.RENEW.
    Renew { owner: u8, key: u8 },
    /// Time passes just beyond the next instant that matters.
    Elapse,
    /// The pending wake-up of `key` runs (a timer: the unit of work serves the queue).
    Wake { key: u8 },
    /// The WAIT time-out of `owner`'s request on `key` fires.
    TimeOut { owner: u8, key: u8 },
    /// `owner`'s connection closes: its waiting client leaves, its bound holds are cut.
    Close { owner: u8 },
    /// DEL of the lock key.
    Delete { key: u8 },
    /// FLUSHALL.
    Flush,
}

impl Model for World {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            keys: vec![Key::default(); self.keys.len()],
            broken: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        step::actions(self, state, actions)
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        step::apply(self, &mut next, action);
        Some(next)
    }

    fn format_action(&self, action: &Action) -> String {
        let name = |o: &u8| String::from_utf8_lossy(OWNERS[*o as usize]).into_owned();
        match action {
            Action::Acquire {
                owner,
                key,
                want,
                opts,
            } => {
                let words = [
                    (opts.wait, " WAIT"),
                    (opts.fence, " FENCE"),
                    (opts.bind, " BIND"),
                    (opts.lock_delay, " LOCKDELAY"),
                ];
                let opts: String = words.iter().filter(|w| w.0).map(|w| w.1).collect();
                format!("{} asks k{key} {}{opts}", name(owner), want.describe())
            }
            Action::Release { owner, key } => format!("{} releases k{key}", name(owner)),
            Action::Renew { owner, key } => format!("{} renews k{key}", name(owner)),
            Action::TimeOut { owner, key } => format!("{}'s wait on k{key} times out", name(owner)),
            Action::Close { owner } => format!("{}'s connection closes", name(owner)),
            other => format!("{other:?}"),
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        props::all()
    }
}
