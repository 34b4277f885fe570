//! The blocking [`RedLock`].

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::client::thread_number;
use super::forward::{on_runtime, Facade};
use super::{Client, Node, RedLockGuard, Rt};
use crate::{Owner, Result};

/// A blocking RedLock (see [`crate::RedLock`]): one lock over N independent servers, held
/// on a majority; its owner is the calling thread's (the same id on every server).
///
/// ```no_run
/// use std::time::Duration;
/// let clients: Vec<dlock_client::blocking::Client> = [6379, 6380, 6381]
///     .iter()
///     .map(|p| dlock_client::blocking::Client::open(format!("redis://127.0.0.1:{p}/")))
///     .collect::<Result<_, _>>()?;
/// let red = dlock_client::blocking::RedLock::on(&clients, "job");
/// if let Some(g) = red.try_acquire(Duration::from_secs(10))? {
///     println!("valid for {:?}", g.validity());
///     g.release()?;
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    red: crate::RedLock,
    /// Names the thread's owner (its prefix, when up).
    first: Option<crate::Node>,
    rt: Rt,
}

impl Facade for RedLock {
    type Async = crate::RedLock;
    /// The async RedLock acting for the calling thread.
    fn for_thread(&self) -> crate::RedLock {
        match &self.first {
            Some(n) => self.red.with_owner(&n.owner_numbered(thread_number())),
            None => self.red.clone(),
        }
    }
    fn rt(&self) -> Option<&Arc<Runtime>> {
        self.rt.as_ref()
    }
}

impl RedLock {
    /// A RedLock on key `name` over `clients`.
    /// ```no_run
    /// # fn demo(clients: Vec<dlock_client::blocking::Client>) {
    /// let red = dlock_client::blocking::RedLock::on(&clients, "k");
    /// # }
    /// ```
    pub fn on(clients: &[Client], name: &str) -> RedLock {
        let nodes: Vec<Node> = clients.iter().cloned().map(Node::from).collect();
        RedLock::on_nodes(&nodes, name)
    }
    /// A RedLock on key `name` over `nodes`, up or down: a node that is down is a failed
    /// vote, and is used again once it answers.
    /// ```no_run
    /// # fn demo(nodes: Vec<dlock_client::blocking::Node>) {
    /// let red = dlock_client::blocking::RedLock::on_nodes(&nodes, "k");
    /// # }
    /// ```
    pub fn on_nodes(nodes: &[Node], name: &str) -> RedLock {
        let async_nodes: Vec<crate::Node> = nodes.iter().map(|n| n.node.clone()).collect();
        let first = async_nodes.first().cloned();
        let owner = first
            .as_ref()
            .map(|n| n.owner_numbered(thread_number()))
            .unwrap_or_else(|| Owner::from_id("redlock"));
        RedLock {
            red: crate::RedLock::on_nodes_as(&async_nodes, name, &owner),
            first,
            rt: nodes.first().map(|n| n.rt.clone()),
        }
    }
    /// Time-out of one server's answer (see [`crate::RedLock::node_timeout`]).
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) {
    /// let red = red.node_timeout(std::time::Duration::from_millis(20));
    /// # }
    /// ```
    pub fn node_timeout(mut self, t: Duration) -> RedLock {
        self.red = self.red.node_timeout(t);
        self
    }
    /// Upper bound of the random delay between attempts.
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) {
    /// let red = red.retry_delay(std::time::Duration::from_millis(50));
    /// # }
    /// ```
    pub fn retry_delay(mut self, t: Duration) -> RedLock {
        self.red = self.red.retry_delay(t);
        self
    }
    /// Clock drift allowance as a fraction of the lease.
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) {
    /// let red = red.drift_factor(0.02);
    /// # }
    /// ```
    pub fn drift_factor(mut self, f: f64) -> RedLock {
        self.red = self.red.drift_factor(f);
        self
    }
    /// Number of servers.
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) { println!("{}", red.len()); }
    /// ```
    pub fn len(&self) -> usize {
        self.red.len()
    }
    /// True when there is no server.
    /// ```
    /// assert!(dlock_client::blocking::RedLock::on(&[], "k").is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.red.is_empty()
    }
    /// Grants needed: `N/2 + 1`.
    /// ```
    /// assert_eq!(dlock_client::blocking::RedLock::on(&[], "k").quorum(), 1);
    /// ```
    pub fn quorum(&self) -> usize {
        self.red.quorum()
    }
    on_runtime! {
        /// One attempt with lease `lease`; `Ok(None)` without a quorum (nothing left held).
        /// ```no_run
        /// # fn demo(red: dlock_client::blocking::RedLock) -> dlock_client::Result<()> {
        /// if let Some(g) = red.try_acquire(std::time::Duration::from_secs(5))? { g.release()?; }
        /// # Ok(()) }
        /// ```
        fn try_acquire(&self, lease: Duration) -> Result<Option<RedLockGuard>> = try_acquire;
        /// Retry until a quorum grants it or `wait` has passed.
        /// ```no_run
        /// # fn demo(red: dlock_client::blocking::RedLock) -> dlock_client::Result<()> {
        /// use std::time::Duration;
        /// let g = red.try_acquire_for(Duration::from_secs(2), Duration::from_secs(10))?;
        /// # Ok(()) }
        /// ```
        fn try_acquire_for(
            &self,
            wait: Duration,
            lease: Duration,
        ) -> Result<Option<RedLockGuard>> = try_acquire_for;
    }
}
