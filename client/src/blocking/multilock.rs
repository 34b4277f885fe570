//! The blocking [`MultiLock`] and its guard.

use std::sync::Arc;
use std::time::Duration;

use super::client::thread_number;
use super::group::GroupHold;
use super::{block_on, Lock, Node};
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
    rt: Option<Arc<tokio::runtime::Runtime>>,
}

impl MultiLock {
    /// A multi-lock over `locks` (blocking lock handles, possibly of different clients).
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let m = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]);
    /// assert_eq!(m.len(), 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
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
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(dlock_client::blocking::MultiLock::new([c.lock("a")]).len(), 1);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
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
    /// The async multi-lock acting for the calling thread.
    fn for_thread(&self) -> crate::MultiLock {
        match &self.members {
            Members::Locks(locks) => crate::MultiLock::new(locks.iter().map(Lock::handle)),
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
    fn guard(&self, g: crate::MultiLockGuard) -> MultiLockGuard {
        MultiLockGuard {
            held: GroupHold::new(g, &self.rt),
        }
    }
    /// Wait as long as it takes for all members; watchdog on.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]).acquire()?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn acquire(&self) -> Result<MultiLockGuard> {
        let m = self.for_thread();
        let g = block_on(&self.rt, async move { m.acquire().await })?;
        Ok(self.guard(g))
    }
    /// One attempt at each member; all or none.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// if let Some(g) = dlock_client::blocking::MultiLock::new([c.lock("a")]).try_acquire()? { g.release()?; }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_acquire(&self) -> Result<Option<MultiLockGuard>> {
        self.try_acquire_for(Duration::ZERO, None)
    }
    /// Wait up to `wait` in total; with `lease`, no watchdog. `Ok(None)` on time-out.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// use std::time::Duration;
    /// let m = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]);
    /// let g = m.try_acquire_for(Duration::from_secs(1), Some(Duration::from_secs(10)))?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        let m = self.for_thread();
        let g = block_on(
            &self.rt,
            async move { m.try_acquire_for(wait, lease).await },
        )?;
        Ok(g.map(|g| self.guard(g)))
    }
}

/// All members of a blocking [`MultiLock`], held. Dropping it releases them (before `drop`
/// returns, outside an async runtime).
pub struct MultiLockGuard {
    held: GroupHold<crate::MultiLockGuard>,
}

impl MultiLockGuard {
    fn g(&self) -> &crate::MultiLockGuard {
        self.held.g()
    }
    /// Members held.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(dlock_client::blocking::MultiLock::new([c.lock("a")]).acquire()?.len(), 1);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.g().guards().len()
    }
    /// True when no member is held (an empty multi-lock).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    super::group::pass_throughs! {
        guard: "MultiLockGuard",
        tokens: "The members' fencing tokens.",
        lost: "The signal that fires when any member is lost.",
        wait_lost: "Block up to `timeout` for a member to be lost; `None` if all are still held.",
        release: "Release every member (see [`crate::MultiLockGuard::release`]).",
    }
}
