//! # dlock-client
//!
//! Redisson-style distributed locks on Redis, with a watchdog that keeps held locks alive
//! and tells you when one is lost.
//!
//! Two backends speak the same data layout (a hash `owner -> hold count` with a lease):
//! - **native**: the `DLOCK.*` commands of the dlock Redis module (server-side FIFO waiting,
//!   fencing tokens);
//! - **script**: plain Redis, with Lua scripts copied from Redisson's `RLock`
//!   (see [`scripts`]); waiters subscribe to the unlock channel and retry.
//!
//! The backend is picked from `MODULE LIST` unless you choose one ([`Backend`]).
//!
//! ```no_run
//! # async fn demo() -> dlock_client::Result<()> {
//! use std::time::Duration;
//! let client = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
//! let lock = client.lock("orders:42");
//! let guard = lock.acquire().await?;          // waits; the watchdog renews the lease
//! let lost = guard.lost();                    // resolves if the lock is lost
//! tokio::select! {
//!     _ = tokio::time::sleep(Duration::from_secs(1)) => { /* critical section */ }
//!     reason = lost => eprintln!("lock lost: {reason:?}"),
//! }
//! assert!(guard.release().await?);            // true: we still held it
//! # Ok(()) }
//! ```
//!
//! For threads without async, see [`blocking`].

#![warn(missing_docs)]

pub mod blocking;
mod conn;
mod error;
pub mod multilock;
pub mod redlock;
pub mod rwlock;
pub mod scripts;
mod subscriber;
mod watchdog;

pub use conn::Connection;
pub use error::{Error, Result};
pub use multilock::{MultiLock, MultiLockGuard};
pub use redlock::{RedLock, RedLockGuard};
pub use rwlock::RwLock;

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conn::ConnKind;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::Value;
use tokio::sync::watch;
use tokio::time::Instant;

/// Which command set the client uses.
///
/// ```
/// use dlock_client::Backend;
/// assert_eq!(Backend::default(), Backend::Auto);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// `Native` when `MODULE LIST` shows the module `dlock`, else `Script`.
    #[default]
    Auto,
    /// The `DLOCK.*` commands of the dlock module.
    Native,
    /// Redisson's Lua scripts on plain Redis.
    Script,
}

/// Reconnect and retry policy: exponential backoff `base * 2^n`, capped at `max_delay`.
///
/// ```
/// use std::time::Duration;
/// let r = dlock_client::Retry { attempts: 3, base_delay: Duration::from_millis(50), max_delay: Duration::from_secs(1) };
/// assert_eq!(r.delay(0), Duration::from_millis(50));
/// assert_eq!(r.delay(10), Duration::from_secs(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// How many times a failed connection is retried (by the connection manager, and by
    /// [`Lock::acquire`] on connection errors).
    pub attempts: u32,
    /// First delay.
    pub base_delay: Duration,
    /// Longest delay.
    pub max_delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 6,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl Retry {
    /// Delay before retry number `n` (0-based).
    ///
    /// ```
    /// let r = dlock_client::Retry::default();
    /// assert!(r.delay(1) > r.delay(0));
    /// ```
    pub fn delay(&self, n: u32) -> Duration {
        let d = self.base_delay.saturating_mul(1u32 << n.min(20));
        d.min(self.max_delay)
    }
}

/// Client settings; build them with [`Client::builder`].
///
/// ```
/// let c = dlock_client::Config::default();
/// assert_eq!(c.lease, std::time::Duration::from_secs(30));
/// assert_eq!(c.renew_interval(), std::time::Duration::from_secs(10));
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    /// Lease of watchdog-held locks (Redisson's `lockWatchdogTimeout`), default 30 s.
    pub lease: Duration,
    /// How often the watchdog renews; `None` = `lease / 3`.
    pub renew_interval: Option<Duration>,
    /// Reconnect / retry policy.
    pub retry: Retry,
    /// Owner id prefix; `None` = 128-bit random hex, fresh per client.
    pub owner_prefix: Option<String>,
    /// Backend choice.
    pub backend: Backend,
    /// Unlock channel prefix (script backend), default `redisson_lock__channel`.
    pub channel_prefix: String,
    /// Client-side time-out of one command (not of a wait), default 5 s.
    pub response_timeout: Duration,
    /// Renewals per pipeline, default 1000.
    pub renew_batch: usize,
    /// Failover guard: `Some((n, timeout))` sends `WAIT n timeout` after every grant and
    /// renewal; see [`ClientBuilder::min_replicas`]. Default `None`.
    pub min_replicas: Option<(u32, Duration)>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lease: Duration::from_secs(30),
            renew_interval: None,
            retry: Retry::default(),
            owner_prefix: None,
            backend: Backend::Auto,
            channel_prefix: scripts::DEFAULT_CHANNEL_PREFIX.to_string(),
            response_timeout: Duration::from_secs(5),
            renew_batch: 1000,
            min_replicas: None,
        }
    }
}

impl Config {
    /// The effective renew interval (`lease / 3` unless set).
    ///
    /// ```
    /// let mut c = dlock_client::Config::default();
    /// c.renew_interval = Some(std::time::Duration::from_secs(1));
    /// assert_eq!(c.renew_interval(), std::time::Duration::from_secs(1));
    /// ```
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
            .unwrap_or(self.lease / 3)
            .max(Duration::from_millis(1))
    }
}

/// Builder of a [`Client`].
///
/// ```no_run
/// # async fn demo() -> dlock_client::Result<()> {
/// use std::time::Duration;
/// use dlock_client::{Backend, Client};
/// let client = Client::builder("redis://127.0.0.1:6379/")
///     .lease(Duration::from_secs(10))
///     .renew_interval(Duration::from_secs(2))
///     .owner_prefix("worker-7")
///     .backend(Backend::Script)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    target: Target,
    config: Config,
}

/// Where a client connects.
#[derive(Clone, Debug)]
enum Target {
    Single(String),
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
    Cluster(Vec<String>),
}

