//! Multi-locks: all-or-nothing over several locks, possibly on different servers.
//!
//! ```no_run
//! # async fn demo(a: dlock_client::Client, b: dlock_client::Client) -> dlock_client::Result<()> {
//! use dlock_client::MultiLock;
//! let m = MultiLock::new([a.lock("account:1"), b.lock("account:2")]);
//! let g = m.acquire().await?;      // both, or wait
//! // ... transfer ...
//! g.release().await?;              // releases both
//! # Ok(()) }
//! ```

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use crate::node::{Member, Node};
use crate::{Error, Lock, LockGuard, LostReason, LostSignal, Result};

/// Several locks taken all-or-nothing (Redisson's `RedissonMultiLock`). The members may come
/// from different [`Client`](crate::Client)s (different servers) and may be exclusive locks
/// or sides of read-write locks.
///
/// - Members are acquired one by one in a **canonical order** (server, then key, then
///   kind), whatever order you give them in, so two multi-locks over overlapping sets
///   cannot deadlock each other.
/// - If a member cannot be had in time (or an error occurs), every member already taken is
///   released before the call returns: nothing is left held.
/// - One [`MultiLockGuard`] releases them all; without an explicit lease each member is
///   renewed by its client's watchdog, and [`MultiLockGuard::lost`] fires when any member
///   is lost.
/// - Built with [`on_nodes`](Self::on_nodes), it needs no server to be up: a member whose
///   [`Node`] is down makes an acquire fail with [`Error::Connect`] naming that node (after
///   releasing what it took); once the node answers again it is used again.
/// - **Deadlocks.** The server answers a wait that would close a cycle of owners with
///   [`Error::Deadlock`](crate::Error::Deadlock) (native backend), but it sees only its own
///   keys: a cycle through members on **different servers** (or different cluster nodes)
///   is not detected and waits out its time-outs. The canonical order prevents such cycles
///   between multi-locks; a cycle formed with locks taken outside one is the caller's to
///   avoid (give waits a limit). A member refused with `Error::Deadlock` fails the acquire
///   like any error: what was taken is released.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// use std::time::Duration;
/// let m = dlock_client::MultiLock::new([client.lock("a"), client.lock("b"), client.lock("c")]);
/// match m.try_acquire_for(Duration::from_millis(500), None).await? {
///     Some(g) => { g.release().await?; }
///     None => println!("one of them stayed busy: none is held"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    members: Vec<Member>,
}

impl MultiLock {
    /// A multi-lock over `locks` (sorted into the canonical order).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let m = dlock_client::MultiLock::new([client.lock("b"), client.lock("a")]);
    /// assert_eq!(m.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> MultiLock {
        MultiLock::of_members(locks.into_iter().map(|l| Member::of(&l)).collect())
    }

    /// A multi-lock over the exclusive locks `(node, name)`, each with a new owner, whether
    /// or not the nodes are up (see [`Node`]).
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// use dlock_client::{Client, MultiLock, Node};
    /// let a = Node::connect(Client::builder("redis://127.0.0.1:6379/")).await?;
    /// let b = Node::connect(Client::builder("redis://127.0.0.1:6380/")).await?;
    /// let m = MultiLock::on_nodes([(a, "account:1"), (b, "account:2")]);
    /// match m.acquire().await {
    ///     Ok(g) => g.release().await?,
    ///     Err(dlock_client::Error::Connect { addr, .. }) => eprintln!("{addr} is down"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn on_nodes<S: Into<String>>(members: impl IntoIterator<Item = (Node, S)>) -> MultiLock {
        MultiLock::of_members(
            members
                .into_iter()
                .map(|(node, name)| {
                    let owner = node.new_owner();
                    Member::exclusive(node, name.into(), owner)
                })
                .collect(),
        )
    }

    pub(crate) fn of_members(mut members: Vec<Member>) -> MultiLock {
        members.sort_by_key(Member::order_key);
        MultiLock { members }
    }

    /// Number of members.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(dlock_client::MultiLock::new([client.lock("a")]).len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when there are no members.
    /// ```
    /// assert!(dlock_client::MultiLock::new([]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members' names, in acquisition order.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let m = dlock_client::MultiLock::new([client.lock("b"), client.lock("a")]);
    /// assert_eq!(m.names().collect::<Vec<_>>(), ["a", "b"]);
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.name.as_str())
    }

    /// The members' nodes, in acquisition order.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let m = dlock_client::MultiLock::new([client.lock("a")]);
    /// assert!(m.nodes().all(|n| n.is_up()));
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.members.iter().map(|m| &m.node)
    }

    /// Member `m`'s lock handle: [`Error::Connect`] naming the node when it is down.
    async fn member_lock(m: &Member) -> Result<Lock> {
        m.lock(Some(m.node.connect_limit())).await
    }

    /// Wait as long as it takes for all members; watchdog on.
    ///
    /// A member whose node is down (or fails): [`Error::Connect`] naming it, with every
    /// member already taken released.
    ///
    /// Cancel safety: cancel-safe: members already taken are released in the background
    /// when the future is dropped, and each member's acquire is cancel-safe.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]).acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<MultiLockGuard> {
        let mut held = Vec::with_capacity(self.members.len());
        for m in &self.members {
            let got = match MultiLock::member_lock(m).await {
                Ok(l) => l.acquire().await,
                Err(e) => Err(e),
            };
            match got {
                Ok(g) => held.push(g),
                Err(e) => {
                    rollback(held).await;
                    return Err(m.node.name_error(e));
                }
            }
        }
        Ok(MultiLockGuard { guards: held })
    }

    /// One attempt at each member, no waiting; all or none.
    ///
    /// Cancel safety: cancel-safe (as [`acquire`](Self::acquire)).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let m = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]);
    /// if let Some(g) = m.try_acquire().await? { g.release().await?; }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<MultiLockGuard>> {
        self.try_acquire_for(Duration::ZERO, None).await
    }

    /// Wait up to `wait` in total for all members. With `lease`, every member lapses after
    /// it (counted from its own grant; the first member taken lapses first), without it the
    /// watchdogs renew them. `Ok(None)` on time-out, with nothing left held.
    /// [`Duration::MAX`] = no limit. A member whose node is down: [`Error::Connect`] naming
    /// it, with nothing left held.
    ///
    /// Cancel safety: cancel-safe (as [`acquire`](Self::acquire)).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let m = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]);
    /// let g = m.try_acquire_for(Duration::from_secs(1), Some(Duration::from_secs(10))).await?;
    /// # let _ = g; Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        // No deadline: no limit.
        let deadline = Instant::now().checked_add(wait);
        let mut held = Vec::with_capacity(self.members.len());
        for m in &self.members {
            let got = match MultiLock::member_lock(m).await {
                Ok(l) => {
                    let left = deadline.map_or(Duration::MAX, |d| {
                        d.saturating_duration_since(Instant::now())
                    });
                    l.try_acquire_for(left, lease).await
                }
                Err(e) => Err(e),
            };
            match got {
                Ok(Some(g)) => held.push(g),
                Ok(None) => {
                    rollback(held).await;
                    return Ok(None);
                }
                Err(e) => {
                    rollback(held).await;
                    return Err(m.node.name_error(e));
                }
            }
        }
        Ok(Some(MultiLockGuard { guards: held }))
    }
}

