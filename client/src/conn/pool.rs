//! Dedicated connections for commands that may block (a waiting `DLOCK.ACQUIRE ... WAIT`)
//! or must share a connection with a replication `WAIT`: a small pool per node address,
//! so a blocked reply never stalls the shared connection.
//!
//! These are redis-rs's plain (non-multiplexed) async connections on purpose: dropping
//! one closes its socket at once, so a waiter whose acquire is cancelled leaves the
//! server's queue. A multiplexed connection keeps its socket open until every request in
//! flight has been answered, which for a wait without limit may be never.

#![allow(deprecated)] // aio::Connection: see above.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{Connection as PlainConnection, ConnectionLike};
use redis::Value;

use crate::client::Inner;
use crate::{Error, Result};

/// Idle dedicated connections, by node address.
#[derive(Default)]
pub(crate) struct WaitPool {
    idle: Mutex<HashMap<String, Vec<PlainConnection>>>,
}

/// At most this many idle connections are kept per node.
const IDLE_PER_NODE: usize = 64;

impl WaitPool {
    async fn take(
        &self,
        addr: &str,
        client: &redis::Client,
        connect_timeout: Duration,
    ) -> Result<PlainConnection> {
        if let Some(c) = self
            .idle
            .lock()
            .unwrap()
            .get_mut(addr)
            .and_then(|v| v.pop())
        {
            return Ok(c);
        }
        // No response time-out on these connections: a wait lasts as long as it lasts.
        match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
            Ok(r) => r.map_err(|e| Error::connect(addr, e)),
            Err(_) => Err(Error::connect_timeout(addr, connect_timeout)),
        }
    }

    fn put(&self, addr: String, c: PlainConnection) {
        let mut idle = self.idle.lock().unwrap();
        let v = idle.entry(addr).or_default();
        if v.len() < IDLE_PER_NODE {
            v.push(c);
        }
    }
}

/// How long [`node_call`] waits for a reply.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Limit {
    /// At most this long (a command, or a wait with a limit plus slack).
    Within(Duration),
    /// As long as the server keeps the request: a wait without limit. The link is watched
    /// instead: TCP keepalive on the socket, and a PING on another connection to the same
    /// node every response time-out; a PING that fails or goes unanswered ends the call
    /// with a connection error.
    Unlimited,
}

/// Send `cmd` to the node owning `key` on a dedicated (pooled) connection, followed by
/// `WAIT n timeout` when `guard` is set; follows `MOVED`/`ASK` and tries again after
/// `TRYAGAIN` (for up to a response time-out). Answers the command's
/// reply and the number of replicas that acknowledged (when guarded). A time-out or a
/// cancelled call closes the connection (a blocked waiter leaves the server's queue).
pub(crate) async fn node_call(
    inner: &Inner,
    key: &str,
    cmd: &redis::Cmd,
    guard: Option<(u32, Duration)>,
    limit: Limit,
) -> Result<(Value, Option<u32>)> {
    let config = &inner.config;
    let mut client = inner.node_client(key).await?;
    let mut asking = false;
    let mut hops = 0;
    let mut try_again = TryAgain::new(config.response_timeout);
    while hops < 5 {
        let addr = client.get_connection_info().addr.to_string();
        let mut conn = inner
            .pool
            .take(&addr, &client, config.response_timeout)
            .await?;
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
        let reply = conn.req_packed_commands(&pipe, skip, count);
        let vals = match limit {
            Limit::Within(limit) => match tokio::time::timeout(limit, reply).await {
                Ok(r) => r.map_err(|e| Error::from_redis(key, e))?,
                Err(_) => return Err(Error::Timeout(format!("{key}: no reply within {limit:?}"))),
            },
            Limit::Unlimited => tokio::select! {
                r = reply => r.map_err(|e| Error::from_redis(key, e))?,
                e = watch_link(inner, &addr, &client) => return Err(e),
            },
        };
        if let Some(Value::ServerError(e)) = vals.first() {
            // The slot is being migrated and the command needs keys on both sides (e.g. a
            // FENCE whose counter has not moved yet): the same node, again, a little later.
            if e.code() == "TRYAGAIN" {
                if let Some(pause) = try_again.next_pause() {
                    inner.pool.put(addr, conn);
                    tokio::time::sleep(pause).await;
                    continue;
                }
            }
            if e.code() == "MOVED" || e.code() == "ASK" {
                hops += 1;
                let target = e.details().and_then(|d| d.split(' ').nth(1)).unwrap_or("");
                asking = e.code() == "ASK";
                if !asking {
                    inner.slots_moved().await;
                }
                inner.pool.put(addr, conn);
                client = redis::Client::open(format!("redis://{target}/"))
                    .map_err(|e| Error::Config(e.to_string()))?;
                continue;
            }
        }
        inner.pool.put(addr, conn);
        let acks = guard.map(|_| match vals.get(1) {
            Some(Value::Int(n)) => (*n).max(0) as u32,
            _ => 0,
        });
        let v = vals.into_iter().next().unwrap_or(Value::Nil);
        return Ok((v, acks));
    }
    Err(Error::Protocol(format!("{key}: too many redirections")))
}

/// Pauses between tries of a command answered `TRYAGAIN` (a slot migration in progress):
/// 10 ms doubling up to 200 ms, for at most `budget` in all, as cluster clients do.
struct TryAgain {
    next: Duration,
    left: Duration,
}

impl TryAgain {
    fn new(budget: Duration) -> TryAgain {
        TryAgain {
            next: Duration::from_millis(10),
            left: budget,
        }
    }

    /// The pause before the next try, or `None` when the budget is spent.
    fn next_pause(&mut self) -> Option<Duration> {
        let pause = self.next.min(self.left);
        if pause.is_zero() {
            return None;
        }
        self.left -= pause;
        self.next = (self.next * 2).min(Duration::from_millis(200));
        Some(pause)
    }
}

/// One command followed by the configured replication `WAIT` (`min_replicas`) on a
/// dedicated connection, within the usual limit: a single try under the failover guard.
pub(crate) async fn guarded_call(
    inner: &Inner,
    key: &str,
    cmd: &redis::Cmd,
) -> Result<(Value, Option<u32>)> {
    let guard = inner.config.min_replicas;
    node_call(inner, key, cmd, guard, command_limit(inner, guard)).await
}

/// The usual limit of one command sent with `guard` (the replication `WAIT` adds its own).
fn command_limit(inner: &Inner, guard: Option<(u32, Duration)>) -> Limit {
    Limit::Within(
        inner
            .config
            .response_timeout
            .saturating_add(guard.map_or(Duration::ZERO, |(_, t)| t)),
    )
}

/// Resolves only when the node at `addr` stops answering: a PING on another pooled
/// connection every response time-out, each within the response time-out.
async fn watch_link(inner: &Inner, addr: &str, client: &redis::Client) -> Error {
    let every = inner.config.response_timeout;
    loop {
        tokio::time::sleep(every).await;
        let probe = async {
            let mut c = inner.pool.take(addr, client, every).await?;
            let r: redis::RedisResult<Value> = redis::cmd("PING").query_async(&mut c).await;
            r.map_err(|e| Error::from_redis("", e))?;
            inner.pool.put(addr.to_string(), c);
            Ok::<(), Error>(())
        };
        match tokio::time::timeout(every, probe).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => return e,
            Err(_) => {
                return Error::Timeout(format!(
                    "{addr}: no answer to PING within {every:?} while waiting"
                ))
            }
        }
    }
}
