//! The client's shared connection: one Redis node (reconnecting), a master found through
//! Redis Sentinel (re-resolved after a failover), or a Redis Cluster (redirections
//! followed by redis-rs).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// The multiplexed connection a [`Client`](crate::Client) sends its commands on, whatever
/// the deployment: a single node, a Sentinel-managed master or a Redis Cluster. It
/// implements [`redis::aio::ConnectionLike`], so every `redis` command and
/// [`redis::AsyncCommands`] works on it. Cheap to clone.
///
/// - single node: a reconnecting [`ConnectionManager`];
/// - Sentinel: a connection to the master the sentinels name; after a connection error or a
///   `READONLY` reply (the old master came back as a replica) the next command asks the
///   sentinels again, so failovers are followed;
/// - cluster: a [`redis::cluster_async::ClusterConnection`] (routes each command by its
///   key's slot, follows `MOVED`/`ASK`).
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// use redis::AsyncCommands;
/// let mut conn = client.shared_connection();
/// let _: () = conn.set("stock", 10).await.unwrap();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connection {
    pub(crate) kind: ConnKind,
}

#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // cloned per command; boxing would allocate each time
pub(crate) enum ConnKind {
    Single(ConnectionManager),
    Sentinel(Arc<SentinelConn>),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Connection {
    /// True for a Redis Cluster connection.
    ///
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// println!("cluster: {}", client.shared_connection().is_cluster());
    /// # Ok(()) }
    /// ```
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, ConnKind::Cluster(_))
    }
}

pub(crate) struct SentinelConn {
    pub(crate) sentinel: tokio::sync::Mutex<redis::sentinel::Sentinel>,
    pub(crate) service: String,
    pub(crate) current: std::sync::Mutex<Option<(redis::Client, MultiplexedConnection)>>,
    pub(crate) timeout: Duration,
}

impl SentinelConn {
    /// The master's client and a connection to it (asking the sentinels when needed).
    pub(crate) async fn master(&self) -> RedisResult<(redis::Client, MultiplexedConnection)> {
        if let Some(c) = self.current.lock().unwrap().clone() {
            return Ok(c);
        }
        let client = {
            let mut s = self.sentinel.lock().await;
            tokio::time::timeout(self.timeout, s.async_master_for(&self.service, None))
                .await
                .map_err(|_| timeout_error("asking the sentinels for the master"))?
                // No usable master right now (e.g. a failover in progress): a connection
                // problem, worth a retry.
                .map_err(|e| {
                    redis::RedisError::from((
                        redis::ErrorKind::IoError,
                        "no master from the sentinels",
                        e.to_string(),
                    ))
                })?
        };
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout);
        let conn = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?;
        // Make sure it is the master (the sentinels may not have noticed a change yet).
        let mut c2 = conn.clone();
        let role: Value = redis::cmd("ROLE").query_async(&mut c2).await?;
        if let Value::Array(a) = &role {
            let is_master = matches!(a.first(), Some(Value::BulkString(b)) if b == b"master");
            if !is_master {
                return Err((
                    redis::ErrorKind::IoError,
                    "the sentinels' master is not a master yet",
                )
                    .into());
            }
        }
        *self.current.lock().unwrap() = Some((client.clone(), conn.clone()));
        Ok((client, conn))
    }

    /// Forget the current master if `r` says it is gone or demoted.
    fn check<T>(&self, r: &RedisResult<T>) {
        if let Err(e) = r {
            if e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout()
                || e.kind() == redis::ErrorKind::ReadOnly
                || e.code() == Some("READONLY")
            {
                *self.current.lock().unwrap() = None;
            }
        }
    }
}

pub(crate) fn timeout_error(what: &str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::IoError, "timed out", what.to_string()))
}

/// An inline error reply that means the node is no longer a master.
fn readonly_inline(values: &[Value]) -> bool {
    values
        .iter()
        .any(|v| matches!(v, Value::ServerError(e) if e.code() == "READONLY"))
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.kind {
            ConnKind::Single(c) => c.req_packed_command(cmd),
            ConnKind::Cluster(c) => c.req_packed_command(cmd),
            ConnKind::Sentinel(s) => {
                let s = s.clone();
                Box::pin(async move {
                    let (_, mut c) = s.master().await?;
                    let r = tokio::time::timeout(
                        s.timeout.max(Duration::from_millis(1)),
                        c.req_packed_command(cmd),
                    )
                    .await
                    .unwrap_or_else(|_| Err(timeout_error("sentinel master command")));
                    s.check(&r);
                    if let Ok(Value::ServerError(e)) = &r {
                        if e.code() == "READONLY" {
                            *s.current.lock().unwrap() = None;
                        }
                    }
                    r
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.kind {
            ConnKind::Single(c) => c.req_packed_commands(cmd, offset, count),
            ConnKind::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            ConnKind::Sentinel(s) => {
                let s = s.clone();
                Box::pin(async move {
                    let (_, mut c) = s.master().await?;
                    // A pipeline may carry a WAIT: allow for it in the time-out.
                    let r = tokio::time::timeout(
                        s.timeout * 2,
                        c.req_packed_commands(cmd, offset, count),
                    )
                    .await
                    .unwrap_or_else(|_| Err(timeout_error("sentinel master pipeline")));
                    s.check(&r);
                    if let Ok(v) = &r {
                        if readonly_inline(v) {
                            *s.current.lock().unwrap() = None;
                        }
                    }
                    r
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match &self.kind {
            ConnKind::Single(c) => c.get_db(),
            ConnKind::Cluster(c) => c.get_db(),
            ConnKind::Sentinel(_) => 0,
        }
    }
}