/// Release every guard (in reverse order), ignoring errors.
pub(crate) async fn rollback(held: Vec<LockGuard>) {
    for g in held.into_iter().rev() {
        let _ = g.release().await;
    }
}

/// All members of a [`MultiLock`], held. [`release`](Self::release) frees them all;
/// dropping it releases them in the background.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let g = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]).acquire().await?;
/// assert_eq!(g.guards().len(), 2);
/// let lost = g.lost(); // fires when any member is lost
/// # let _ = lost;
/// g.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The member guards, in acquisition order.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
    /// assert_eq!(g.guards()[0].name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The members' fencing tokens (for members acquired [`fenced`](Lock::fenced)).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a").fenced()]).acquire().await?;
    /// assert!(g.fencing_tokens()[0].is_some());
    /// # Ok(()) }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.guards.iter().map(|g| g.fencing_token()).collect()
    }

    /// A signal that fires when any member is lost (or released).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a"), client.lock("b")]).acquire().await?;
    /// let lost = g.lost();
    /// tokio::spawn(async move { eprintln!("lost: {:?}", lost.await) });
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> GroupLost {
        GroupLost {
            signals: self.guards.iter().map(|g| g.lost()).collect(),
            tolerate: 0,
            deadline: None,
        }
    }

    /// Release every member: `Ok(())` when all were still held, else the first member's
    /// error ([`Error::NotHeld`] for a member that was lost); every member is released
    /// either way.
    ///
    /// Cancel safety: members not yet released when the future is dropped are released in
    /// the background.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        let mut err: Option<Error> = None;
        for g in self.guards.into_iter().rev() {
            if let Err(e) = g.release().await {
                err.get_or_insert(e);
            }
        }
        err.map_or(Ok(()), Err)
    }
}

/// Fires when more than `tolerate` of a group's locks are lost (multi-lock: any one;
/// RedLock: so many that fewer than a quorum remain), or at the group's validity deadline.
/// Clone it, move it, `.await` it.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
/// let lost: dlock_client::multilock::GroupLost = g.lost();
/// assert!(lost.check().is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct GroupLost {
    pub(crate) signals: Vec<LostSignal>,
    pub(crate) tolerate: usize,
    pub(crate) deadline: Option<Instant>,
}

impl GroupLost {
    /// `Some(reason)` if the group already counts as lost (the first member's reason, or
    /// `LeaseExpired` at the validity deadline).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
    /// assert!(g.lost().check().is_none());
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Option<LostReason> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(LostReason::LeaseExpired);
        }
        let lost: Vec<LostReason> = self.signals.iter().filter_map(|s| s.check()).collect();
        (lost.len() > self.tolerate).then(|| lost[0])
    }

    /// Wait until the group counts as lost.
    ///
    /// Cancel safety: cancel-safe (it only watches).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = dlock_client::MultiLock::new([client.lock("a")]).acquire().await?;
    /// let reason = g.lost().wait().await;
    /// # let _ = reason; Ok(()) }
    /// ```
    pub async fn wait(self) -> LostReason {
        let mut pending: Vec<Pin<Box<dyn Future<Output = LostReason> + Send>>> = self
            .signals
            .iter()
            .cloned()
            .map(|s| Box::pin(s.wait()) as Pin<Box<dyn Future<Output = LostReason> + Send>>)
            .collect();
        let mut lost = Vec::new();
        let until = self.deadline;
        loop {
            if lost.len() > self.tolerate || pending.is_empty() {
                return lost.first().copied().unwrap_or(LostReason::Released);
            }
            let next = futures::future::select_all(pending);
            let r = match until {
                Some(d) => match tokio::time::timeout_at(d, next).await {
                    Ok(r) => r,
                    Err(_) => return LostReason::LeaseExpired,
                },
                None => next.await,
            };
            let (reason, _i, rest) = r;
            lost.push(reason);
            pending = rest;
        }
    }
}

impl IntoFuture for GroupLost {
    type Output = LostReason;
    type IntoFuture = Pin<Box<dyn Future<Output = LostReason> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.wait())
    }
}
