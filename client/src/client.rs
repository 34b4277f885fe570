//! [`Client`]: connects (single node, Sentinel, Cluster), picks the backend, hands out
//! lock handles and runs the watchdog task.

use std::sync::{Arc, Mutex};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::backend::Engine;
use crate::config::Target;
use crate::conn::cluster::SlotMap;
use crate::conn::pool::WaitPool;
use crate::conn::sentinel::SentinelConn;
use crate::conn::single::Single;
use crate::conn::{ConnKind, Connection};
use crate::lease::Registry;
use crate::owner::next_owner_number;
use crate::{watchdog, ClientBuilder, Config, Error, Lock, LockKind, Owner, Result, RwLock};

pub(crate) struct Inner {
    /// The single node, the master found at connect time, or the first cluster seed.
    pub(crate) redis: redis::Client,
    /// What [`Client::connection`] hands out.
    manager: ConnectionManager,
    pub(crate) conn: Connection,
    pub(crate) config: Config,
    pub(crate) engine: Engine,
    prefix: String,
    /// The server's name for ordering and its address for messages ([`Target::names`]).
    names: (String, String),
    pub(crate) registry: Registry,
    pub(crate) pool: WaitPool,
    pub(crate) runtime: tokio::runtime::Handle,
    watchdog: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = self.watchdog.lock().unwrap().take() {
            h.abort();
        }
    }
}

/// A connection to one Redis deployment, shared by all locks it hands out. Cheap to clone.
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
            .field("native", &self.inner.engine.is_native())
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

/// `host:port` of a client's node, for messages.
fn addr_of(c: &redis::Client) -> String {
    c.get_connection_info().addr.to_string()
}