impl ClientBuilder {
    /// Lease of watchdog-held locks (default 30 s).
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").lease(std::time::Duration::from_secs(10));
    /// # let _ = b;
    /// ```
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }
    /// Renew interval (default lease / 3).
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.config.renew_interval = Some(every);
        self
    }
    /// Retry / backoff policy.
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").retry(dlock_client::Retry::default());
    /// # let _ = b;
    /// ```
    pub fn retry(mut self, retry: Retry) -> Self {
        self.config.retry = retry;
        self
    }
    /// Owner id prefix (default: 128-bit random hex).
    pub fn owner_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.owner_prefix = Some(prefix.into());
        self
    }
    /// Backend (default [`Backend::Auto`]).
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").backend(dlock_client::Backend::Native);
    /// # let _ = b;
    /// ```
    pub fn backend(mut self, backend: Backend) -> Self {
        self.config.backend = backend;
        self
    }
    /// Unlock channel prefix (default `redisson_lock__channel`).
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").channel_prefix("myapp_lock__channel");
    /// # let _ = b;
    /// ```
    pub fn channel_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.channel_prefix = prefix.into();
        self
    }
    /// Client-side time-out of one command (default 5 s).
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").response_timeout(std::time::Duration::from_secs(1));
    /// # let _ = b;
    /// ```
    pub fn response_timeout(mut self, t: Duration) -> Self {
        self.config.response_timeout = t;
        self
    }
    /// Renewals per pipeline (default 1000).
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").renew_batch(500);
    /// # let _ = b;
    /// ```
    pub fn renew_batch(mut self, n: usize) -> Self {
        self.config.renew_batch = n.max(1);
        self
    }
    /// Failover guard: after every grant and every renewal, send `WAIT n timeout` (Redis
    /// replication `WAIT`) on the connection that carried it. Fewer than `n` replica
    /// acknowledgements: an acquire releases its grant and answers
    /// [`Error::NotReplicated`]; a renewal marks the lock lost
    /// ([`LostReason::NotReplicated`]). See the README's *Failover guard* for the window
    /// that remains. `timeout` must be shorter than the response time-out and the lease
    /// (else [`build`](Self::build) answers [`Error::Config`]); keep it well below the renew
    /// interval.
    /// ```
    /// use std::time::Duration;
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").min_replicas(1, Duration::from_millis(200));
    /// # let _ = b;
    /// ```
    pub fn min_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.config.min_replicas = (n > 0).then_some((n, timeout));
        self
    }
    /// Replace the whole configuration.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }
    /// Connect, pick the backend and start the watchdog task (on the current tokio runtime).
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let client = dlock_client::Client::builder("redis://127.0.0.1:6379/").build().await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn build(self) -> Result<Client> {
        Client::connect(self.target, self.config).await
    }
}

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// An owner identity: reentrancy is per owner. Cheap to clone and `Send`, so one owner can
/// be handed from task to task; a lock acquired by an owner can be re-acquired (hold count
/// + 1) or released by any task using the same owner.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let owner = client.owner();
/// let g1 = client.lock_as("job", &owner).acquire().await?;
/// let o2 = owner.clone();
/// let c2 = client.clone();
/// let g2 = tokio::spawn(async move { c2.lock_as("job", &o2).try_acquire().await })
///     .await.unwrap()?.expect("reentrant");
/// assert_eq!(g2.hold_count(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    id: Arc<str>,
}

impl Owner {
    /// An owner with exactly this id (1..=512 bytes; not `mode`).
    ///
    /// ```
    /// let o = dlock_client::Owner::from_id("abc:1");
    /// assert_eq!(o.id(), "abc:1");
    /// ```
    pub fn from_id(id: impl Into<String>) -> Owner {
        Owner {
            id: Arc::from(id.into()),
        }
    }
    /// The owner string stored in the lock hash.
    /// ```
    /// assert_eq!(dlock_client::Owner::from_id("x:1").id(), "x:1");
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }
}

pub(crate) type Registry = Mutex<HashMap<(String, String, LockKind), Arc<Entry>>>;

pub(crate) struct Inner {
    /// The single node, the master found at connect time, or the first cluster seed.
    redis: redis::Client,
    /// What [`Client::connection`] hands out.
    manager: ConnectionManager,
    pub(crate) conn: Connection,
    pub(crate) config: Config,
    pub(crate) native: bool,
    prefix: String,
    pub(crate) registry: Registry,
    wait_pool: Mutex<HashMap<String, Vec<MultiplexedConnection>>>,
    subscriber: subscriber::Subscribers,
    pub(crate) scripts: Scripts,
    runtime: tokio::runtime::Handle,
    watchdog: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = self.watchdog.lock().unwrap().take() {
            h.abort();
        }
    }
}

pub(crate) struct Scripts {
    pub(crate) lock: redis::Script,
    pub(crate) unlock: redis::Script,
    pub(crate) renew: redis::Script,
    pub(crate) force_unlock: redis::Script,
    pub(crate) rw_lock: redis::Script,
    pub(crate) rw_unlock: redis::Script,
    pub(crate) rw_renew: redis::Script,
}

