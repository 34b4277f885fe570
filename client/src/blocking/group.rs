//! What the blocking group guards (multi-lock, RedLock) share.

use std::sync::Arc;
use std::time::Duration;

use super::block_on;
use crate::multilock::GroupLost;
use crate::{LostReason, Result};

/// An async group guard (multi-lock or RedLock) as the blocking guards hold it.
pub(super) trait GroupGuard: Send + 'static {
    fn group_lost(&self) -> GroupLost;
    fn release_all(self) -> impl std::future::Future<Output = Result<()>> + Send;
}

impl GroupGuard for crate::MultiLockGuard {
    fn group_lost(&self) -> GroupLost {
        self.lost()
    }
    fn release_all(self) -> impl std::future::Future<Output = Result<()>> + Send {
        self.release()
    }
}

impl GroupGuard for crate::RedLockGuard {
    fn group_lost(&self) -> GroupLost {
        self.lost()
    }
    fn release_all(self) -> impl std::future::Future<Output = Result<()>> + Send {
        self.release()
    }
}

/// What the blocking group guards share: the async guard and the runtime that runs it;
/// dropped outside an async runtime, it releases before `drop` returns.
pub(super) struct GroupHold<G: GroupGuard> {
    inner: Option<G>,
    rt: Option<Arc<tokio::runtime::Runtime>>,
}

impl<G: GroupGuard> GroupHold<G> {
    pub(super) fn new(g: G, rt: &Option<Arc<tokio::runtime::Runtime>>) -> GroupHold<G> {
        GroupHold {
            inner: Some(g),
            rt: rt.clone(),
        }
    }
    pub(super) fn g(&self) -> &G {
        self.inner.as_ref().expect("guard present until release")
    }
    /// Block up to `timeout` for the group to count as lost.
    pub(super) fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        let lost = self.g().group_lost();
        match &self.rt {
            Some(rt) => {
                rt.block_on(async move { tokio::time::timeout(timeout, lost.wait()).await.ok() })
            }
            None => lost.check(),
        }
    }
    pub(super) fn release(mut self) -> Result<()> {
        let g = self.inner.take().expect("guard present");
        block_on(&self.rt, g.release_all())
    }
}

impl<G: GroupGuard> Drop for GroupHold<G> {
    fn drop(&mut self) {
        if let Some(g) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_err() {
                let _ = block_on(&self.rt, g.release_all());
            }
        }
    }
}
