//! What the blocking group guards (multi-lock, RedLock) share.

use std::sync::Arc;
use std::time::Duration;

use super::block_on;
use crate::multilock::GroupLost;
use crate::{LostReason, Result};

/// An async group guard (multi-lock or RedLock) as the blocking guards hold it.
pub(super) trait GroupGuard: Send + 'static {
    fn group_lost(&self) -> GroupLost;
    fn group_tokens(&self) -> Vec<Option<u64>>;
    fn release_all(self) -> impl std::future::Future<Output = Result<()>> + Send;
}

/// Both async group guards answer the same calls under the same names.
macro_rules! group_guard {
    ($($guard:ty),*) => {$(
        impl GroupGuard for $guard {
            fn group_lost(&self) -> GroupLost {
                self.lost()
            }
            fn group_tokens(&self) -> Vec<Option<u64>> {
                self.fencing_tokens()
            }
            fn release_all(self) -> impl std::future::Future<Output = Result<()>> + Send {
                self.release()
            }
        }
    )*};
}
group_guard!(crate::MultiLockGuard, crate::RedLockGuard);

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

/// The methods every blocking group guard passes through to its [`GroupHold`] (a field
/// `held`), written once: fencing tokens, the lost signal, waiting for it, release. The
/// arguments word what differs: the guard's type name (for the examples) and what "lost" and
/// "release" mean for that group.
macro_rules! pass_throughs {
    (guard: $guard:literal, tokens: $tokens:literal, lost: $lost:literal, wait_lost: $wait:literal, release: $release:literal $(,)?) => {
        #[doc = $tokens]
        #[doc = concat!(
            "```no_run\n# fn demo(g: dlock_client::blocking::", $guard, ") {\n",
            "println!(\"{:?}\", g.fencing_tokens());\n# }\n```"
        )]
        pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
            use $crate::blocking::group::GroupGuard;
            self.held.g().group_tokens()
        }
        #[doc = $lost]
        #[doc = concat!(
            "```no_run\n# fn demo(g: dlock_client::blocking::", $guard, ") {\n",
            "assert!(g.lost().check().is_none());\n# }\n```"
        )]
        pub fn lost(&self) -> $crate::multilock::GroupLost {
            use $crate::blocking::group::GroupGuard;
            self.held.g().group_lost()
        }
        #[doc = $wait]
        #[doc = concat!(
            "```no_run\n# fn demo(g: dlock_client::blocking::", $guard, ") {\n",
            "assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);\n# }\n```"
        )]
        pub fn wait_lost(&self, timeout: std::time::Duration) -> Option<$crate::LostReason> {
            self.held.wait_lost(timeout)
        }
        #[doc = $release]
        #[doc = concat!(
            "```no_run\n# fn demo(g: dlock_client::blocking::", $guard, ") -> dlock_client::Result<()> {\n",
            "g.release()?;\n# Ok(()) }\n```"
        )]
        pub fn release(self) -> $crate::Result<()> {
            self.held.release()
        }
    };
}
pub(super) use pass_throughs;
