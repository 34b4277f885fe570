//! [`Lock`]: a handle on one lock name for one owner, and the acquire calls.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::backend::{Grant, Permits, Release, Request, Wait};
use crate::config::wire_ms;
use crate::holds::NewHold;
use crate::kind::LockKind;
use crate::topology::Stamp;
use crate::{Client, Error, LockGuard, Owner, Result};

/// The longest `LOCKDELAY` the module accepts.
const MAX_LOCK_DELAY: Duration =
    Duration::from_millis(dlock_core::limits::MAX_LOCK_DELAY_MS as u64);

/// A handle on one lock name for one owner. Cheap to clone. Nothing is sent until you call
/// a method.
///
/// **Cancel safety.** Every acquire call is cancel-safe in this sense: dropping its future
/// (a `select!` branch losing, a `timeout`, an aborted task) never leaves a hold behind
/// for longer than the clean-up takes (one or two round trips, in the background): a
/// grant that arrives after the drop is released again. The queries (`is_locked`, ...)
/// only read and are cancel-safe.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// use std::time::Duration;
/// let lock = client.lock("inventory");
/// if let Some(g) = lock.try_acquire_for(Duration::from_millis(200), Some(Duration::from_secs(5))).await? {
///     // held for at most 5 s, no watchdog
///     g.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    pub(crate) client: Client,
    name: Arc<str>,
    owner: Owner,
    fence: bool,
    /// `LOCKDELAY` on every grant (exclusive and WRITE only).
    lock_delay: Option<Duration>,
    kind: LockKind,
    /// What a semaphore handle asks for (kind [`LockKind::Semaphore`]).
    permits: Option<Permits>,
}

impl Lock {
    pub(crate) fn new(client: Client, name: String, owner: Owner, kind: LockKind) -> Lock {
        Lock {
            client,
            name: Arc::from(name),
            owner,
            fence: false,
            lock_delay: None,
            kind,
            permits: None,
        }
    }

    /// The same name as a semaphore handle taking `permits` (see [`crate::Semaphore`]).
    pub(crate) fn with_permits(mut self, permits: Permits) -> Lock {
        self.kind = LockKind::Semaphore;
        self.permits = Some(permits);
        self
    }

    /// Holds one grant stands for: the permits asked for, 1 for locks.
    pub(crate) fn count(&self) -> u64 {
        self.permits.map_or(1, |p| u64::from(p.count))
    }

    /// The lock key.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.lock("k").name(), "k");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The owner this handle acts for.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let owner = client.owner();
    /// assert_eq!(client.lock_as("k", &owner).owner(), &owner);
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
    /// The same lock asking for a fencing token on every acquire (`FENCE`, native backend
    /// only; the script backend answers [`Error::Unsupported`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("ledger").fenced().acquire().await?;
    /// let token: u64 = g.fencing_token().unwrap();
    /// # let _ = token; Ok(()) }
    /// ```
    pub fn fenced(mut self) -> Lock {
        self.fence = true;
        self
    }

    pub(crate) fn is_fenced(&self) -> bool {
        self.fence
    }

    /// The same lock with a lock-delay (`LOCKDELAY`, native backend): when a hold of this
    /// handle ends **without a release** (its lease lapsed, e.g. a paused process whose
    /// watchdog could not renew, or a lease cut by [`bind_grace`](crate::ClientBuilder::bind_grace)
    /// after its connection closed), the server grants the lock to nobody for `delay`, so a
    /// holder that was only paused and may still be writing does not meet the next one.
    /// Waiters keep their place and are served when the delay ends; a release ends the hold
    /// without any delay. At most 60 s (whole milliseconds).
    ///
    /// For exclusive locks and the write side of a read-write lock only: an acquire of a
    /// read side or of a semaphore with a lock-delay answers [`Error::Config`]; on the
    /// script backend [`Error::Unsupported`].
    ///
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let g = client.lock("ledger").lock_delay(Duration::from_secs(5)).acquire().await?;
    /// g.release().await?; // released: no delay
    /// # Ok(()) }
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Lock {
        self.lock_delay = Some(delay);
        self
    }

    /// The lock-delay this handle asks for, if any.
    pub(crate) fn lock_delay_of(&self) -> Option<Duration> {
        self.lock_delay
    }

