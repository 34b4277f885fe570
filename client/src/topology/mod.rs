//! The topology, i.e. the transport: [`Link`] (what a client talks to the deployment with), the shared
//! connection ([`Connection`]: one Redis node, a master found through Sentinel, or a
//! Redis Cluster), the cluster's slot map, and the pool of dedicated connections that
//! carry waiting commands. Nothing here knows about locks.

pub(crate) mod call;
mod cluster;
mod link;
mod pool;
pub(crate) mod redirect;
mod sentinel;
mod single;

pub(crate) use link::Link;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use cluster::SlotMap;
use sentinel::{timeout_error, SentinelConn};
use single::Single;
pub(crate) use single::{Answered, Stamp};

/// Appends the replication guard (`min_replicas`: `WAIT n timeout`) to `pipe` when there is
/// one; answers how many replies that adds (0 or 1). The one place the guard is written, for
/// a dedicated call, a cluster renewal and a pipelined batch of renewals alike.
pub(crate) fn push_replica_wait(pipe: &mut Pipeline, guard: Option<(u32, Duration)>) -> usize {
    let Some((n, t)) = guard else {
        return 0;
    };
    pipe.cmd("WAIT").arg(n).arg(t.as_millis() as u64);
    1
}

/// The multiplexed connection a [`Client`](crate::Client) sends its commands on, whatever
/// the deployment: a single node, a Sentinel-managed master or a Redis Cluster. It
/// implements [`redis::aio::ConnectionLike`], so every `redis` command and
/// [`redis::AsyncCommands`] works on it. Cheap to clone.
///
/// - single node: a multiplexed connection, made again after a failure, whose link is
///   watched as a whole (a request that stays unanswered for a response time-out fails
///   with a connection error);
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
    Single(Arc<Single>),
    Sentinel(Arc<SentinelConn>),
    Cluster(redis::cluster_async::ClusterConnection, Arc<SlotMap>),
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
        matches!(self.kind, ConnKind::Cluster(..))
    }

    /// On a single node, signalled when the shared link closes (the holds bound to it need
    /// rebinding); `None` where closes are noticed only by the next command.
    pub(crate) fn closed_signal(&self) -> Option<Arc<tokio::sync::Notify>> {
        match &self.kind {
            ConnKind::Single(s) => Some(s.closed()),
            _ => None,
        }
    }

    /// On a single node, when its latest link was last known open (the send time of the
    /// last command it answered); `None` where that is not tracked (Sentinel, Cluster).
    pub(crate) fn answered(&self) -> Option<Arc<Answered>> {
        match &self.kind {
            ConnKind::Single(s) => Some(s.answered()),
            _ => None,
        }
    }

    /// [`send`](Self::send), and (when answered, on a single node) which link answered it.
    pub(crate) async fn send_stamped(
        &self,
        cmd: &Cmd,
    ) -> (redis::RedisResult<Value>, Option<Stamp>) {
        match &self.kind {
            ConnKind::Single(s) => s.command_stamped(cmd).await,
            _ => (self.clone().req_packed_command(cmd).await, None),
        }
    }

    /// A pipeline's `n` replies, and (when answered, on a single node) which link answered.
    pub(crate) async fn pipeline_stamped(
        &self,
        pipe: &Pipeline,
        n: usize,
    ) -> (redis::RedisResult<Vec<Value>>, Option<Stamp>) {
        match &self.kind {
            ConnKind::Single(s) => s.pipeline_stamped(pipe, 0, n).await,
            _ => (self.clone().req_packed_commands(pipe, 0, n).await, None),
        }
    }

    /// Send one command and get its reply (an error reply stays inline as
    /// `Value::ServerError`). On a single node this skips the boxed future and the clone of
    /// the [`ConnectionLike`] path: it carries the lock's hot path (try-acquire, release).
    pub(crate) async fn send(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match &self.kind {
            ConnKind::Single(s) => s.command(cmd).await,
            _ => self.clone().req_packed_command(cmd).await,
        }
    }
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
            ConnKind::Single(s) => {
                let s = s.clone();
                Box::pin(async move { s.command(cmd).await })
            }
            ConnKind::Cluster(c, _) => c.req_packed_command(cmd),
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
            ConnKind::Single(s) => {
                let s = s.clone();
                Box::pin(async move { s.pipeline(cmd, offset, count).await })
            }
            ConnKind::Cluster(c, _) => c.req_packed_commands(cmd, offset, count),
            ConnKind::Sentinel(s) => {
                let s = s.clone();
                Box::pin(async move {
                    let (_, mut c) = s.master().await?;
                    // A pipeline may carry a WAIT: allow for it in the time-out.
                    let r = tokio::time::timeout(
                        s.timeout.saturating_mul(2),
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
            ConnKind::Single(s) => s.db(),
            ConnKind::Cluster(c, _) => c.get_db(),
            ConnKind::Sentinel(_) => 0,
        }
    }
}
