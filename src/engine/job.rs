//! The engine's timers as plain data: why each was armed. What each does when it fires is
//! in `fire`.

use crate::ffi::timer::TimerId;

/// Why a timer was armed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Job {
    /// The WAIT time-out of waiter `seq` on `key`.
    WaitTimeout { db: i32, key: Vec<u8>, seq: u64 },
    /// A lease on `key` may have run out: serve its queue.
    LeaseCheck { db: i32, key: Vec<u8> },
    /// Keys touched by keyspace/server events: serve their queues.
    Recheck,
    /// Connections with bound holds closed: cut those leases (`bind`).
    CutLeases,
    /// Every `wake::POLL_MS` while some key has a queue and Redis's cron (which runs the poll
    /// otherwise) ticks less often: the next `wake::POLL_BATCH` waited keys whose value is
    /// no longer a hash (overwritten, or gone) are marked; in cluster mode, where one waited
    /// key is routed (`wake::poll`).
    Poll,
    /// The server turned replica: every waiter is answered (a redirect in cluster mode).
    Demoted,
    /// The walk over the databases that finds every lock-delay key (`delay_keys`).
    DelayScan,
    /// Unlock messages were held back while nobody subscribed: look again, then send or
    /// forget them (`unlock`).
    UnlockMessages,
}

/// A timer of the engine.
pub type Timer = TimerId<Job>;
