//! [`Client`]: connects (single node, Sentinel, Cluster), picks the backend, hands out
//! lock handles and runs the watchdog task.

use std::sync::Arc;

use redis::aio::ConnectionManager;

use crate::backend::ActiveBackend;
use crate::config::Target;
use crate::owner::next_owner_number;
use crate::shared::Inner;
use crate::topology::{Connection, Link};
use crate::waiters::{self, Waiter};
use crate::{watchdog, ClientBuilder, Error, Owner, Result};

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
    /// The backend in use (chosen at connect time).
    pub(crate) backend: Arc<ActiveBackend>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("native", &self.backend.is_native())
            .field("prefix", &self.inner.prefix)
            .finish()
    }
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

    /// Connect within one response time-out (the contract's bound of a call that does not
    /// wait): a server that accepts the connection but does not answer (stopped, hung)
    /// answers [`Error::Connect`] with [`ConnectReason::Timeout`](crate::ConnectReason).
    async fn connect(target: Target, config: crate::Config) -> Result<Client> {
        let names = target.names()?;
        let limit = config.response_timeout;
        tokio::time::timeout(
            limit,
            Client::connect_unbounded(target, config, names.clone()),
        )
        .await
        .map_err(|_| Error::connect_timeout(&names.1, limit))?
    }

    async fn connect_unbounded(
        target: Target,
        config: crate::Config,
        names: (String, String),
    ) -> Result<Client> {
        let link = Link::connect(&target, config.response_timeout, config.retry).await?;
        let backend = Arc::new({
            let grace = config.effective_bind_grace(link.shared().closed_signal().is_some());
            ActiveBackend::detect(config.backend, link.shared(), grace, &names.1).await?
        });
        let prefix = config.owner_prefix.clone().unwrap_or_else(|| {
            let v: u128 = rand::random();
            format!("{v:032x}")
        });
        let inner = Arc::new(Inner::new(link, config, prefix, names));
        let task = tokio::spawn(watchdog::run(
            Arc::downgrade(&inner),
            Arc::downgrade(&backend),
        ));
        *inner.watchdog.lock().unwrap() = Some(task.abort_handle());
        Ok(Client { inner, backend })
    }

    /// Close the client: stop the watchdog, report every hold lost
    /// ([`LostReason::Closed`](crate::LostReason::Closed); nothing is released, the server
    /// lets each lease or bind grace run out), end every call in flight (a waiting acquire
    /// answers [`Error::Closed`]) and close every connection the client opened (the shared
    /// one, the one [`connection`](Self::connection) hands out, the wait and pub/sub
    /// connections). Every call afterwards answers [`Error::Closed`]. Sends nothing, so it
    /// returns at once even when the server hangs; closing twice is harmless. (Dropping
    /// every clone of the client and its guards also ends everything, later.)
    ///
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let client = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
    /// let g = client.lock("k").acquire().await?;
    /// client.close().await;
    /// assert!(matches!(client.lock("k").try_acquire().await, Err(dlock_client::Error::Closed)));
    /// assert_eq!(g.lost().check(), Some(dlock_client::LostReason::Closed));
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) {
        if !self.inner.set_closed() {
            return;
        }
        if let Some(h) = self.inner.watchdog.lock().unwrap().take() {
            h.abort();
        }
        self.inner.registry.close_all();
        self.backend.close(self.inner.link.runtime());
        self.inner.link.close();
        // Let the tasks that were woken (calls in flight, connection drivers) end now.
        tokio::task::yield_now().await;
    }

    /// True once [`close`](Self::close) was called.
    ///
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) {
    /// client.close().await;
    /// assert!(client.is_closed());
    /// # }
    /// ```
    pub fn is_closed(&self) -> bool {
        self.inner.check_open().is_err()
    }

    /// True when the client uses the dlock module's commands.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// if !client.is_native() { println!("plain Redis: Redisson scripts"); }
    /// # Ok(()) }
    /// ```
    pub fn is_native(&self) -> bool {
        self.backend.is_native()
    }

    /// The configuration in force.
    pub fn config(&self) -> &crate::Config {
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

    /// Number of locks the watchdog currently renews.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert_eq!(client.watched_locks(), 1);
    /// # Ok(()) }
    /// ```
    pub fn watched_locks(&self) -> usize {
        self.inner.registry.watched_count()
    }

    /// The underlying connection (multiplexed, reconnecting), e.g. for the data the lock protects.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use redis::AsyncCommands;
    /// let mut conn = client.connection()?;
    /// let _: () = conn.set("stock", 10).await.unwrap();
    /// # Ok(()) }
    /// ```
    ///
    /// For a Sentinel or Cluster client this is a connection to the master found at connect
    /// time / the first seed node, which does not follow failovers or redirections: use
    /// [`shared_connection`](Self::shared_connection) there.
    ///
    /// [`Error::Closed`] after [`close`](Self::close).
    pub fn connection(&self) -> Result<ConnectionManager> {
        self.inner.link.manager().ok_or(Error::Closed)
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
        self.inner.link.shared().clone()
    }

    /// True for a Redis Cluster client ([`Client::cluster_builder`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// if client.is_cluster() { println!("cluster"); }
    /// # Ok(()) }
    /// ```
    pub fn is_cluster(&self) -> bool {
        self.inner.link.shared().is_cluster()
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
        self.inner.link.runtime()
    }

    /// The clients waiting on lock `name` (any kind: lock, read-write lock, semaphore), in
    /// FIFO order: the module's `DLOCK.WAITERS`. Empty when nobody waits or there is no
    /// such key; [`Error::WrongType`] when the key holds something that is not a lock.
    ///
    /// Native backend only: plain Redis keeps no queue (the script backend's waiters retry
    /// on their own), so there this answers [`Error::Unsupported`].
    ///
    /// Cancel safety: cancel-safe (read only).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let queue = client.waiters("pool").await?;
    /// if let Some(first) = queue.first() {
    ///     println!("next in line: {} ({:?})", first.owner, first.request);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn waiters(&self, name: &str) -> Result<Vec<Waiter>> {
        if !self.is_native() {
            return Err(Error::Unsupported(
                "waiters() needs the dlock module: plain Redis keeps no queue",
            ));
        }
        self.inner
            .within_response_timeout(waiters::query(&mut self.inner.link.shared().clone(), name))
            .await
    }
}

impl ClientBuilder {
    /// Check the settings, connect, pick the backend and start the watchdog task (on the
    /// current tokio runtime).
    ///
    /// Errors: [`Error::Config`] for settings that cannot work (lease 0, renew interval not
    /// shorter than the lease, a bad URL, [`Backend::Native`](crate::Backend::Native) on a server without the
    /// module); [`Error::Connect`] naming the address and the cause when the server cannot
    /// be reached.
    ///
    /// Cancel safety: cancel-safe (nothing is held before it returns).
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let client = dlock_client::Client::builder("redis://127.0.0.1:6379/").build().await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn build(mut self) -> Result<Client> {
        // Duration::MAX (no limit) is the module's longest lease.
        let max = std::time::Duration::from_millis(crate::config::MAX_MS);
        self.config.lease = self.config.lease.min(max);
        self.config.renew_interval = self.config.renew_interval.map(|r| r.min(max));
        self.config.validate()?;
        Client::connect(self.target, self.config).await
    }
}
