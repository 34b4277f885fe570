//! The terms of a hold: what one request for a hold asks (who, which hold, for how long,
//! and what comes with the grant). The one statement of them: the parser (`args`) produces
//! them, the grant rules (`serve::turn`) read them, and the module's queue keeps them as
//! they came until the request's turn. A new DLOCK.ACQUIRE option that changes the hold is
//! a field here, its words in `args`, the rule that reads it, and docs/COMMANDS.md.

use crate::model::Want;

/// The terms of one request for a hold. `O`: the owner's bytes, `&[u8]` while a command
/// runs (borrowed from its arguments), `Vec<u8>` once the request waits in a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terms<O = Vec<u8>> {
    pub owner: O,
    pub want: Want,
    pub lease_ms: i64,
    /// FENCE: the grant answers with a fencing token.
    pub fence: bool,
    /// `BIND grace-ms`: the hold is bound to the requesting connection; its lease is cut to
    /// `grace-ms` when that connection closes.
    pub bind: Option<i64>,
    /// `LOCKDELAY ms` (exclusive lock and WRITE): nobody is granted the key for `ms` after
    /// this hold ends without a RELEASE.
    pub lock_delay: Option<i64>,
}

impl<O> Terms<O> {
    /// A plain request: no FENCE, no BIND, no LOCKDELAY.
    pub fn new(owner: O, want: Want, lease_ms: i64) -> Self {
        Terms {
            owner,
            want,
            lease_ms,
            fence: false,
            bind: None,
            lock_delay: None,
        }
    }
}

impl<O: AsRef<[u8]>> Terms<O> {
    pub fn owner(&self) -> &[u8] {
        self.owner.as_ref()
    }

    /// The same terms with the owner copied (to keep them past the command, in a queue).
    /// The one place that lists the terms field by field.
    pub fn owned(&self) -> Terms {
        Terms {
            owner: self.owner().to_vec(),
            want: self.want,
            lease_ms: self.lease_ms,
            fence: self.fence,
            bind: self.bind,
            lock_delay: self.lock_delay,
        }
    }
}
