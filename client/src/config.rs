//! Client settings: [`ClientBuilder`] collects them, [`ClientBuilder::build`] checks them
//! and connects; [`Config`] is the read-only result.

use std::time::Duration;

use crate::{Error, Result};

/// The longest lease or wait the module accepts (ten years, in ms); longer durations,
/// [`Duration::MAX`] included, mean "no limit" and are sent as this (a lease) or as "wait
/// without limit" (a wait).
pub(crate) const MAX_MS: u64 = dlock_core::args::MAX_MS as u64;

/// `d` in whole milliseconds for the wire: at least 1, at most [`MAX_MS`].
pub(crate) fn wire_ms(d: Duration) -> u64 {
    (d.as_millis().min(MAX_MS as u128) as u64).max(1)
}

/// True when `d` is so long that it means "no limit".
pub(crate) fn unlimited(d: Duration) -> bool {
    d.as_millis() >= MAX_MS as u128
}

/// Which command set the client uses.
///
/// ```
/// use dlock_client::Backend;
/// assert_eq!(Backend::default(), Backend::Auto);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Backend {
    /// `Native` when the server runs the dlock module (the client asks it a `DLOCK.INFO`,
    /// which any user allowed to lock may run), else `Script`.
    #[default]
    Auto,
    /// The `DLOCK.*` commands of the dlock module; [`ClientBuilder::build`] fails when the
    /// server does not have them.
    Native,
    /// Redisson's Lua scripts on plain Redis.
    Script,
}

/// Reconnect and retry policy: exponential backoff `base * 2^n`, capped at `max_delay`.
///
/// ```
/// use std::time::Duration;
/// let r = dlock_client::Retry::new(3, Duration::from_millis(50), Duration::from_secs(1));
/// assert_eq!(r.delay(0), Duration::from_millis(50));
/// assert_eq!(r.delay(10), Duration::from_secs(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
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
    /// `attempts` retries after a connection failure (by the connection manager, and by
    /// [`Lock::acquire`](crate::Lock::acquire)), waiting `base_delay * 2^n`, at most
    /// `max_delay`, before retry `n`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = dlock_client::Retry::new(1, Duration::from_millis(20), Duration::from_millis(50));
    /// assert_eq!(r.attempts(), 1);
    /// ```
    pub fn new(attempts: u32, base_delay: Duration, max_delay: Duration) -> Retry {
        Retry {
            attempts,
            base_delay,
            max_delay,
        }
    }

    /// How many times a failed connection is retried.
    /// ```
    /// assert_eq!(dlock_client::Retry::default().attempts(), 6);
    /// ```
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

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

/// The settings a [`Client`] runs with (read-only; set them on [`ClientBuilder`]).
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) {
/// let c = client.config();
/// assert!(c.renew_interval() < c.lease());
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) lease: Duration,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) retry: Retry,
    pub(crate) owner_prefix: Option<String>,
    pub(crate) backend: Backend,
    pub(crate) channel_prefix: String,
    pub(crate) response_timeout: Duration,
    pub(crate) renew_batch: usize,
    pub(crate) min_replicas: Option<(u32, Duration)>,
    pub(crate) bind_grace: Option<Duration>,
}

/// The default [`ClientBuilder::bind_grace`]: 2 s, long enough for a client to notice a
/// closed connection, connect again and rebind (a few round trips), short against the 30 s
/// lease a crashed holder would otherwise keep. The module's own default grace (a bare `BIND`),
/// so that the default costs the server no number to read.
pub const DEFAULT_BIND_GRACE: Duration =
    Duration::from_millis(dlock_core::limits::DEFAULT_BIND_GRACE_MS as u64);

impl Default for Config {
    fn default() -> Self {
        Config {
            lease: Duration::from_secs(30),
            renew_interval: None,
            retry: Retry::default(),
            owner_prefix: None,
            backend: Backend::Auto,
            channel_prefix: dlock_core::names::DEFAULT_CHANNEL_PREFIX.to_string(),
            response_timeout: Duration::from_secs(5),
            renew_batch: 1000,
            min_replicas: None,
            bind_grace: Some(DEFAULT_BIND_GRACE),
        }
    }
}