/// A connection to one Redis node, shared by all locks it hands out. Cheap to clone.
/// One background task per client (the watchdog) renews every watchdog-held lock.
///
/// ```no_run
/// # async fn demo() -> dlock_client::Result<()> {
/// let client = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
/// println!("native: {}", client.is_native());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("native", &self.inner.native)
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl Client {
    /// Connect with default settings.
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let client = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn open(url: impl Into<String>) -> Result<Client> {
        Client::builder(url).build().await
    }

    /// A builder for `url` (`redis://host:port/db`).
    ///
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1:6379/");
    /// # let _ = b;
    /// ```
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            target: Target::Single(url.into()),
            config: Config::default(),
        }
    }

    /// A builder for a master managed by Redis Sentinel: `sentinels` are sentinel URLs
    /// (`redis://host:26379/`), `service` the monitored master's name. The client asks the
    /// sentinels for the master and asks again after a connection error or a `READONLY`
    /// reply, so it follows failovers. Combine with
    /// [`min_replicas`](ClientBuilder::min_replicas) to keep locks across a failover.
    ///
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let client = dlock_client::Client::sentinel_builder(
    ///         ["redis://127.0.0.1:26379/", "redis://127.0.0.1:26380/"], "mymaster")
    ///     .min_replicas(1, Duration::from_millis(500))
    ///     .build().await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn sentinel_builder<I, S>(sentinels: I, service: impl Into<String>) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder {
            target: Target::Sentinel {
                sentinels: sentinels.into_iter().map(Into::into).collect(),
                service: service.into(),
            },
            config: Config::default(),
        }
    }

    /// A builder for a Redis Cluster, from one or more seed node URLs. Locks may use any
    /// key; each command goes to the node owning the key's slot (redis-rs follows `MOVED`
    /// and `ASK`). See the README's *Redis Cluster* section.
    ///
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let client = dlock_client::Client::cluster_builder(["redis://127.0.0.1:7000/"]).build().await?;
    /// let g = client.lock("orders:42").acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster_builder<I, S>(nodes: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder {
            target: Target::Cluster(nodes.into_iter().map(Into::into).collect()),
            config: Config::default(),
        }
    }

    async fn connect(target: Target, config: Config) -> Result<Client> {
        if config.lease.is_zero() {
            return Err(Error::Config("lease must be > 0".into()));
        }
        if let Some((_, t)) = config.min_replicas {
            if t >= config.response_timeout || t >= config.lease {
                return Err(Error::Config(
                    "the min_replicas WAIT time-out must be shorter than the response time-out and the lease".into(),
                ));
            }
        }
        let (redis, shared) = match &target {
            Target::Single(url) => (
                redis::Client::open(url.as_str()).map_err(|e| Error::Config(e.to_string()))?,
                None,
            ),
            Target::Sentinel { sentinels, service } => {
                let s = redis::sentinel::Sentinel::build(sentinels.clone())
                    .map_err(|e| Error::Config(e.to_string()))?;
                let sc = Arc::new(conn::SentinelConn {
                    sentinel: tokio::sync::Mutex::new(s),
                    service: service.clone(),
                    current: Mutex::new(None),
                    timeout: config.response_timeout,
                });
                let (c, _) = sc.master().await.map_err(|e| Error::from_redis("", e))?;
                (
                    c,
                    Some(Connection {
                        kind: ConnKind::Sentinel(sc),
                    }),
                )
            }
            Target::Cluster(nodes) => {
                let first = nodes
                    .first()
                    .ok_or_else(|| Error::Config("no cluster node given".into()))?;
                let seed = redis::Client::open(first.as_str())
                    .map_err(|e| Error::Config(e.to_string()))?;
                let cc = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(config.response_timeout)
                    .response_timeout(config.response_timeout)
                    .retries(config.retry.attempts.max(1))
                    .build()
                    .map_err(|e| Error::Config(e.to_string()))?;
                let c =
                    tokio::time::timeout(config.response_timeout * 2, cc.get_async_connection())
                        .await
                        .map_err(|_| Error::Timeout("connect to the cluster".into()))?
                        .map_err(|e| Error::from_redis("", e))?;
                (
                    seed,
                    Some(Connection {
                        kind: ConnKind::Cluster(c),
                    }),
                )
            }
        };
        let r = config.retry;
        let mgr_cfg = ConnectionManagerConfig::new()
            .set_number_of_retries(r.attempts as usize)
            .set_factor(r.base_delay.as_millis().max(1) as u64)
            .set_exponent_base(2)
            .set_max_delay(r.max_delay.as_millis().max(1) as u64)
            .set_connection_timeout(config.response_timeout)
            .set_response_timeout(config.response_timeout);
        let conn = tokio::time::timeout(
            config.response_timeout * 2,
            ConnectionManager::new_with_config(redis.clone(), mgr_cfg),
        )
        .await
        .map_err(|_| Error::Timeout("connect".into()))?
        .map_err(|e| Error::from_redis("", e))?;
        let manager = conn.clone();
        let conn = shared.unwrap_or(Connection {
            kind: ConnKind::Single(conn),
        });
        let native = match config.backend {
            Backend::Native => true,
            Backend::Script => false,
            Backend::Auto => has_module(&mut conn.clone()).await?,
        };
        let prefix = config.owner_prefix.clone().unwrap_or_else(|| {
            let v: u128 = rand::random();
            format!("{v:032x}")
        });
        let inner = Arc::new(Inner {
            redis,
            manager,
            conn,
            native,
            prefix,
            registry: Mutex::new(HashMap::new()),
            wait_pool: Mutex::new(HashMap::new()),
            subscriber: subscriber::Subscribers::default(),
            scripts: Scripts {
                lock: redis::Script::new(scripts::LOCK),
                unlock: redis::Script::new(scripts::UNLOCK),
                renew: redis::Script::new(scripts::RENEW),
                force_unlock: redis::Script::new(scripts::FORCE_UNLOCK),
                rw_lock: redis::Script::new(&scripts::rw_lock_script(scripts::RW_LOCK_BODY)),
                rw_unlock: redis::Script::new(&scripts::rw_lock_script(scripts::RW_UNLOCK_BODY)),
                rw_renew: redis::Script::new(&scripts::rw_lock_script(scripts::RW_RENEW_BODY)),
            },
            runtime: tokio::runtime::Handle::current(),
            watchdog: Mutex::new(None),
            config,
        });
        let task = tokio::spawn(watchdog::run(Arc::downgrade(&inner)));
        *inner.watchdog.lock().unwrap() = Some(task.abort_handle());
        Ok(Client { inner })
    }

    /// True when the client uses the dlock module's commands.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// if !client.is_native() { println!("plain Redis: Redisson scripts"); }
    /// # Ok(()) }
    /// ```
    pub fn is_native(&self) -> bool {
        self.inner.native
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The owner id prefix of this client (`<prefix>:<n>` are its owners).
    pub fn owner_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// A new owner identity `<prefix>:<n>`, unique within this process.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let owner = client.owner();
    /// assert!(owner.id().starts_with(client.owner_prefix()));
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Owner {
        let n = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
        Owner::from_id(format!("{}:{n}", self.inner.prefix))
    }

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
        Lock {
            client: self.clone(),
            name: name.into(),
            owner: owner.clone(),
            fence: false,
            kind: LockKind::Exclusive,
        }
    }

    pub(crate) fn rw_handle(&self, name: String, owner: Owner, kind: LockKind) -> Lock {
        Lock {
            client: self.clone(),
            name,
            owner,
            fence: false,
            kind,
        }
    }

    /// Number of locks the watchdog currently renews.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert_eq!(client.watched_locks(), 1);
    /// # Ok(()) }
    /// ```
    pub fn watched_locks(&self) -> usize {
        self.inner
            .registry
            .lock()
            .unwrap()
            .values()
            .filter(|e| e.is_watched())
            .count()
    }

    /// The underlying connection (multiplexed, reconnecting), e.g. for the data the lock protects.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use redis::AsyncCommands;
    /// let mut conn = client.connection();
    /// let _: () = conn.set("stock", 10).await.unwrap();
    /// # Ok(()) }
    /// ```
    ///
    /// For a Sentinel or Cluster client this is a connection to the master found at connect
    /// time / the first seed node, which does not follow failovers or redirections: use
    /// [`shared_connection`](Self::shared_connection) there.
    pub fn connection(&self) -> ConnectionManager {
        self.inner.manager.clone()
    }

    /// The connection the client's own commands use: single node, Sentinel master or
    /// cluster (see [`Connection`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let mut conn = client.shared_connection();
    /// let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    /// # let _ = pong; Ok(()) }
    /// ```
    pub fn shared_connection(&self) -> Connection {
        self.inner.conn.clone()
    }

    /// True for a Redis Cluster client ([`Client::cluster_builder`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// if client.is_cluster() { println!("cluster"); }
    /// # Ok(()) }
    /// ```
    pub fn is_cluster(&self) -> bool {
        self.inner.conn.is_cluster()
    }

    /// A read-write lock handle on `name` with a new owner (see [`RwLock`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let rw = client.rwlock("config");
    /// let r = rw.read().acquire().await?;
    /// r.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        self.rwlock_as(name, &self.owner())
    }

    /// A read-write lock handle on `name` acting for `owner`.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let owner = client.owner();
    /// let w = client.rwlock_as("config", &owner).write().acquire().await?;
    /// assert_eq!(w.owner_id(), owner.id());
    /// # Ok(()) }
    /// ```
    pub fn rwlock_as(&self, name: impl Into<String>, owner: &Owner) -> RwLock {
        RwLock::new(self.clone(), name.into(), owner.clone())
    }

    /// A stable name of the server (or cluster) this client talks to, for ordering.
    pub(crate) fn server_id(&self) -> String {
        let i = self.inner.redis.get_connection_info();
        format!("{}/{}", i.addr, i.redis.db)
    }

    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.inner.runtime
    }
}