    /// `LOCKDELAY ms` for the wire; [`Error::Config`] where the server has no such option.
    fn lock_delay_ms(&self) -> Result<Option<u64>> {
        let Some(d) = self.lock_delay else {
            return Ok(None);
        };
        if !matches!(self.kind, LockKind::Exclusive | LockKind::Write) {
            return Err(Error::Config(format!(
                "lock_delay is for exclusive locks and write locks, not {:?}",
                self.kind
            )));
        }
        if d > MAX_LOCK_DELAY {
            return Err(Error::Config(format!(
                "lock_delay {d:?} is above the server's maximum {MAX_LOCK_DELAY:?}"
            )));
        }
        self.client.backend.check_lock_delay()?;
        Ok(Some(d.as_millis() as u64))
    }

    /// Which lock this handle takes: exclusive, or a side of a read-write lock.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.rwlock("k").read().kind(), dlock_client::LockKind::Read);
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The same lock name acting for another owner.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let owner = client.owner();
    /// let lock = client.lock("k").with_owner(&owner);
    /// assert_eq!(lock.owner(), &owner);
    /// # Ok(()) }
    /// ```
    pub fn with_owner(mut self, owner: &Owner) -> Lock {
        self.owner = owner.clone();
        self
    }

    /// Wait as long as it takes; the watchdog keeps the lease alive until release.
    ///
    /// On the native backend the wait is one `DLOCK.ACQUIRE ... WAIT 0` on a dedicated
    /// connection with no client-side time-out: the request keeps its FIFO place for the
    /// whole wait, however long. (With [`bind_grace`](crate::ClientBuilder::bind_grace) on,
    /// the default, one try on the shared connection comes first, so that a lock free at
    /// once is bound to the client's long-lived connection; see the README's *Owners that
    /// fail*.) Connection failures are retried per [`Retry`](crate::Retry).
    ///
    /// Cancel safety: cancel-safe (see [`Lock`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.acquire_waiting(None).await
    }

    /// Wait as long as it takes, then hold for `lease` (no watchdog): Redisson's
    /// `lock(leaseTime)`. [`Duration::MAX`] = no limit (the module's maximum lease).
    ///
    /// Cancel safety: cancel-safe (see [`Lock`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let g = client.lock("k").acquire_with_lease(Duration::from_secs(10)).await?;
    /// assert!(!g.is_watched());
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        if lease.is_zero() {
            return Err(Error::Config("lease must be > 0".into()));
        }
        self.acquire_waiting(Some(lease)).await
    }

    async fn acquire_waiting(&self, lease: Option<Duration>) -> Result<LockGuard> {
        let retry = self.client.inner.config.retry;
        let mut n = 0;
        loop {
            match self.acquire_impl(Wait::Forever, lease).await {
                Ok(Some(g)) => return Ok(g),
                Ok(None) => continue,
                Err(e) if e.is_connection() && n < retry.attempts() => {
                    tokio::time::sleep(retry.delay(n)).await;
                    n += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt, no waiting; watchdog on when granted.
    ///
    /// Cancel safety: cancel-safe (see [`Lock`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// match client.lock("k").try_acquire().await? {
    ///     Some(g) => { g.release().await?; }
    ///     None => println!("busy"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_impl(Wait::No, None).await
    }

    /// Wait up to `wait` (zero: one attempt; [`Duration::MAX`]: no limit). With `lease`
    /// the lock lapses after it (no watchdog; must be > 0; [`Duration::MAX`] = the
    /// module's maximum), without it the watchdog renews it until release. `Ok(None)` on
    /// time-out.
    ///
    /// Cancel safety: cancel-safe (see [`Lock`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let g = client.lock("k").try_acquire_for(Duration::from_secs(1), None).await?; // watchdog
    /// # let _ = g;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        if lease.is_some_and(|l| l.is_zero()) {
            return Err(Error::Config("lease must be > 0".into()));
        }
        self.acquire_impl(Wait::from_duration(wait), lease).await
    }

    /// Delete the lock whoever holds it (native: plain `DEL`, which wakes the module's
    /// waiters; script: Redisson's force-unlock script, `DEL` + publish). True if a lock was
    /// deleted.
    ///
    /// Cancel safety: the delete may or may not have happened when the future is dropped.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let deleted = client.lock("stuck").force_unlock().await?;
    /// # let _ = deleted;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let inner = &self.client.inner;
        inner
            .within_response_timeout(self.client.backend.force_unlock(inner, &self.name))
            .await
    }

    /// Whether anyone holds the lock (`EXISTS`).
    ///
    /// Cancel safety: cancel-safe (read only).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert!(!client.lock("free").is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let n: i64 = self.query(redis::cmd("EXISTS").arg(&*self.name)).await?;
        Ok(n == 1)
    }

    /// Whether this handle's owner holds it (`HEXISTS`).
    ///
    /// Cancel safety: cancel-safe (read only).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let lock = client.lock("k");
    /// let _g = lock.acquire().await?;
    /// assert!(lock.is_held_by_owner().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_owner(&self) -> Result<bool> {
        let field = self.kind.field(self.owner.id());
        let n: i64 = self
            .query(redis::cmd("HEXISTS").arg(&*self.name).arg(field))
            .await?;
        Ok(n == 1)
    }

    /// The lock's remaining lease (`PTTL`): `None` when nobody holds it (or it has no expiry).
    ///
    /// Cancel safety: cancel-safe (read only).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let lock = client.lock("k");
    /// let _g = lock.acquire().await?;
    /// assert!(lock.remaining_lease().await?.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let ms: i64 = self.query(redis::cmd("PTTL").arg(&*self.name)).await?;
        Ok((ms >= 0).then(|| Duration::from_millis(ms as u64)))
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let inner = &self.client.inner;
        inner
            .within_response_timeout(async {
                cmd.query_async(&mut inner.link.shared().clone())
                    .await
                    .map_err(|e| Error::from_redis(&self.name, e))
            })
            .await
    }

    /// Send one release for this handle's owner whether or not a guard exists (RedLock's
    /// clean-up on nodes whose answer was lost). Errors are ignored.
    pub(crate) async fn release_blind(&self, limit: Duration) {
        let inner = &self.client.inner;
        let release = Release {
            key: &self.name,
            owner: self.owner.id(),
            kind: self.kind,
            lease: inner.config.lease,
            count: self.count(),
        };
        let cmd = self.client.backend.release_cmd(inner, &release);
        let mut conn = inner.link.shared().clone();
        let _ = tokio::time::timeout(limit, cmd.query_async::<Value>(&mut conn)).await;
    }

    pub(crate) async fn acquire_impl(
        &self,
        wait: Wait,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let inner = &self.client.inner;
        let backend = &self.client.backend;
        inner.check_open()?;
        if self.fence {
            backend.check_fencing()?;
        }
        let lock_delay_ms = self.lock_delay_ms()?;
        let watched = lease.is_none();
        // Duration::MAX (no limit) is the module's longest lease.
        let lease = lease
            .unwrap_or(inner.config.lease)
            .min(Duration::from_millis(crate::config::MAX_MS));
        let req = Request {
            key: &self.name,
            owner: self.owner.id(),
            kind: self.kind,
            permits: self.permits,
            lease_ms: wire_ms(lease),
            fence: self.fence,
            bind: watched,
            lock_delay_ms,
            wait,
            started: Instant::now(),
        };
        // In flight until registered (declared before the abandon guard, so dropped after
        // it: a clean-up never waits for its own acquire).
        let _flight = inner
            .in_flight
            .start(&self.name, self.owner.arc_ref(), self.kind)
            .await;
        // Until the reply is in hand and registered, a drop (cancellation) or a lost reply
        // leaves the server's answer unknown: the abandon guard then checks and gives back
        // a grant nobody will use.
        let abandon = Abandon::arm(self, lease);
        // The contract's bound: a wait within its time-out plus one response time-out, a
        // try within one; a wait without limit until granted. Any of them ends at close.
        // Boxed: the backend's future is deep, and without the box an application's `async fn`
        // that awaits a semaphore or multi-lock acquire passed the compiler's default
        // recursion limit while laying out its state machine (the doctests caught it).
        let call = Box::pin(backend.acquire(inner, &req));
        let rt = inner.config.response_timeout;
        let asked = match wait {
            Wait::No => inner.bounded(rt, call).await,
            Wait::For(d) => {
                let end = req.started + d.saturating_add(rt);
                inner
                    .bounded(end.saturating_duration_since(Instant::now()), call)
                    .await
            }
            Wait::Forever => inner.until_closed(call).await,
        };
        let grant = match asked {
            Ok(Some(g)) => g,
            Ok(None) => {
                abandon.disarm();
                return Ok(None);
            }
            // The request may have been granted after all: the guard checks (on drop).
            Err(e) if e.is_connection() => return Err(e),
            Err(e) => {
                abandon.disarm();
                return Err(e);
            }
        };
        let acks = grant.acks;
        let guard = self.register(lease, watched, grant);
        abandon.disarm();
        // The failover guard: a grant that reached too few replicas is given back.
        if let (Some((wanted, _)), Some(acked)) = (inner.config.min_replicas, acks) {
            if acked < wanted {
                let _ = guard.release().await;
                return Err(Error::NotReplicated {
                    key: self.name.to_string(),
                    acked,
                    wanted,
                });
            }
        }
        Ok(Some(guard))
    }

    /// Record a grant in the registry (the watchdog's list) and make its guard.
    fn register(&self, lease: Duration, watched: bool, grant: Grant) -> LockGuard {
        let inner = &self.client.inner;
        let count = self.count();
        // Watched holds are the bound ones (when the backend binds).
        let bound = watched
            .then(|| self.client.backend.bound(inner, lease))
            .flatten();
        let (entry, holds) = inner.registry.hold(NewHold {
            key: &self.name,
            owner: self.owner.arc_ref(),
            kind: self.kind,
            lease: if watched { inner.config.lease } else { lease },
            watched,
            deadline: grant.at + lease,
            count,
            bound: bound.map(|b| (b, grant.bound.unwrap_or(Stamp::unlinked(grant.at)))),
        });
        LockGuard::new(
            self.client.clone(),
            entry,
            grant.count.unwrap_or(holds),
            grant.token,
            count,
        )
    }
}