impl Config {
    /// Lease of watchdog-held locks (Redisson's `lockWatchdogTimeout`), default 30 s.
    pub fn lease(&self) -> Duration {
        self.lease
    }
    /// How often the watchdog renews (`lease / 3` unless set).
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
            .unwrap_or(self.lease / 3)
            .max(Duration::from_millis(1))
    }
    /// Reconnect / retry policy.
    pub fn retry(&self) -> Retry {
        self.retry
    }
    /// The backend asked for (the one in use: [`Client::is_native`]).
    pub fn backend(&self) -> Backend {
        self.backend
    }
    /// Unlock channel prefix (script backend), default `redisson_lock__channel`.
    pub fn channel_prefix(&self) -> &str {
        &self.channel_prefix
    }
    /// Client-side time-out of one command (never of a wait), default 5 s.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }
    /// Renewals per pipeline, default 1000.
    pub fn renew_batch(&self) -> usize {
        self.renew_batch
    }
    /// The failover guard, `(replicas, time-out)`, when set.
    pub fn min_replicas(&self) -> Option<(u32, Duration)> {
        self.min_replicas
    }

    /// The grace of `BIND` (native backend), `None` when holds are not bound; see
    /// [`ClientBuilder::bind_grace`].
    pub fn bind_grace(&self) -> Option<Duration> {
        self.bind_grace
    }

    /// The grace sent with `BIND`. Where the client notices its shared connection close
    /// (`notices_close`: a single node) and rebinds at once, the grace asked for; else
    /// (Sentinel, Cluster: a close shows only at the next command) at least a renew interval
    /// plus a response time-out, so the watchdog's next renewal rebinds before the cut lease
    /// lapses.
    pub(crate) fn effective_bind_grace(&self, notices_close: bool) -> Option<Duration> {
        let floor = if notices_close {
            Duration::ZERO
        } else {
            self.renew_interval().saturating_add(self.response_timeout)
        };
        self.bind_grace.map(|g| g.max(floor))
    }

    /// Refuse settings that cannot work.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.lease.is_zero() {
            return Err(Error::Config("lease must be > 0".into()));
        }
        if self.renew_interval() >= self.lease {
            return Err(Error::Config(format!(
                "renew interval {:?} must be shorter than the lease {:?}",
                self.renew_interval(),
                self.lease
            )));
        }
        if self.response_timeout.is_zero() {
            return Err(Error::Config("response time-out must be > 0".into()));
        }
        if let Some((_, t)) = self.min_replicas {
            if t >= self.response_timeout || t >= self.lease {
                return Err(Error::Config(
                    "the min_replicas WAIT time-out must be shorter than the response time-out and the lease".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Where a client connects.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Single(String),
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
    Cluster(Vec<String>),
}

impl Target {
    /// `(id, address)`: the name that orders servers in a multi-lock (`host:port/db` of a
    /// single node; the Sentinel service or the cluster's seeds otherwise) and the address
    /// for messages. [`Error::Config`] for a URL that does not parse.
    pub(crate) fn names(&self) -> Result<(String, String)> {
        Ok(match self {
            Target::Single(url) => {
                let c = redis::Client::open(url.as_str())
                    .map_err(|e| Error::Config(format!("{url}: {e}")))?;
                let i = c.get_connection_info();
                (format!("{}/{}", i.addr, i.redis.db), i.addr.to_string())
            }
            Target::Sentinel { sentinels, service } => {
                let all = sentinels.join(",");
                (format!("sentinel:{service}@{all}"), all)
            }
            Target::Cluster(nodes) => {
                let all = nodes.join(",");
                (format!("cluster:{all}"), all)
            }
        })
    }
}

/// Builder of a [`Client`]: the only way to set a [`Config`]; [`build`](Self::build)
/// checks the settings, connects and picks the backend.
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
    pub(crate) target: Target,
    pub(crate) config: Config,
}

impl ClientBuilder {
    pub(crate) fn new(target: Target) -> ClientBuilder {
        ClientBuilder {
            target,
            config: Config::default(),
        }
    }
    /// Lease of watchdog-held locks (default 30 s; must be > 0; [`Duration::MAX`] = no
    /// limit, sent as the module's maximum).
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").lease(std::time::Duration::from_secs(10));
    /// # let _ = b;
    /// ```
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }
    /// Renew interval (default lease / 3; must be shorter than the lease).
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
    /// Client-side time-out of one command (default 5 s). It never applies to a wait for a
    /// lock: a waiting acquire has no client-side time-out (see [`Lock::acquire`](crate::Lock::acquire)).
    /// On a single node's shared connection it is checked for the link as a whole, not per
    /// command: a link that answers nothing for one to two time-outs while commands are
    /// pending is closed, and those commands fail with [`Error::Connection`].
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
    /// ([`LostReason::NotReplicated`](crate::LostReason::NotReplicated)). See the README's
    /// *Failover guard* for the window that remains. `timeout` must be shorter than the
    /// response time-out and the lease (else [`build`](Self::build) answers
    /// [`Error::Config`]); keep it well below the renew interval.
    /// ```
    /// use std::time::Duration;
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").min_replicas(1, Duration::from_millis(200));
    /// # let _ = b;
    /// ```
    pub fn min_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.config.min_replicas = (n > 0).then_some((n, timeout));
        self
    }
}