/// Does `MODULE LIST` show the module `dlock`?
async fn has_module(conn: &mut Connection) -> Result<bool> {
    let v: Value = match redis::cmd("MODULE").arg("LIST").query_async(conn).await {
        Ok(v) => v,
        // MODULE may be renamed or refused by ACL: then there is no usable module.
        Err(e) if e.kind() == redis::ErrorKind::ResponseError || e.code() == Some("NOPERM") => {
            return Ok(false)
        }
        Err(e) => return Err(Error::from_redis("", e)),
    };
    fn strings(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => out.push(s.clone()),
            Value::Array(a) | Value::Set(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Map(m) => m.iter().for_each(|(k, x)| {
                strings(k, out);
                strings(x, out)
            }),
            _ => out.push(String::new()),
        }
    }
    let mut s = Vec::new();
    strings(&v, &mut s);
    Ok(s.windows(2).any(|w| w[0] == "name" && w[1] == "dlock"))
}

/// Why a held lock is no longer held (the output of [`LostSignal`]).
///
/// ```
/// use dlock_client::LostReason;
/// assert_ne!(LostReason::NotHeld, LostReason::LeaseExpired);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The server says this owner does not hold the lock (a renewal or release answered
    /// 0/null: deleted, expired, or taken by someone else).
    NotHeld,
    /// No successful renewal reached the server before the lease deadline (measured from
    /// the last successful renewal's send time): the server was unreachable or slow.
    LeaseExpired,
    /// This client released it (the last hold).
    Released,
    /// A renewal reached fewer replicas than [`ClientBuilder::min_replicas`] asks for: a
    /// failover now could lose the lock.
    NotReplicated,
}

/// Which lock a [`Lock`] handle takes.
///
/// ```
/// assert_ne!(dlock_client::LockKind::Read, dlock_client::LockKind::Write);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// An exclusive lock (`DLOCK.ACQUIRE`, Redisson's `RLock`).
    Exclusive,
    /// The read side of a read-write lock (`DLOCK.RWLOCK ... READ`).
    Read,
    /// The write side of a read-write lock (`DLOCK.RWLOCK ... WRITE`).
    Write,
}

impl LockKind {
    pub(crate) fn word(self) -> Option<&'static str> {
        match self {
            LockKind::Exclusive => None,
            LockKind::Read => Some("READ"),
            LockKind::Write => Some("WRITE"),
        }
    }
    pub(crate) fn script_word(self) -> &'static str {
        match self {
            LockKind::Exclusive => "",
            LockKind::Read => "read",
            LockKind::Write => "write",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Status {
    deadline: Instant,
    lost: Option<LostReason>,
}

/// One held (lock, owner) pair: the watchdog's unit of work.
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) kind: LockKind,
    pub(crate) lease: Duration,
    state: Mutex<EntryState>,
    active: AtomicBool,
    status: watch::Sender<Status>,
}

struct EntryState {
    holds: u64,
    watched: bool,
}

impl Entry {
    fn new(
        key: &str,
        owner: &str,
        kind: LockKind,
        lease: Duration,
        watched: bool,
        deadline: Instant,
    ) -> Entry {
        Entry {
            key: key.to_string(),
            owner: owner.to_string(),
            kind,
            lease,
            state: Mutex::new(EntryState { holds: 0, watched }),
            active: AtomicBool::new(true),
            status: watch::Sender::new(Status {
                deadline,
                lost: None,
            }),
        }
    }
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }
    pub(crate) fn is_watched(&self) -> bool {
        self.is_active() && self.state.lock().unwrap().watched
    }
    pub(crate) fn deadline(&self) -> Instant {
        self.status.borrow().deadline
    }
    /// A renewal sent at `sent` succeeded.
    pub(crate) fn renewed(&self, sent: Instant) {
        if !self.is_active() {
            return;
        }
        self.status.send_if_modified(|s| {
            let d = sent + self.lease;
            if s.lost.is_none() && d > s.deadline {
                s.deadline = d;
                true
            } else {
                false
            }
        });
    }
    /// Mark lost (first reason wins) and stop renewing.
    pub(crate) fn mark(&self, reason: LostReason) {
        self.active.store(false, Ordering::Release);
        self.status.send_if_modified(|s| {
            if s.lost.is_none() {
                s.lost = Some(reason);
                true
            } else {
                false
            }
        });
    }
    fn lost_now(&self) -> Option<LostReason> {
        let s = self.status.borrow();
        if let Some(r) = s.lost {
            return Some(r);
        }
        if Instant::now() >= s.deadline {
            return Some(LostReason::LeaseExpired);
        }
        None
    }
}

pub(crate) fn remove_entry(reg: &Registry, e: &Arc<Entry>) {
    let mut map = reg.lock().unwrap();
    let k = (e.key.clone(), e.owner.clone(), e.kind);
    if map.get(&k).is_some_and(|x| Arc::ptr_eq(x, e)) {
        map.remove(&k);
    }
}

/// Tells when a held lock stops being held. Clone it, move it to another task, `.await` it:
/// it resolves with the [`LostReason`] once the lock is lost (renewal answered 0, the lease
/// ran out without a successful renewal, a release found it gone) or released.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let guard = client.lock("report").acquire().await?;
/// let lost = guard.lost();
/// let watcher = tokio::spawn(async move { lost.await });
/// guard.release().await?;
/// assert_eq!(watcher.await.unwrap(), dlock_client::LostReason::Released);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LostSignal {
    entry: Arc<Entry>,
}

impl LostSignal {
    /// `Some(reason)` if the lock is already lost or released, without waiting.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert!(g.lost().check().is_none());
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Option<LostReason> {
        self.entry.lost_now()
    }

    /// Wait until the lock is lost or released.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// let reason = g.lost().wait().await; // when someone deletes it, the lease runs out, ...
    /// # let _ = reason;
    /// # Ok(()) }
    /// ```
    pub async fn wait(self) -> LostReason {
        let mut rx = self.entry.status.subscribe();
        loop {
            let s = rx.borrow_and_update().clone();
            if let Some(r) = s.lost {
                return r;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return LostReason::Released;
                    }
                }
                _ = tokio::time::sleep_until(s.deadline) => {
                    // Deadline passed with no renewal in between: lost.
                    if self.entry.deadline() <= Instant::now() {
                        self.entry.mark(LostReason::LeaseExpired);
                    }
                }
            }
        }
    }
}

