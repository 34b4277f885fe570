//! What a request for a hold asks of a lock: who, which hold, and the terms of the grant. A
//! command builds it from its arguments (the owner borrowed from them); a waiter keeps it as
//! it arrived (the owner owned) and the grant step takes it as it is when its turn comes.

use dlock_core::model::Want;
use dlock_core::serve::Ask;

/// A request for a hold. `O`: the owner's bytes, `&[u8]` while the command runs, `Vec<u8>`
/// once it waits in a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldRequest<O = Vec<u8>> {
    pub owner: O,
    pub want: Want,
    pub lease_ms: i64,
    pub fence: bool,
    /// BIND: the client to bind the hold to, and the grace (ms).
    pub bind: Option<(u64, i64)>,
    /// LOCKDELAY ms.
    pub lock_delay: Option<i64>,
}

impl<O: AsRef<[u8]>> HoldRequest<O> {
    pub fn owner(&self) -> &[u8] {
        self.owner.as_ref()
    }

    /// The terms the grant rules read at the request's turn.
    pub fn ask(&self) -> Ask<'_> {
        Ask {
            owner: self.owner(),
            want: self.want,
            lease_ms: self.lease_ms,
            fence: self.fence,
        }
    }

    /// The same request with its owner copied (to queue it).
    pub fn owned(&self) -> HoldRequest {
        HoldRequest {
            owner: self.owner().to_vec(),
            want: self.want,
            lease_ms: self.lease_ms,
            fence: self.fence,
            bind: self.bind,
            lock_delay: self.lock_delay,
        }
    }
}
