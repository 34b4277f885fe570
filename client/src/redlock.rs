//! RedLock: one lock over N independent Redis servers, held when a majority granted it.
//!
//! Read the README's *RedLock: safety model* before relying on it: it assumes bounded clock
//! drift and process pauses, and servers that do not forget acknowledged writes. For
//! correctness (not just efficiency) use fencing tokens checked by the protected resource.
//!
//! ```no_run
//! # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
//! use std::time::Duration;
//! let red = dlock_client::RedLock::on(&clients, "payments:batch");
//! if let Some(g) = red.try_acquire_for(Duration::from_millis(500), Duration::from_secs(10)).await? {
//!     println!("valid for {:?}", g.validity());
//!     g.release().await?;
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::multilock::{rollback, GroupLost};
use crate::node::{Member, Node};
use crate::{Client, Error, Lock, LockGuard, Owner, Result};

/// The RedLock algorithm (Redis's distributed lock manager pattern, Redisson's
/// `RedissonRedLock`) over N independent servers, one [`Lock`] per server.
///
/// One attempt: ask every server at once for the lock with lease `L` (each with a short
/// per-server time-out); with `elapsed` the time the attempt took and
/// `drift = L * 0.01 + 2 ms`, the lock is held when at least `N/2 + 1` servers granted it
/// and `validity = L - elapsed - drift` is positive. Otherwise it is released on **every**
/// server (also those whose answer was lost) and the attempt failed; retries wait a random
/// delay. The holder must finish before [`RedLockGuard::valid_until`].
///
/// A server that is down is a failed vote. Built with [`on_nodes`](Self::on_nodes), a
/// RedLock needs no server to be up: a [`Node`] that is down is tried again (in the
/// background) at each attempt, and used again once it answers.
///
/// ```no_run
/// # async fn demo(a: dlock_client::Client, b: dlock_client::Client, c: dlock_client::Client) -> dlock_client::Result<()> {
/// use std::time::Duration;
/// let red = dlock_client::RedLock::on(&[a, b, c], "job");
/// assert_eq!(red.quorum(), 2);
/// let g = red.try_acquire(Duration::from_secs(5)).await?;
/// # let _ = g; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    members: Vec<Member>,
    node_timeout: Duration,
    retry_delay: Duration,
    drift_factor: f64,
}