impl ClientBuilder {
    /// Bind every hold to this client's connection (`BIND grace-ms`, native backend;
    /// default [`DEFAULT_BIND_GRACE`], 2 s): when the server sees the connection close (the
    /// process crashed or was killed, the socket was reset), the hold's lease is cut to
    /// `grace` and the lock frees after it instead of after the lease. `None` (or
    /// [`no_bind`](Self::no_bind)) binds nothing: a dead holder keeps its locks until their
    /// lease ends.
    ///
    /// Holds stay bound to the client's shared connection (a grant from a waiting queue,
    /// which arrives on a dedicated connection, is rebound to it at once), and the watchdog's
    /// every renewal rebinds them (`DLOCK.RENEW ... BIND`). When the shared connection of a
    /// single node closes, the client connects again and rebinds every watched hold at once,
    /// within the grace; on Sentinel and Cluster the rebind comes with the next renewal (set
    /// a grace above the renew interval there, or turn binding off). A hold with a lease of
    /// its own (no watchdog) is rebound by nobody: a connection loss frees it after the
    /// grace. The grace is sent as at most the command's lease. The script backend (plain
    /// Redis) cannot bind and sends no `BIND`.
    /// ```
    /// use std::time::Duration;
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").bind_grace(Some(Duration::from_secs(5)));
    /// # let _ = b;
    /// ```
    pub fn bind_grace(mut self, grace: Option<Duration>) -> Self {
        self.config.bind_grace = grace;
        self
    }

    /// Bind nothing: [`bind_grace(None)`](Self::bind_grace).
    /// ```
    /// let b = dlock_client::Client::builder("redis://127.0.0.1/").no_bind();
    /// # let _ = b;
    /// ```
    pub fn no_bind(self) -> Self {
        self.bind_grace(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_ms_is_whole_ms_between_1_and_the_maximum() {
        assert_eq!(wire_ms(Duration::ZERO), 1);
        assert_eq!(wire_ms(Duration::from_micros(1500)), 1);
        assert_eq!(wire_ms(Duration::from_millis(30_000)), 30_000);
        assert_eq!(wire_ms(Duration::MAX), MAX_MS);
        assert_eq!(wire_ms(Duration::from_millis(MAX_MS + 1)), MAX_MS);
    }

    #[test]
    fn unlimited_from_the_maximum_on() {
        assert!(!unlimited(Duration::from_millis(MAX_MS - 1)));
        assert!(unlimited(Duration::from_millis(MAX_MS)));
        assert!(unlimited(Duration::MAX));
    }

    #[test]
    fn validate_refuses_what_cannot_work() {
        let ok = Config::default();
        assert!(ok.validate().is_ok());
        let c = Config {
            lease: Duration::ZERO,
            ..Config::default()
        };
        assert!(matches!(c.validate(), Err(Error::Config(_))));
        let c = Config {
            renew_interval: Some(Duration::from_secs(30)),
            ..Config::default()
        };
        assert!(matches!(c.validate(), Err(Error::Config(m)) if m.contains("renew interval")));
        let c = Config {
            min_replicas: Some((1, Duration::from_secs(5))),
            ..Config::default()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn the_bind_grace_covers_a_renewal_where_closes_go_unnoticed() {
        let c = Config::default();
        assert_eq!(c.bind_grace(), Some(DEFAULT_BIND_GRACE));
        assert_eq!(c.effective_bind_grace(true), Some(DEFAULT_BIND_GRACE));
        assert_eq!(c.effective_bind_grace(false), Some(Duration::from_secs(15)));
        let off = Config {
            bind_grace: None,
            ..Config::default()
        };
        assert_eq!(off.effective_bind_grace(true), None);
        assert_eq!(off.effective_bind_grace(false), None);
    }

    #[test]
    fn renew_interval_defaults_to_a_third_of_the_lease() {
        assert_eq!(Config::default().renew_interval(), Duration::from_secs(10));
    }

    #[test]
    fn target_names() {
        let t = Target::Single("redis://127.0.0.1:7001/3".into());
        assert_eq!(
            t.names().unwrap(),
            ("127.0.0.1:7001/3".to_string(), "127.0.0.1:7001".to_string())
        );
        assert!(Target::Single("not a url".into()).names().is_err());
        let c = Target::Cluster(vec!["redis://a:1/".into(), "redis://b:2/".into()]);
        assert_eq!(c.names().unwrap().0, "cluster:redis://a:1/,redis://b:2/");
    }
}