impl IntoFuture for LostSignal {
    type Output = LostReason;
    type IntoFuture = Pin<Box<dyn Future<Output = LostReason> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.wait())
    }
}

/// A handle on one lock name for one owner. Cheap to clone. Nothing is sent until you call
/// a method.
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
    name: String,
    owner: Owner,
    fence: bool,
    kind: LockKind,
}

/// How long to wait for a lock held by someone else.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    No,
    For(Duration),
    Forever,
}

impl Lock {
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
    /// assert!(owner.id().starts_with(client.owner_prefix()));
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
    /// Connection errors are retried per [`Retry`].
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LockGuard> {
        let mut n = 0;
        loop {
            match self
                .acquire_impl(self.owner.id(), Wait::Forever, None)
                .await
            {
                Ok(Some(g)) => return Ok(g),
                Ok(None) => continue,
                Err(e) if e.is_connection() && n < self.client.inner.config.retry.attempts => {
                    tokio::time::sleep(self.client.inner.config.retry.delay(n)).await;
                    n += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt, no waiting; watchdog on when granted.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// match client.lock("k").try_acquire().await? {
    ///     Some(g) => { g.release().await?; }
    ///     None => println!("busy"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_impl(self.owner.id(), Wait::No, None).await
    }

    /// Wait up to `wait`. With `lease` the lock lapses after it (no watchdog), without it the
    /// watchdog renews it until release. `Ok(None)` on time-out.
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
        let w = if wait.is_zero() {
            Wait::No
        } else {
            Wait::For(wait)
        };
        self.acquire_impl(self.owner.id(), w, lease).await
    }

    /// Delete the lock whoever holds it (native: plain `DEL`, which wakes the module's
    /// waiters; script: Redisson's force-unlock script, `DEL` + publish). True if a lock was
    /// deleted.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let deleted = client.lock("stuck").force_unlock().await?;
    /// # let _ = deleted;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let mut conn = self.client.inner.conn.clone();
        let r: i64 = if self.client.inner.native {
            redis::cmd("DEL")
                .arg(&self.name)
                .query_async(&mut conn)
                .await
        } else {
            self.client
                .inner
                .scripts
                .force_unlock
                .key(&self.name)
                .key(self.channel())
                .arg(scripts::UNLOCK_MESSAGE)
                .invoke_async(&mut conn)
                .await
        }
        .map_err(|e| Error::from_redis(&self.name, e))?;
        Ok(r == 1)
    }

    /// Whether anyone holds the lock (`EXISTS`).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert!(!client.lock("free").is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let mut conn = self.client.inner.conn.clone();
        let n: i64 = redis::cmd("EXISTS")
            .arg(&self.name)
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(&self.name, e))?;
        Ok(n == 1)
    }

    /// Whether this handle's owner holds it (`HEXISTS`).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let lock = client.lock("k");
    /// let _g = lock.acquire().await?;
    /// assert!(lock.is_held_by_owner().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_owner(&self) -> Result<bool> {
        let mut conn = self.client.inner.conn.clone();
        let field = match self.kind {
            LockKind::Exclusive => self.owner.id().to_string(),
            LockKind::Read => format!("read:{}", self.owner.id()),
            LockKind::Write => format!("write:{}", self.owner.id()),
        };
        let n: i64 = redis::cmd("HEXISTS")
            .arg(&self.name)
            .arg(field)
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(&self.name, e))?;
        Ok(n == 1)
    }

    /// The lock's remaining lease (`PTTL`): `None` when nobody holds it (or it has no expiry).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let lock = client.lock("k");
    /// let _g = lock.acquire().await?;
    /// assert!(lock.remaining_lease().await?.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let mut conn = self.client.inner.conn.clone();
        let ms: i64 = redis::cmd("PTTL")
            .arg(&self.name)
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(&self.name, e))?;
        Ok((ms >= 0).then(|| Duration::from_millis(ms as u64)))
    }

    /// Send one release for this handle's owner whether or not a guard exists (RedLock's
    /// clean-up on nodes whose answer was lost). Errors are ignored.
    pub(crate) async fn release_blind(&self, limit: Duration) {
        let cmd = self.release_cmd(self.owner.id());
        let mut conn = self.client.inner.conn.clone();
        let _ = tokio::time::timeout(limit, cmd.query_async::<Value>(&mut conn)).await;
    }

    pub(crate) fn channel(&self) -> String {
        scripts::channel_name(&self.client.inner.config.channel_prefix, &self.name)
    }

    pub(crate) async fn acquire_impl(
        &self,
        owner: &str,
        wait: Wait,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let inner = &self.client.inner;
        if self.fence && !inner.native {
            return Err(Error::Unsupported("fencing tokens need the dlock module"));
        }
        let watched = lease.is_none();
        let lease = lease
            .unwrap_or(inner.config.lease)
            .max(Duration::from_millis(1));
        let lease_ms = lease.as_millis() as u64;
        let started = Instant::now();
        let granted = if inner.native {
            self.native_acquire(owner, lease_ms, wait, started).await?
        } else {
            self.script_acquire(owner, lease_ms, wait, started).await?
        };
        let Some((sent, count, token)) = granted else {
            return Ok(None);
        };
        Ok(Some(
            self.register(owner, lease, watched, sent, count, token),
        ))
    }

    fn register(
        &self,
        owner: &str,
        lease: Duration,
        watched: bool,
        sent: Instant,
        count: Option<u64>,
        token: Option<u64>,
    ) -> LockGuard {
        let inner = &self.client.inner;
        let now = Instant::now();
        let mut map = inner.registry.lock().unwrap();
        let k = (self.name.clone(), owner.to_string(), self.kind);
        let entry = match map.get(&k) {
            Some(e) if e.is_active() && e.deadline() > now => e.clone(),
            old => {
                if let Some(o) = old {
                    o.mark(LostReason::LeaseExpired);
                }
                let lease_for_entry = if watched { inner.config.lease } else { lease };
                let e = Arc::new(Entry::new(
                    &self.name,
                    owner,
                    self.kind,
                    lease_for_entry,
                    watched,
                    sent + lease,
                ));
                map.insert(k, e.clone());
                e
            }
        };
        let holds = {
            let mut st = entry.state.lock().unwrap();
            st.holds += 1;
            st.watched |= watched;
            st.holds
        };
        drop(map);
        // The acquire reset the lease on the server.
        entry.status.send_modify(|s| s.deadline = sent + lease);
        LockGuard {
            client: self.client.clone(),
            entry,
            hold_count: count.unwrap_or(holds),
            token,
            done: false,
        }
    }

    /// The module's grant command for this lock's kind.
    fn grant_cmd(&self, owner: &str, lease_ms: u64, wait_ms: Option<u64>) -> redis::Cmd {
        let mut cmd = match self.kind.word() {
            None => {
                let mut c = redis::cmd("DLOCK.ACQUIRE");
                c.arg(&self.name).arg(owner).arg(lease_ms);
                c
            }
            Some(w) => {
                let mut c = redis::cmd("DLOCK.RWLOCK");
                c.arg(&self.name).arg(owner).arg(w).arg(lease_ms);
                c
            }
        };
        if let Some(ms) = wait_ms {
            cmd.arg("WAIT").arg(ms);
        }
        if self.fence {
            cmd.arg("FENCE");
        }
        cmd
    }

    /// The script backend's grant attempt as a plain `EVAL` (for a dedicated connection).
    fn script_grant_cmd(&self, owner: &str, lease_ms: u64) -> redis::Cmd {
        let mut c = redis::cmd("EVAL");
        match self.kind {
            LockKind::Exclusive => {
                c.arg(scripts::LOCK)
                    .arg(1)
                    .arg(&self.name)
                    .arg(lease_ms)
                    .arg(owner);
            }
            k => {
                c.arg(scripts::rw_lock_script(scripts::RW_LOCK_BODY))
                    .arg(1)
                    .arg(&self.name)
                    .arg(owner)
                    .arg(k.script_word())
                    .arg(lease_ms);
            }
        }
        c
    }

    /// Undo one hold taken by `owner` (after a failed replication check).
    fn release_cmd(&self, owner: &str) -> redis::Cmd {
        let inner = &self.client.inner;
        if inner.native {
            let mut c = redis::cmd("DLOCK.RELEASE");
            c.arg(&self.name).arg(owner);
            if let Some(w) = self.kind.word() {
                c.arg(w);
            }
            c
        } else {
            let mut c = redis::cmd("EVAL");
            match self.kind {
                LockKind::Exclusive => {
                    c.arg(scripts::UNLOCK)
                        .arg(2)
                        .arg(&self.name)
                        .arg(self.channel())
                        .arg(scripts::UNLOCK_MESSAGE)
                        .arg(inner.config.lease.as_millis() as u64)
                        .arg(owner);
                }
                k => {
                    c.arg(scripts::rw_lock_script(scripts::RW_UNLOCK_BODY))
                        .arg(2)
                        .arg(&self.name)
                        .arg(self.channel())
                        .arg(owner)
                        .arg(k.script_word())
                        .arg(scripts::UNLOCK_MESSAGE);
                }
            }
            c
        }
    }

    /// With [`Config::min_replicas`]: a grant that reached fewer replicas than asked is
    /// released again (on the same node) and reported as [`Error::NotReplicated`].
    async fn check_replicas(&self, owner: &str, acks: Option<u32>) -> Result<()> {
        let inner = &self.client.inner;
        let (Some((n, _)), Some(a)) = (inner.config.min_replicas, acks) else {
            return Ok(());
        };
        if a >= n {
            return Ok(());
        }
        let _ = inner
            .node_call(&self.name, &self.release_cmd(owner), None, None)
            .await;
        Err(Error::NotReplicated {
            key: self.name.clone(),
            acked: a,
            wanted: n,
        })
    }

    async fn native_acquire(
        &self,
        owner: &str,
        lease_ms: u64,
        wait: Wait,
        started: Instant,
    ) -> Result<Option<(Instant, Option<u64>, Option<u64>)>> {
        let inner = &self.client.inner;
        let guard = inner.config.min_replicas;
        let wait_ms = match wait {
            Wait::No => None,
            Wait::For(d) => {
                let left = d.saturating_sub(started.elapsed());
                (!left.is_zero()).then(|| left.as_millis().max(1) as u64)
            }
            Wait::Forever => Some(0),
        };
        let Some(wait_ms) = wait_ms else {
            // No wait: one try on the shared connection.
            let cmd = self.grant_cmd(owner, lease_ms, None);
            let sent = Instant::now();
            let (v, acks) = if guard.is_some() {
                inner.node_call(&self.name, &cmd, guard, None).await?
            } else {
                let v: Value = cmd
                    .query_async(&mut inner.conn.clone())
                    .await
                    .map_err(|e| Error::from_redis(&self.name, e))?;
                (v, None)
            };
            return match parse_grant(&self.name, v)? {
                Some((c, t)) => {
                    self.check_replicas(owner, acks).await?;
                    Ok(Some((sent, Some(c), t)))
                }
                None => Ok(None),
            };
        };
        // With a wait, one command does it all: the server grants at once when it can, else
        // queues the request (one command per grant, no separate first try). It goes on a
        // dedicated connection to the key's node: a blocked reply would stall the shared one.
        let cmd = self.grant_cmd(owner, lease_ms, Some(wait_ms));
        let limit = (wait_ms != 0)
            .then(|| Duration::from_millis(wait_ms) + inner.config.response_timeout * 2);
        let (v, acks) = inner.node_call(&self.name, &cmd, guard, limit).await?;
        // The grant happened between send and receipt; the lease is counted from receipt
        // (later than the truth by at most the reply's one-way latency).
        let got = Instant::now();
        match parse_grant(&self.name, v)? {
            Some((c, t)) => {
                self.check_replicas(owner, acks).await?;
                Ok(Some((got, Some(c), t)))
            }
            None => Ok(None),
        }
    }

    /// `Ok(Ok(count))` = granted (count known for read-write locks), `Ok(Err(ms))` = held by
    /// someone else (PTTL, or how long until the earliest conflicting lease ends).
    async fn script_try(&self, owner: &str, lease_ms: u64) -> Result<Result<Option<u64>, i64>> {
        let inner = &self.client.inner;
        let (v, acks) = if inner.config.min_replicas.is_some() {
            let cmd = self.script_grant_cmd(owner, lease_ms);
            inner
                .node_call(&self.name, &cmd, inner.config.min_replicas, None)
                .await?
        } else {
            let mut conn = inner.conn.clone();
            let mut inv = match self.kind {
                LockKind::Exclusive => inner.scripts.lock.key(&self.name),
                _ => inner.scripts.rw_lock.key(&self.name),
            };
            match self.kind {
                LockKind::Exclusive => inv.arg(lease_ms).arg(owner),
                k => inv.arg(owner).arg(k.script_word()).arg(lease_ms),
            };
            let v: Value = inv
                .invoke_async(&mut conn)
                .await
                .map_err(|e| Error::from_redis(&self.name, e))?;
            (v, None)
        };
        let r = match v {
            Value::Nil => Ok(None),
            Value::Int(n) => Err(n),
            Value::Array(a) if a.len() == 2 => match (&a[0], &a[1]) {
                (Value::Int(1), Value::Int(c)) => Ok(Some(*c as u64)),
                (Value::Int(0), Value::Int(w)) => Err(*w),
                _ => return Err(Error::Protocol(format!("lock script answered {a:?}"))),
            },
            Value::ServerError(e) => return Err(Error::from_server_value(&self.name, e)),
            other => return Err(Error::Protocol(format!("lock script answered {other:?}"))),
        };
        if r.is_ok() {
            self.check_replicas(owner, acks).await?;
        }
        Ok(r)
    }

    /// Redisson's `tryLock(waitTime, leaseTime)`: try; subscribe to the unlock channel; retry
    /// on each unlock message or after min(PTTL, remaining wait).
    async fn script_acquire(
        &self,
        owner: &str,
        lease_ms: u64,
        wait: Wait,
        started: Instant,
    ) -> Result<Option<(Instant, Option<u64>, Option<u64>)>> {
        let sent = Instant::now();
        if let Ok(c) = self.script_try(owner, lease_ms).await? {
            return Ok(Some((sent, c, None)));
        }
        let deadline = match wait {
            Wait::No => return Ok(None),
            Wait::For(d) => Some(started + d),
            Wait::Forever => None,
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        let inner = &self.client.inner;
        let sub = inner
            .subscriber
            .subscribe(
                &inner.pubsub_client().await,
                &self.channel(),
                &inner.runtime,
            )
            .await;
        loop {
            let sent = Instant::now();
            let ttl = match self.script_try(owner, lease_ms).await? {
                Ok(c) => return Ok(Some((sent, c, None))),
                Err(t) => t,
            };
            let now = Instant::now();
            let mut until = deadline;
            if ttl >= 0 {
                let t = now + Duration::from_millis(ttl as u64);
                until = Some(until.map_or(t, |d| d.min(t)));
            }
            if sub.is_none() {
                // No subscription (pub/sub unavailable): poll.
                let t = now + Duration::from_millis(100);
                until = Some(until.map_or(t, |d| d.min(t)));
            }
            match (&sub, until) {
                (Some(s), Some(u)) => {
                    let _ = tokio::time::timeout_at(u, s.notified()).await;
                }
                (Some(s), None) => s.notified().await,
                (None, Some(u)) => tokio::time::sleep_until(u).await,
                (None, None) => unreachable!(),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // One last try, as Redisson's loop does before giving up on time.
                let sent = Instant::now();
                return Ok(self
                    .script_try(owner, lease_ms)
                    .await?
                    .ok()
                    .map(|c| (sent, c, None)));
            }
        }
    }
}