impl RedLock {
    /// A RedLock over `locks`, one per independent server.
    /// ```no_run
    /// # async fn demo(a: dlock_client::Client, b: dlock_client::Client, c: dlock_client::Client) -> dlock_client::Result<()> {
    /// let red = dlock_client::RedLock::new([a.lock("k"), b.lock("k"), c.lock("k")]);
    /// # let _ = red; Ok(()) }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> RedLock {
        RedLock::of_members(locks.into_iter().map(|l| Member::of(&l)).collect())
    }

    /// The same RedLock acting for `owner` on every server.
    pub(crate) fn with_owner(&self, owner: &Owner) -> RedLock {
        let mut r = self.clone();
        for m in &mut r.members {
            m.owner = owner.clone();
        }
        r
    }

    fn of_members(members: Vec<Member>) -> RedLock {
        RedLock {
            members,
            node_timeout: Duration::from_millis(50),
            retry_delay: Duration::from_millis(200),
            drift_factor: 0.01,
        }
    }

    /// A RedLock on key `name` over `clients`, with one owner id shared by every server
    /// (the first client's new owner), as in Redis's reference algorithm.
    /// ```no_run
    /// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
    /// let red = dlock_client::RedLock::on(&clients, "k");
    /// assert_eq!(red.len(), clients.len());
    /// # Ok(()) }
    /// ```
    pub fn on(clients: &[Client], name: &str) -> RedLock {
        let nodes: Vec<Node> = clients.iter().cloned().map(Node::from).collect();
        RedLock::on_nodes(&nodes, name)
    }

    /// A RedLock on key `name` over `nodes`, up or down (see [`Node`]), with one new owner
    /// id shared by every server.
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// use dlock_client::{Client, Node, RedLock};
    /// let mut nodes = Vec::new();
    /// for port in [6379, 6380, 6381] {
    ///     nodes.push(Node::connect(Client::builder(format!("redis://127.0.0.1:{port}/"))).await?);
    /// }
    /// let red = RedLock::on_nodes(&nodes, "k"); // builds with nodes down: failed votes
    /// # let _ = red; Ok(()) }
    /// ```
    pub fn on_nodes(nodes: &[Node], name: &str) -> RedLock {
        let owner = nodes
            .first()
            .map(Node::new_owner)
            .unwrap_or_else(|| Owner::from_id("redlock"));
        RedLock::on_nodes_as(nodes, name, &owner)
    }

    /// A RedLock on key `name` over `nodes` acting for `owner` on every server (reentrant
    /// for that owner).
    /// ```no_run
    /// # async fn demo(nodes: Vec<dlock_client::Node>) -> dlock_client::Result<()> {
    /// let owner = dlock_client::Owner::from_id("batch-7:1");
    /// let red = dlock_client::RedLock::on_nodes_as(&nodes, "k", &owner);
    /// # let _ = red; Ok(()) }
    /// ```
    pub fn on_nodes_as(nodes: &[Node], name: &str, owner: &Owner) -> RedLock {
        RedLock::of_members(
            nodes
                .iter()
                .map(|n| Member::exclusive(n.clone(), name.to_string(), owner.clone()))
                .collect(),
        )
    }

    /// Time-out of one server's answer in an attempt (default 50 ms; keep it small next to
    /// the lease, so a dead server does not eat the validity).
    /// ```no_run
    /// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
    /// let red = dlock_client::RedLock::on(&clients, "k").node_timeout(std::time::Duration::from_millis(20));
    /// # let _ = red; Ok(()) }
    /// ```
    pub fn node_timeout(mut self, t: Duration) -> RedLock {
        self.node_timeout = t.max(Duration::from_millis(1));
        self
    }

    /// Upper bound of the random delay between attempts (default 200 ms).
    /// ```no_run
    /// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
    /// let red = dlock_client::RedLock::on(&clients, "k").retry_delay(std::time::Duration::from_millis(50));
    /// # let _ = red; Ok(()) }
    /// ```
    pub fn retry_delay(mut self, t: Duration) -> RedLock {
        self.retry_delay = t.max(Duration::from_millis(1));
        self
    }

    /// Clock drift allowance as a fraction of the lease (default 0.01, plus 2 ms).
    /// ```no_run
    /// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
    /// let red = dlock_client::RedLock::on(&clients, "k").drift_factor(0.02);
    /// # let _ = red; Ok(()) }
    /// ```
    pub fn drift_factor(mut self, f: f64) -> RedLock {
        self.drift_factor = f.max(0.0);
        self
    }

    /// Number of servers.
    /// ```no_run
    /// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
    /// println!("{}", dlock_client::RedLock::on(&clients, "k").len());
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when there is no server.
    /// ```
    /// assert!(dlock_client::RedLock::new([]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The servers, in the order given.
    /// ```no_run
    /// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
    /// let red = dlock_client::RedLock::on(&clients, "k");
    /// println!("{} up", red.nodes().filter(|n| n.is_up()).count());
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.members.iter().map(|m| &m.node)
    }

    /// Grants needed: `N/2 + 1`.
    /// ```
    /// assert_eq!(dlock_client::RedLock::new([]).quorum(), 1);
    /// ```
    pub fn quorum(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// The drift allowance for `lease`: `lease * drift_factor + 2 ms`.
    /// ```
    /// use std::time::Duration;
    /// let red = dlock_client::RedLock::new([]);
    /// assert_eq!(red.drift(Duration::from_secs(10)), Duration::from_millis(102));
    /// ```
    pub fn drift(&self, lease: Duration) -> Duration {
        let lease = lease.min(Duration::from_millis(crate::config::MAX_MS));
        Duration::try_from_secs_f64(lease.as_secs_f64() * self.drift_factor)
            .unwrap_or(lease)
            .saturating_add(Duration::from_millis(2))
    }

    /// One attempt with lease `lease`. `Ok(None)` when no quorum (or no validity left):
    /// nothing is left held on any server.
    /// ```no_run
    /// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
    /// let g = dlock_client::RedLock::on(&clients, "k").try_acquire(std::time::Duration::from_secs(5)).await?;
    /// # let _ = g; Ok(()) }
    /// ```
    pub async fn try_acquire(&self, lease: Duration) -> Result<Option<RedLockGuard>> {
        // Duration::MAX (no limit) is the module's longest lease.
        let lease = lease.min(Duration::from_millis(crate::config::MAX_MS));
        let start = Instant::now();
        let tries = self.members.iter().map(|m| async move {
            // A node that is down (or still connecting after node_timeout): a failed vote
            // with nothing sent, so nothing to clean up.
            let Ok(l) = m.lock(Some(self.node_timeout)).await else {
                return Vote::Down;
            };
            match tokio::time::timeout(
                self.node_timeout,
                l.try_acquire_for(Duration::ZERO, Some(lease)),
            )
            .await
            {
                Ok(Ok(Some(g))) => Vote::Granted(g),
                _ => Vote::Missed(l),
            }
        });
        let results = futures::future::join_all(tries).await;
        let elapsed = start.elapsed();
        let mut held = Vec::new();
        let mut missed = Vec::new();
        for r in results {
            match r {
                Vote::Granted(g) => held.push(g),
                Vote::Missed(l) => missed.push(l),
                Vote::Down => {}
            }
        }
        let drift = self.drift(lease);
        let validity = lease.checked_sub(elapsed + drift);
        match validity {
            Some(v) if held.len() >= self.quorum() && !v.is_zero() => Ok(Some(RedLockGuard {
                name: held[0].name().to_string(),
                guards: held,
                missed,
                quorum: self.quorum(),
                validity: v,
                valid_until: start + v,
                node_timeout: self.node_timeout,
            })),
            _ => {
                // Release everywhere: where we hold it, and where the answer may have been lost.
                let cleanup = missed
                    .iter()
                    .map(|l| l.release_blind(self.node_timeout.saturating_mul(4)));
                futures::future::join(rollback(held), futures::future::join_all(cleanup)).await;
                Ok(None)
            }
        }
    }

    /// Retry [`try_acquire`](Self::try_acquire) (after a random delay up to
    /// [`retry_delay`](Self::retry_delay)) until it succeeds or `wait` has passed.
    /// ```no_run
    /// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let red = dlock_client::RedLock::on(&clients, "k");
    /// let g = red.try_acquire_for(Duration::from_secs(2), Duration::from_secs(10)).await?;
    /// # let _ = g; Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<RedLockGuard>> {
        // No deadline: no limit.
        let deadline = Instant::now().checked_add(wait);
        loop {
            if let Some(g) = self.try_acquire(lease).await? {
                return Ok(Some(g));
            }
            let pause = {
                let mut rng = rand::thread_rng();
                let max = self.retry_delay.as_millis().clamp(2, u64::MAX as u128) as u64;
                Duration::from_millis(rng.gen_range(1..max))
            };
            let resume = Instant::now().checked_add(pause);
            if let (Some(d), Some(r)) = (deadline, resume) {
                if r >= d {
                    return Ok(None);
                }
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// One server's answer in an attempt.
enum Vote {
    Granted(LockGuard),
    /// Refused, failed or too slow: the grant may have happened, so it is released blindly.
    Missed(Lock),
    /// The node is down: nothing was sent.
    Down,
}

/// A RedLock held on a quorum of servers, until [`valid_until`](Self::valid_until).
/// Dropping it releases in the background; [`release`](Self::release) releases on every
/// server and waits for the answers.
///
/// ```no_run
/// # async fn demo(clients: Vec<dlock_client::Client>) -> dlock_client::Result<()> {
/// let g = dlock_client::RedLock::on(&clients, "k").try_acquire(std::time::Duration::from_secs(5)).await?.unwrap();
/// assert!(g.is_valid());
/// g.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedLockGuard {
    name: String,
    guards: Vec<LockGuard>,
    missed: Vec<Lock>,
    quorum: usize,
    validity: Duration,
    valid_until: Instant,
    node_timeout: Duration,
}

impl RedLockGuard {
    /// The validity computed at grant: `lease - elapsed - drift`.
    /// ```no_run
    /// # async fn demo(g: dlock_client::RedLockGuard) {
    /// println!("{:?}", g.validity());
    /// # }
    /// ```
    pub fn validity(&self) -> Duration {
        self.validity
    }
    /// When the validity ends (attempt start + validity).
    /// ```no_run
    /// # async fn demo(g: dlock_client::RedLockGuard) {
    /// let left = g.valid_until() - tokio::time::Instant::now();
    /// # let _ = left; }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }
    /// Still within the validity?
    /// ```no_run
    /// # async fn demo(g: dlock_client::RedLockGuard) {
    /// assert!(g.is_valid());
    /// # }
    /// ```
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }
    /// Servers that granted it.
    /// ```no_run
    /// # async fn demo(g: dlock_client::RedLockGuard) {
    /// assert!(g.granted() >= 1);
    /// # }
    /// ```
    pub fn granted(&self) -> usize {
        self.guards.len()
    }
    /// The per-server fencing tokens (locks built [`fenced`](Lock::fenced)). Tokens from
    /// different servers are independent counters: compare only tokens of one server.
    /// ```no_run
    /// # async fn demo(g: dlock_client::RedLockGuard) {
    /// println!("{:?}", g.fencing_tokens());
    /// # }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.guards.iter().map(|g| g.fencing_token()).collect()
    }
    /// Fires at the validity deadline, or earlier when so many servers report the lock
    /// lost that fewer than a quorum still hold it.
    /// ```no_run
    /// # async fn demo(g: dlock_client::RedLockGuard) {
    /// let reason = g.lost().await;
    /// # let _ = reason; }
    /// ```
    pub fn lost(&self) -> GroupLost {
        GroupLost {
            signals: self.guards.iter().map(|g| g.lost()).collect(),
            tolerate: self.guards.len().saturating_sub(self.quorum),
            deadline: Some(self.valid_until),
        }
    }
    /// Release on every server (also where the grant's answer was lost). `Ok(())` if a
    /// quorum still held it, else [`Error::NotHeld`].
    ///
    /// Cancel safety: servers not yet answered when the future is dropped are released in
    /// the background (or lapse with the lease).
    /// ```no_run
    /// # async fn demo(g: dlock_client::RedLockGuard) -> dlock_client::Result<()> {
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        let quorum = self.quorum;
        let name = self.name.clone();
        let t = self.node_timeout.saturating_mul(4);
        let cleanup = self.missed.iter().map(|l| l.release_blind(t));
        let rel = futures::future::join_all(self.guards.into_iter().map(|g| g.release()));
        let (res, _) = futures::future::join(rel, futures::future::join_all(cleanup)).await;
        let still = res.iter().filter(|r| r.is_ok()).count();
        if still >= quorum {
            Ok(())
        } else {
            Err(Error::NotHeld(name))
        }
    }
}