impl Client {
    /// Connect with default settings.
    ///
    /// Cancel safety: cancel-safe.
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
        ClientBuilder::new(Target::Single(url.into()))
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
        ClientBuilder::new(Target::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            service: service.into(),
        })
    }

    /// A builder for a Redis Cluster, from one or more seed node URLs. Locks may use any
    /// key; each command goes to the node owning the key's slot (the client caches the
    /// slot map and follows `MOVED` and `ASK`). See the README's *Redis Cluster* section.
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
        ClientBuilder::new(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    pub(crate) async fn connect(target: Target, config: Config) -> Result<Client> {
        let connect_timeout = config.response_timeout;
        let names = target.names()?;
        let (redis, conn) = match &target {
            Target::Single(url) => {
                let c = redis::Client::open(url.as_str())
                    .map_err(|e| Error::Config(format!("{url}: {e}")))?;
                // One attempt: a refused port or a bad host answers at once with its cause
                // and address.
                let single = Single::connect(c.clone(), connect_timeout, config.retry).await?;
                (
                    c,
                    Connection {
                        kind: ConnKind::Single(single),
                    },
                )
            }
            Target::Sentinel { sentinels, service } => {
                let s = redis::sentinel::Sentinel::build(sentinels.clone())
                    .map_err(|e| Error::Config(e.to_string()))?;
                let sc = Arc::new(SentinelConn {
                    sentinel: tokio::sync::Mutex::new(s),
                    service: service.clone(),
                    current: Mutex::new(None),
                    timeout: config.response_timeout,
                });
                let (c, _) = sc
                    .master()
                    .await
                    .map_err(|e| Error::connect(&sentinels.join(","), e))?;
                (
                    c,
                    Connection {
                        kind: ConnKind::Sentinel(sc),
                    },
                )
            }
            Target::Cluster(nodes) => {
                let first = nodes
                    .first()
                    .ok_or_else(|| Error::Config("no cluster node given".into()))?;
                let seed = redis::Client::open(first.as_str())
                    .map_err(|e| Error::Config(format!("{first}: {e}")))?;
                let cc = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(config.response_timeout)
                    .response_timeout(config.response_timeout)
                    .retries(config.retry.attempts().max(1))
                    .build()
                    .map_err(|e| Error::Config(e.to_string()))?;
                let all = nodes.join(",");
                let limit = config.response_timeout.saturating_mul(2);
                let mut c = tokio::time::timeout(limit, cc.get_async_connection())
                    .await
                    .map_err(|_| Error::connect_timeout(&all, limit))?
                    .map_err(|e| Error::connect(&all, e))?;
                let slots = Arc::new(SlotMap::default());
                slots.refresh(&mut c).await;
                (
                    seed,
                    Connection {
                        kind: ConnKind::Cluster(c, slots),
                    },
                )
            }
        };
        let r = config.retry;
        let mgr_cfg = ConnectionManagerConfig::new()
            .set_number_of_retries(r.attempts() as usize)
            .set_factor(r.delay(0).as_millis().max(1) as u64)
            .set_exponent_base(2)
            .set_max_delay(r.delay(u32::MAX).as_millis().max(1) as u64)
            .set_connection_timeout(config.response_timeout)
            .set_response_timeout(config.response_timeout);
        let addr = addr_of(&redis);
        let limit = config.response_timeout.saturating_mul(2);
        let manager = tokio::time::timeout(
            limit,
            ConnectionManager::new_with_config(redis.clone(), mgr_cfg),
        )
        .await
        .map_err(|_| Error::connect_timeout(&addr, limit))?
        .map_err(|e| Error::connect(&addr, e))?;
        let engine = Engine::detect(config.backend, &conn).await?;
        let prefix = config.owner_prefix.clone().unwrap_or_else(|| {
            let v: u128 = rand::random();
            format!("{v:032x}")
        });
        let inner = Arc::new(Inner {
            redis,
            manager,
            conn,
            engine,
            prefix,
            names,
            registry: Registry::default(),
            pool: WaitPool::default(),
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
        self.inner.engine.is_native()
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
        self.owner_numbered(next_owner_number())
    }

    /// The owner `<prefix>:<n>`.
    pub(crate) fn owner_numbered(&self, n: u64) -> Owner {
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
        Lock::new(
            self.clone(),
            name.into(),
            owner.clone(),
            LockKind::Exclusive,
        )
    }

    /// Number of locks the watchdog currently renews.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert_eq!(client.watched_locks(), 1);
    /// # Ok(()) }
    /// ```
    pub fn watched_locks(&self) -> usize {
        crate::lease::entries(&self.inner.registry.lock())
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
    pub(crate) fn server_id(&self) -> &str {
        &self.inner.names.0
    }

    /// The server's address, for messages.
    pub(crate) fn server_address(&self) -> String {
        self.inner.names.1.clone()
    }

    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.inner.runtime
    }
}

impl Inner {
    /// A client for the node that owns `key` (single node, current Sentinel master, or the
    /// cluster node serving the key's slot, from the cached slot map).
    pub(crate) async fn node_client(&self, key: &str) -> Result<redis::Client> {
        match &self.conn.kind {
            ConnKind::Single(_) => Ok(self.redis.clone()),
            ConnKind::Sentinel(s) => s
                .master()
                .await
                .map(|(c, _)| c)
                .map_err(|e| Error::from_redis(key, e)),
            ConnKind::Cluster(_, slots) => match slots.addr_for(key) {
                Some(addr) => redis::Client::open(format!("redis://{addr}/"))
                    .map_err(|e| Error::Config(e.to_string())),
                // Unknown: the seed node will redirect us.
                None => Ok(self.redis.clone()),
            },
        }
    }

    /// The client the script backend's unlock-channel subscriptions for `key` use: the
    /// node serving `key` (pub/sub messages of a cluster reach every node, but the
    /// subscription belongs with the key).
    pub(crate) async fn pubsub_client(&self, key: &str) -> redis::Client {
        self.node_client(key)
            .await
            .unwrap_or_else(|_| self.redis.clone())
    }

    /// The cluster's slot map changed (a `MOVED` reply): read it again.
    pub(crate) async fn slots_moved(&self) {
        if let ConnKind::Cluster(c, slots) = &self.conn.kind {
            slots.refresh(&mut c.clone()).await;
        }
    }
}