impl Inner {
    /// A client for the node that owns `key` (single node, current Sentinel master, or the
    /// cluster node serving the key's slot).
    pub(crate) async fn node_client(&self, key: &str) -> Result<redis::Client> {
        match &self.conn.kind {
            ConnKind::Single(_) => Ok(self.redis.clone()),
            ConnKind::Sentinel(s) => s
                .master()
                .await
                .map(|(c, _)| c)
                .map_err(|e| Error::from_redis(key, e)),
            ConnKind::Cluster(c) => {
                let slot = redis::cluster_routing::get_slot(key.as_bytes()) as i64;
                let v: Value = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut c.clone())
                    .await
                    .map_err(|e| Error::from_redis(key, e))?;
                if let Value::Array(ranges) = v {
                    for r in ranges {
                        let Value::Array(r) = r else { continue };
                        let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(node))) =
                            (r.first(), r.get(1), r.get(2))
                        else {
                            continue;
                        };
                        if *lo <= slot && slot <= *hi {
                            if let (Some(host), Some(Value::Int(port))) =
                                (node.first(), node.get(1))
                            {
                                let host = match host {
                                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                                    Value::SimpleString(s) => s.clone(),
                                    _ => continue,
                                };
                                return redis::Client::open(format!("redis://{host}:{port}/"))
                                    .map_err(|e| Error::Config(e.to_string()));
                            }
                        }
                    }
                }
                // Unknown: the seed node will redirect us.
                Ok(self.redis.clone())
            }
        }
    }

    /// The client the script backend's unlock-channel subscriptions use.
    pub(crate) async fn pubsub_client(&self) -> redis::Client {
        match &self.conn.kind {
            ConnKind::Sentinel(s) => s
                .master()
                .await
                .map(|(c, _)| c)
                .unwrap_or(self.redis.clone()),
            _ => self.redis.clone(),
        }
    }

    async fn pooled_conn(
        &self,
        addr: &str,
        client: &redis::Client,
    ) -> Result<MultiplexedConnection> {
        if let Some(c) = self
            .wait_pool
            .lock()
            .unwrap()
            .get_mut(addr)
            .and_then(|v| v.pop())
        {
            return Ok(c);
        }
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(self.config.response_timeout);
        client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(|e| Error::from_redis("", e))
    }

    fn put_conn(&self, addr: String, c: MultiplexedConnection) {
        let mut pool = self.wait_pool.lock().unwrap();
        let v = pool.entry(addr).or_default();
        if v.len() < 64 {
            v.push(c);
        }
    }

    /// Send `cmd` to the node owning `key` on a dedicated (pooled) connection, followed by
    /// `WAIT n timeout` when `guard` is set; follows `MOVED`/`ASK`. Answers the command's
    /// reply and the number of replicas that acknowledged (when guarded). A time-out or a
    /// cancelled call closes the connection (a blocked waiter leaves the server's queue).
    pub(crate) async fn node_call(
        &self,
        key: &str,
        cmd: &redis::Cmd,
        guard: Option<(u32, Duration)>,
        limit: Option<Duration>,
    ) -> Result<(Value, Option<u32>)> {
        let mut client = self.node_client(key).await?;
        let mut asking = false;
        for _hop in 0..5 {
            let addr = client.get_connection_info().addr.to_string();
            let mut conn = self.pooled_conn(&addr, &client).await?;
            let mut pipe = redis::pipe();
            if asking {
                pipe.cmd("ASKING");
            }
            pipe.add_command(cmd.clone());
            if let Some((n, t)) = guard {
                pipe.cmd("WAIT").arg(n).arg(t.as_millis() as u64);
            }
            let skip = usize::from(asking);
            let count = 1 + usize::from(guard.is_some());
            let limit = limit
                .unwrap_or(self.config.response_timeout + guard.map_or(Duration::ZERO, |(_, t)| t));
            let vals =
                match tokio::time::timeout(limit, conn.req_packed_commands(&pipe, skip, count))
                    .await
                {
                    Ok(r) => r.map_err(|e| Error::from_redis(key, e))?,
                    Err(_) => {
                        return Err(Error::Timeout(format!("{key}: no reply within {limit:?}")))
                    }
                };
            if let Some(Value::ServerError(e)) = vals.first() {
                if e.code() == "MOVED" || e.code() == "ASK" {
                    let target = e.details().and_then(|d| d.split(' ').nth(1)).unwrap_or("");
                    asking = e.code() == "ASK";
                    self.put_conn(addr, conn);
                    client = redis::Client::open(format!("redis://{target}/"))
                        .map_err(|e| Error::Config(e.to_string()))?;
                    continue;
                }
            }
            self.put_conn(addr, conn);
            let acks = guard.map(|_| match vals.get(1) {
                Some(Value::Int(n)) => (*n).max(0) as u32,
                _ => 0,
            });
            let v = vals.into_iter().next().unwrap_or(Value::Nil);
            return Ok((v, acks));
        }
        Err(Error::Protocol(format!("{key}: too many redirections")))
    }
}

