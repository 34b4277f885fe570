//! A command on a dedicated connection to the node serving its key ([`node_call`]): the
//! transport's routing (following the cluster's redirects, see [`super::redirect`]), its
//! time-outs, and the watch on the link while a wait without limit is pending.

#![allow(deprecated)] // aio::Connection: see pool.rs.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;
use tokio::time::Instant;

use super::link::{node_at, Link};
use super::redirect::{Backoff, Redirect, MAX_REDIRECTS};
use crate::{Error, Result};

/// How long [`node_call`] may take, every try and redirect together.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Limit {
    /// The request's time ends at `end` (a wait's end, or a command's time-out); the reply
    /// to a try may come up to `slack` after it (a wait is answered at its end).
    Until { end: Instant, slack: Duration },
    /// As long as the server keeps the request: a wait without limit. The link is watched
    /// instead: TCP keepalive on the socket, and a PING on another connection to the same
    /// node every response time-out; a PING that fails or goes unanswered ends the call
    /// with a connection error.
    Unlimited,
}

impl Limit {
    /// The request's time left now (`None`: no limit).
    fn left(&self) -> Option<Duration> {
        match self {
            Limit::Until { end, .. } => Some(end.saturating_duration_since(Instant::now())),
            Limit::Unlimited => None,
        }
    }
}

/// Send the command `cmd` makes to the node owning `key` on a dedicated (pooled)
/// connection, followed by `WAIT n timeout` when `guard` is set. `cmd` is given the
/// request's time left (`None`: no limit), so that each try asks only for what is left.
///
/// Follows the cluster's redirects ([`Redirect`]): `MOVED` (the slot map is read again)
/// and `ASK` (`ASKING` first) to the node they name, at most [`MAX_REDIRECTS`] times;
/// `TRYAGAIN`/`CLUSTERDOWN`/`UNBLOCKED` (a failover) tried again on the same node after a
/// [`Backoff`] pause while the time allows, after which that error reply is the answer.
/// Answers the command's reply and the number of replicas that acknowledged (when
/// guarded); `None` when the request's time ran out between a redirect and the next try.
/// A time-out or a cancelled call closes the connection (a blocked waiter leaves the
/// server's queue).
pub(crate) async fn node_call(
    link: &Link,
    key: &str,
    guard: Option<(u32, Duration)>,
    limit: Limit,
    cmd: impl Fn(Option<Duration>) -> redis::Cmd,
) -> Result<Option<(Value, Option<u32>)>> {
    let timeout = link.response_timeout();
    let mut client = link.node_client(key).await?;
    let mut asking = false;
    let mut redirects = 0;
    let mut backoff = Backoff::default();
    loop {
        let left = limit.left();
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(None);
        }
        let addr = client.get_connection_info().addr.to_string();
        let mut conn = link.pool.take(&addr, &client, timeout).await?;
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(cmd(left));
        let count = 1 + super::push_replica_wait(&mut pipe, guard);
        let skip = usize::from(asking);
        let reply = conn.req_packed_commands(&pipe, skip, count);
        let vals = match (limit, left) {
            (Limit::Until { slack, .. }, Some(left)) => {
                let within = left.saturating_add(slack);
                match tokio::time::timeout(within, reply).await {
                    Ok(r) => r.map_err(|e| Error::from_redis(key, e))?,
                    Err(_) => {
                        return Err(Error::Timeout(format!(
                            "{key}: no reply from {addr} within {within:?}"
                        )))
                    }
                }
            }
            _ => tokio::select! {
                r = reply => r.map_err(|e| Error::from_redis(key, e))?,
                e = watch_link(link, &addr, &client) => return Err(e),
            },
        };
        let redirect = match vals.first() {
            Some(Value::ServerError(e)) => Redirect::of(e.code(), e.details()),
            _ => None,
        };
        // After `Later` a fresh connection: a demoted master closes the one it answered on.
        if redirect != Some(Redirect::Later) {
            link.pool.put(addr, conn);
        }
        let (to, ask) = match redirect {
            None => return Ok(Some(answer(vals, guard))),
            Some(Redirect::Later) => match backoff.next_pause(limit.left()) {
                Some(pause) => {
                    tokio::time::sleep(pause).await;
                    continue;
                }
                None => return Ok(Some(answer(vals, guard))),
            },
            Some(Redirect::Moved(to)) => (to, false),
            Some(Redirect::Ask(to)) => (to, true),
        };
        if redirects == MAX_REDIRECTS {
            return Err(Error::Redirected {
                key: key.to_string(),
                redirects,
                last: to,
            });
        }
        redirects += 1;
        asking = ask;
        if !ask {
            link.slots_moved().await;
        }
        client = node_at(&to)?;
    }
}

/// The command's reply and, with `guard`, the replicas its `WAIT` counted.
fn answer(vals: Vec<Value>, guard: Option<(u32, Duration)>) -> (Value, Option<u32>) {
    let acks = guard.map(|_| match vals.get(1) {
        Some(Value::Int(n)) => (*n).max(0) as u32,
        _ => 0,
    });
    (vals.into_iter().next().unwrap_or(Value::Nil), acks)
}

/// One command followed by the replication `WAIT` of `guard` (`min_replicas`) on a
/// dedicated connection, within a response time-out (plus the `WAIT`'s own), redirects
/// included: a single try under the failover guard.
pub(crate) async fn guarded_call(
    link: &Link,
    key: &str,
    cmd: &redis::Cmd,
    guard: Option<(u32, Duration)>,
) -> Result<(Value, Option<u32>)> {
    let within = link
        .response_timeout()
        .saturating_add(guard.map_or(Duration::ZERO, |(_, t)| t));
    let limit = Limit::Until {
        end: Instant::now() + within,
        slack: Duration::ZERO,
    };
    node_call(link, key, guard, limit, |_| cmd.clone())
        .await?
        .ok_or_else(|| Error::Timeout(format!("{key}: no reply within {within:?}")))
}

/// Resolves only when the node at `addr` stops answering: a PING on another pooled
/// connection every response time-out, each within the response time-out.
async fn watch_link(link: &Link, addr: &str, client: &redis::Client) -> Error {
    let every = link.response_timeout();
    loop {
        tokio::time::sleep(every).await;
        let probe = async {
            let mut c = link.pool.take(addr, client, every).await?;
            let r: redis::RedisResult<Value> = redis::cmd("PING").query_async(&mut c).await;
            r.map_err(|e| Error::from_redis("", e))?;
            link.pool.put(addr.to_string(), c);
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