/// Armed while an acquire's request is in flight. Dropped armed (the acquire future was
/// dropped, or its connection failed), it spawns [`give_back_abandoned`].
struct Abandon<'a> {
    lock: Option<&'a Lock>,
    lease: Duration,
}

impl<'a> Abandon<'a> {
    fn arm(lock: &'a Lock, lease: Duration) -> Abandon<'a> {
        Abandon {
            lock: Some(lock),
            lease,
        }
    }
    fn disarm(mut self) {
        self.lock = None;
    }
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            let lock = lock.clone();
            let lease = self.lease;
            let rt = lock.client.runtime().clone();
            rt.spawn(async move { give_back_abandoned(lock, lease).await });
        }
    }
}

/// After an abandoned acquire: once no other acquire or release of the same owner on this
/// lock is in flight (see [`InFlight`](crate::inflight::InFlight)) and the server is done
/// with the request, compare the owner's hold count (permits) on the server with the holds
/// this client knows of; a surplus is the abandoned grant, released once (up to the
/// permits it asked for). When another operation of the owner stays in flight for longer
/// than twice the response time-out (a long wait), nothing is released: the abandoned
/// grant, if any, is not renewed and lapses with its lease.
async fn give_back_abandoned(lock: Lock, lease: Duration) {
    let inner = &lock.client.inner;
    let backend = &lock.client.backend;
    let owner = lock.owner.id();
    let within = inner.config.response_timeout.saturating_mul(2);
    let Some(_quiet) = inner
        .in_flight
        .quiet(&lock.name, lock.owner.arc_ref(), lock.kind, within)
        .await
    else {
        return;
    };
    backend.settle_abandoned(inner, &lock.name, owner).await;
    let field = lock.kind.field(owner);
    let on_server: redis::RedisResult<Option<u64>> = redis::cmd("HGET")
        .arg(&*lock.name)
        .arg(field)
        .query_async(&mut inner.link.shared().clone())
        .await;
    let Ok(Some(on_server)) = on_server else {
        return;
    };
    let known = inner.registry.holds_of(&lock.name, owner, lock.kind);
    if on_server > known {
        let surplus = (on_server - known).min(lock.count());
        let release = Release {
            key: &lock.name,
            owner,
            kind: lock.kind,
            lease,
            count: surplus,
        };
        let cmd = backend.release_cmd(inner, &release);
        let _: redis::RedisResult<Value> = cmd.query_async(&mut inner.link.shared().clone()).await;
    }
}

impl Client {
    /// A lock handle on `name` with its own new owner: acquiring twice through this handle
    /// (or its clones) is reentrant; another handle from `lock(name)` is another owner.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let a = client.lock("k");
    /// let b = client.lock("k");
    /// assert_ne!(a.owner(), b.owner());
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        self.lock_as(name, &self.owner())
    }

    /// A lock handle on `name` acting for `owner` (reentrant across every handle of that owner).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let owner = client.owner();
    /// let g = client.lock_as("k", &owner).acquire().await?;
    /// assert_eq!(g.owner_id(), owner.id());
    /// # Ok(()) }
    /// ```
    pub fn lock_as(&self, name: impl Into<String>, owner: &Owner) -> Lock {
        Lock::new(
            self.clone(),
            name.into(),
            owner.clone(),
            LockKind::Exclusive,
        )
    }
}