fn parse_grant(key: &str, v: Value) -> Result<Option<(u64, Option<u64>)>> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(n) => Ok(Some((n as u64, None))),
        Value::Array(a) if a.len() == 2 => match (&a[0], &a[1]) {
            (Value::Int(c), Value::Int(t)) => Ok(Some((*c as u64, Some(*t as u64)))),
            _ => Err(Error::Protocol(format!("DLOCK.ACQUIRE answered {a:?}"))),
        },
        Value::ServerError(e) => Err(Error::from_server_value(key, e)),
        other => Err(Error::Protocol(format!("DLOCK.ACQUIRE answered {other:?}"))),
    }
}

/// A held lock. Release it with [`release`](LockGuard::release); dropping it releases in the
/// background. While it lives (and was acquired without an explicit lease) the client's
/// watchdog renews the lease.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let lock = client.lock("cron");
/// let g1 = lock.acquire().await?;
/// let g2 = lock.try_acquire().await?.unwrap(); // reentrant: same owner
/// assert_eq!(g2.hold_count(), 2);
/// assert!(g2.release().await?);
/// drop(g1); // released in the background
/// # Ok(()) }
/// ```
pub struct LockGuard {
    client: Client,
    entry: Arc<Entry>,
    hold_count: u64,
    token: Option<u64>,
    done: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.entry.key)
            .field("owner", &self.entry.owner)
            .field("hold_count", &self.hold_count)
            .field("token", &self.token)
            .finish()
    }
}

