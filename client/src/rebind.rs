//! What binding a hold to a connection (`BIND`, native backend) means for its deadline: the
//! server cuts a bound hold's lease to the bind grace when the connection closes, so the
//! client counts the hold as ending a grace after the last moment the bound connection is
//! known to have been open: the send time of the last command answered on it (see the
//! client contract in docs/CLIENTS.md). A stopped process notices a close late, or not at
//! all before it is asked; this rule needs no noticing.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::topology::{Answered, Stamp};

/// The binding of a watched hold: its grace, and where the client learns when the bound
/// connection (the shared one) was last known open.
pub(crate) struct Bound {
    pub(crate) grace: Duration,
    /// `None` where the shared connection does not track answers (Sentinel, Cluster): then
    /// only the binding command's own send time is known, and renewals (which rebind) keep
    /// the hold; the grace there covers a renew interval and a response time-out.
    pub(crate) answered: Option<Arc<Answered>>,
}

impl Bound {
    /// The moment the server may end the hold for a closed connection, for a hold bound by
    /// the command `bound` stamps (answered).
    pub(crate) fn deadline(&self, bound: Stamp) -> Instant {
        let open = match &self.answered {
            Some(a) => a.open_since(bound),
            None => bound.sent,
        };
        open + self.grace
    }

    /// How long the bound connection may stay silent before the client sends a sign of
    /// life on it (a third of the grace: two more chances before the grace runs out).
    pub(crate) fn beat(grace: Duration) -> Duration {
        (grace / 3).max(Duration::from_millis(1))
    }
}
