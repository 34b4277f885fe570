//! The blocking [`MultiLock`].

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::client::thread_number;
use super::forward::{on_runtime, Facade};
use super::{Lock, MultiLockGuard, Node, Rt};
use crate::node::Member;
use crate::Result;

#[derive(Clone, Debug)]
enum Members {
    Locks(Vec<Lock>),
    Nodes(Vec<(crate::Node, String)>),
}

/// A blocking multi-lock (see [`crate::MultiLock`]): all-or-nothing over several locks, in
/// a canonical order; each member's owner is the calling thread's at each call.
///
/// ```no_run
/// let a = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// let b = dlock_client::blocking::Client::open("redis://127.0.0.1:6380/")?;
/// let m = dlock_client::blocking::MultiLock::new([a.lock("account:1"), b.lock("account:2")]);
/// let g = m.acquire()?;
/// g.release()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    members: Members,
    rt: Rt,
}

impl Facade for MultiLock {
    type Async = crate::MultiLock;
    fn for_thread(&self) -> crate::MultiLock {
        match &self.members {
            Members::Locks(locks) => crate::MultiLock::new(locks.iter().map(Lock::for_thread)),
            Members::Nodes(nodes) => {
                let n = thread_number();
                crate::MultiLock::of_members(
                    nodes
                        .iter()
                        .map(|(node, name)| {
                            Member::exclusive(node.clone(), name.clone(), node.owner_numbered(n))
                        })
                        .collect(),
                )
            }
        }
    }
    fn rt(&self) -> Option<&Arc<Runtime>> {
        self.rt.as_ref()
    }
}

impl MultiLock {
    /// A multi-lock over `locks` (blocking lock handles, possibly of different clients).
    #[doc = example!(c:
        r#"let m = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]);"#,
        "assert_eq!(m.len(), 2);",
    )]
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> MultiLock {
        let locks: Vec<Lock> = locks.into_iter().collect();
        MultiLock {
            rt: locks.first().map(|l| l.client.rt.clone()),
            members: Members::Locks(locks),
        }
    }
    /// A multi-lock over the exclusive locks `(node, name)`, whether or not the nodes are up:
    /// a member whose node is down makes an acquire fail with
    /// [`Error::Connect`](crate::Error::Connect) naming it.
    /// ```no_run
    /// # fn demo(a: dlock_client::blocking::Node, b: dlock_client::blocking::Node) -> dlock_client::Result<()> {
    /// let m = dlock_client::blocking::MultiLock::on_nodes([(a, "x"), (b, "y")]);
    /// # let _ = m; Ok(()) }
    /// ```
    pub fn on_nodes<S: Into<String>>(members: impl IntoIterator<Item = (Node, S)>) -> MultiLock {
        let members: Vec<(Node, String)> =
            members.into_iter().map(|(n, s)| (n, s.into())).collect();
        MultiLock {
            rt: members.first().map(|(n, _)| n.rt.clone()),
            members: Members::Nodes(members.into_iter().map(|(n, s)| (n.node, s)).collect()),
        }
    }
    /// Number of members.
    #[doc = example!(c:
        r#"assert_eq!(dlock_client::blocking::MultiLock::new([c.lock("a")]).len(), 1);"#,
    )]
    pub fn len(&self) -> usize {
        match &self.members {
            Members::Locks(l) => l.len(),
            Members::Nodes(n) => n.len(),
        }
    }
    /// True when there are no members.
    /// ```
    /// assert!(dlock_client::blocking::MultiLock::new([]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    on_runtime! {
        /// Wait as long as it takes for all members; watchdog on.
        #[doc = example!(c:
            r#"let g = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]).acquire()?;"#,
            "g.release()?;",
        )]
        fn acquire(&self) -> Result<MultiLockGuard> = acquire;
        /// One attempt at each member; all or none.
        #[doc = example!(c:
            r#"if let Some(g) = dlock_client::blocking::MultiLock::new([c.lock("a")]).try_acquire()? { g.release()?; }"#,
        )]
        fn try_acquire(&self) -> Result<Option<MultiLockGuard>> = try_acquire;
        /// Wait up to `wait` in total; with `lease`, no watchdog. `Ok(None)` on time-out.
        /// ```no_run
        /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
        /// use std::time::Duration;
        /// let m = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]);
        /// let g = m.try_acquire_for(Duration::from_secs(1), Some(Duration::from_secs(10)))?;
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        fn try_acquire_for(
            &self,
            wait: Duration,
            lease: Option<Duration>,
        ) -> Result<Option<MultiLockGuard>> = try_acquire_for;
    }
}
