//! The properties' names: what [`crate::props`] checks under each, what a deliberately
//! broken rule ([`crate::Broken`]) must be caught by, and what a step that saw a rule broken
//! records in the state.

pub const EXCLUSION: &str = "mutual exclusion";
pub const FAIRNESS: &str = "fairness";
pub const NOT_FORGOTTEN: &str = "no waiter forgotten";
pub const FENCING: &str = "fencing tokens increase";
pub const LOCK_DELAY: &str = "no grant inside a lock-delay";
pub const BIND_CUT: &str = "a cut hold is gone after its grace";
pub const DEADLOCK: &str = "deadlock detection exact";
