//! A command on a dedicated connection to the node serving its key ([`node_call`]): the
//! transport's routing (`MOVED`, `ASK`, `TRYAGAIN`), its time-outs, and the watch on the
//! link while a wait without limit is pending.

#![allow(deprecated)] // aio::Connection: see pool.rs.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use super::link::{node_at, Link};
use crate::{Error, Result};

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
    link: &Link,
    key: &str,
    cmd: &redis::Cmd,
    guard: Option<(u32, Duration)>,
    limit: Limit,
) -> Result<(Value, Option<u32>)> {
    let timeout = link.response_timeout();
    let mut client = link.node_client(key).await?;
    let mut asking = false;
    let mut hops = 0;
    let mut try_again = TryAgain::new(timeout);
    while hops < 5 {
        let addr = client.get_connection_info().addr.to_string();
        let mut conn = link.pool.take(&addr, &client, timeout).await?;
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
                e = watch_link(link, &addr, &client) => return Err(e),
            },
        };
        if let Some(Value::ServerError(e)) = vals.first() {
            // The slot is being migrated and the command needs keys on both sides (e.g. a
            // FENCE whose counter has not moved yet): the same node, again, a little later.
            if e.code() == "TRYAGAIN" {
                if let Some(pause) = try_again.next_pause() {
                    link.pool.put(addr, conn);
                    tokio::time::sleep(pause).await;
                    continue;
                }
            }
            if e.code() == "MOVED" || e.code() == "ASK" {
                hops += 1;
                let target = e.details().and_then(|d| d.split(' ').nth(1)).unwrap_or("");
                asking = e.code() == "ASK";
                if !asking {
                    link.slots_moved().await;
                }
                link.pool.put(addr, conn);
                client = node_at(target)?;
                continue;
            }
        }
        link.pool.put(addr, conn);
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

/// One command followed by the replication `WAIT` of `guard` (`min_replicas`) on a
/// dedicated connection, within the usual limit: a single try under the failover guard.
pub(crate) async fn guarded_call(
    link: &Link,
    key: &str,
    cmd: &redis::Cmd,
    guard: Option<(u32, Duration)>,
) -> Result<(Value, Option<u32>)> {
    node_call(link, key, cmd, guard, command_limit(link, guard)).await
}

/// The usual limit of one command sent with `guard` (the replication `WAIT` adds its own).
fn command_limit(link: &Link, guard: Option<(u32, Duration)>) -> Limit {
    Limit::Within(
        link.response_timeout()
            .saturating_add(guard.map_or(Duration::ZERO, |(_, t)| t)),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_again_doubles_up_to_200ms_within_its_budget() {
        let mut t = TryAgain::new(Duration::from_millis(500));
        let pauses: Vec<u64> = std::iter::from_fn(|| t.next_pause())
            .map(|d| d.as_millis() as u64)
            .collect();
        // 10, 20, 40, 80, 160, 190 (the rest of the budget), then none.
        assert_eq!(pauses, [10, 20, 40, 80, 160, 190]);
        assert_eq!(pauses.iter().sum::<u64>(), 500);
        assert!(t.next_pause().is_none());
    }

    #[test]
    fn try_again_caps_a_pause_at_200ms() {
        let mut t = TryAgain::new(Duration::from_secs(5));
        let max = std::iter::from_fn(|| t.next_pause()).max().unwrap();
        assert_eq!(max, Duration::from_millis(200));
    }

    #[test]
    fn try_again_with_no_budget_never_pauses() {
        assert!(TryAgain::new(Duration::ZERO).next_pause().is_none());
    }
}