impl LockGuard {
    /// The lock key.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.lock("k").name(), "k");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.entry.key
    }
    /// The owner id that holds it.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert!(g.owner_id().starts_with(client.owner_prefix()));
    /// # Ok(()) }
    /// ```
    pub fn owner_id(&self) -> &str {
        &self.entry.owner
    }
    /// The owner's hold count right after this acquire (1 = fresh grant).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert_eq!(g.hold_count(), 1);
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> u64 {
        self.hold_count
    }
    /// The fencing token, when the lock was acquired [`fenced`](Lock::fenced).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert_eq!(g.fencing_token(), None); // not fenced
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.token
    }
    /// Whether the watchdog renews this lock.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert!(g.is_watched());
    /// # Ok(()) }
    /// ```
    pub fn is_watched(&self) -> bool {
        self.entry.is_watched()
    }
    /// A signal that resolves when the lock is lost (or released).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// let lost = g.lost();
    /// tokio::spawn(async move { eprintln!("lost: {:?}", lost.await) });
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> LostSignal {
        LostSignal {
            entry: self.entry.clone(),
        }
    }
    /// `Some(reason)` if the lock is already known lost.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert_eq!(g.is_lost(), None);
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> Option<LostReason> {
        self.entry.lost_now()
    }

    /// Release this hold. `Ok(true)` if the owner still held the lock (the hold count went
    /// down, and the key is gone if it was the last hold), `Ok(false)` if it was no longer
    /// held (expired, deleted, taken over).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert!(g.release().await?);
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<bool> {
        self.done = true;
        release_impl(self.client.clone(), self.entry.clone()).await
    }

    /// Like [`release`](Self::release), but `Err(Error::NotHeld)` when the lock was not held
    /// (Redisson's `unlock()` throws then).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// g.unlock().await?; // Err(Error::NotHeld) if it had expired
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<()> {
        let name = self.entry.key.clone();
        if self.release().await? {
            Ok(())
        } else {
            Err(Error::NotHeld(name))
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            let c = self.client.clone();
            let e = self.entry.clone();
            let rt = self.client.runtime().clone();
            rt.spawn(async move {
                let _ = release_impl(c, e).await;
            });
        }
    }
}

async fn release_impl(client: Client, entry: Arc<Entry>) -> Result<bool> {
    let inner = &client.inner;
    // Stop renewing before the release goes out if this was our last hold, so a renewal
    // racing with it cannot be mistaken for a loss.
    let last = {
        let _map = inner.registry.lock().unwrap();
        let mut st = entry.state.lock().unwrap();
        st.holds = st.holds.saturating_sub(1);
        st.holds == 0
    };
    if last {
        entry.active.store(false, Ordering::Release);
        remove_entry(&inner.registry, &entry);
    }
    let mut conn = inner.conn.clone();
    let key = &entry.key;
    let v: redis::RedisResult<Value> = if inner.native {
        let mut c = redis::cmd("DLOCK.RELEASE");
        c.arg(key).arg(&entry.owner);
        if let Some(w) = entry.kind.word() {
            c.arg(w);
        }
        c.query_async(&mut conn).await
    } else if entry.kind == LockKind::Exclusive {
        inner
            .scripts
            .unlock
            .key(key)
            .key(scripts::channel_name(&inner.config.channel_prefix, key))
            .arg(scripts::UNLOCK_MESSAGE)
            .arg(entry.lease.as_millis() as u64)
            .arg(&entry.owner)
            .invoke_async(&mut conn)
            .await
    } else {
        inner
            .scripts
            .rw_unlock
            .key(key)
            .key(scripts::channel_name(&inner.config.channel_prefix, key))
            .arg(&entry.owner)
            .arg(entry.kind.script_word())
            .arg(scripts::UNLOCK_MESSAGE)
            .invoke_async(&mut conn)
            .await
    };
    let v = v.map_err(|e| Error::from_redis(key, e))?;
    match v {
        Value::Int(1) => {
            // Freed. Other guards of this owner (if any) no longer hold it either.
            entry.mark(if last {
                LostReason::Released
            } else {
                LostReason::NotHeld
            });
            remove_entry(&inner.registry, &entry);
            Ok(true)
        }
        Value::Int(0) => {
            if last {
                entry.mark(LostReason::Released);
            }
            Ok(true)
        }
        Value::Nil => {
            entry.mark(LostReason::NotHeld);
            remove_entry(&inner.registry, &entry);
            Ok(false)
        }
        Value::ServerError(e) => Err(Error::from_server_value(key, e)),
        other => Err(Error::Protocol(format!("release answered {other:?}"))),
    }
}

/// Send a pipeline and get every reply (errors stay inline as `Value::ServerError`).
pub(crate) async fn send_pipeline(
    conn: &mut Connection,
    pipe: &redis::Pipeline,
    n: usize,
) -> redis::RedisResult<Vec<Value>> {
    conn.req_packed_commands(pipe, 0, n).await
}
