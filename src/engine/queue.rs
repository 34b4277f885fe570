//! One key's waiter queue, strict FIFO by arrival, and what each waiter asked for. Plain data:
//! no Redis calls (timers and clients are only stored); the module's registry of queues is
//! `registry::Registry`.

use std::collections::BTreeMap;
use std::time::Instant;

use dlock_core::terms::Terms;

use super::job::Timer;
use crate::ffi::blocked::BlockedClient;

/// One queued client and the terms it asked, kept as they arrived.
pub struct Waiter {
    pub client: BlockedClient,
    pub terms: Terms,
    /// The connection that asked (`Ctx::connection`), when it asked for a BIND: what the
    /// hold is bound to.
    pub connection: Option<u64>,
    /// Its WAIT time-out timer (none for `WAIT 0`, or once it fired).
    pub timer: Option<Timer>,
    /// When it joined the queue (wait-time percentiles, DLOCK.WAITERS).
    pub since: Instant,
    /// When its WAIT time-out ends (none for `WAIT 0`).
    pub until: Option<Instant>,
}

/// The queue of one key.
#[derive(Default)]
pub(super) struct Queue {
    /// By arrival sequence number: the first entry is the head.
    pub(super) waiters: BTreeMap<u64, Waiter>,
    /// The timer armed for the next lease deadline on the key, and its firing time (unix ms).
    pub(super) lease_timer: Option<(Timer, i64)>,
}
