//! The one background task per client that renews every watchdog-held lock.

use std::sync::{Arc, Weak};

use redis::Value;
use tokio::time::{Instant, MissedTickBehavior};

use crate::backend::ActiveBackend;
use crate::conn::{push_replica_wait, Connection};
use crate::lease::Entry;
use crate::shared::Inner;
use crate::LostReason;

/// Send a pipeline and get every reply (errors stay inline as `Value::ServerError`).
async fn send_pipeline(
    conn: &mut Connection,
    pipe: &redis::Pipeline,
    n: usize,
) -> redis::RedisResult<Vec<Value>> {
    use redis::aio::ConnectionLike;
    conn.req_packed_commands(pipe, 0, n).await
}

/// Renew every watched lock each renew interval until the client is gone.
pub(crate) async fn run(weak: Weak<Inner>, backend: Weak<ActiveBackend>) {
    let interval = match weak.upgrade() {
        Some(i) => i.config.renew_interval(),
        None => return,
    };
    let closed = weak.upgrade().and_then(|i| i.link.shared().closed_signal());
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        let rebind = match &closed {
            Some(closed) => tokio::select! {
                _ = tick.tick() => false,
                _ = closed.notified() => true,
            },
            None => {
                tick.tick().await;
                false
            }
        };
        let (Some(inner), Some(backend)) = (weak.upgrade(), backend.upgrade()) else {
            return;
        };
        if rebind {
            crate::rebind::connection_closed(&inner, &backend);
        }
        renew_all(&Renewer {
            inner: &inner,
            backend: &backend,
        })
        .await;
    }
}

/// What a renewal round works with.
struct Renewer<'a> {
    inner: &'a Inner,
    backend: &'a ActiveBackend,
}

async fn renew_all(r: &Renewer<'_>) {
    let inner = r.inner;
    let entries = inner.registry.watched();
    if entries.is_empty() {
        return;
    }
    let now = Instant::now();
    let mut live = Vec::with_capacity(entries.len());
    for e in entries {
        if e.deadline() <= now {
            // No successful renewal within the lease: it may have expired on the server.
            e.mark(LostReason::LeaseExpired);
            inner.registry.forget(&e);
        } else {
            live.push(e);
        }
    }
    let futs = live
        .chunks(inner.config.renew_batch.max(1))
        .map(|c| renew_chunk(r, c));
    futures::future::join_all(futs).await;
}

/// Apply one renewal reply; true when it was a NOSCRIPT error.
fn apply(inner: &Inner, e: &Arc<Entry>, v: Value, sent: Instant, replicated: bool) -> bool {
    match v {
        Value::Int(1) if !replicated && e.is_active() => {
            // Held, but the failover guard's WAIT got too few acknowledgements.
            e.mark(LostReason::NotReplicated);
            inner.registry.forget(e);
        }
        Value::Int(1) => e.renewed(sent),
        Value::Int(0) if e.is_active() => {
            e.mark(LostReason::NotHeld);
            inner.registry.forget(e);
        }
        Value::ServerError(se) if se.code() == "NOSCRIPT" => return true,
        // The key was overwritten with something that is not a lock.
        Value::ServerError(se) if se.code() == "WRONGTYPE" && e.is_active() => {
            e.mark(LostReason::NotHeld);
            inner.registry.forget(e);
        }
        _ => {}
    }
    false
}

fn acked(inner: &Inner, v: Option<&Value>) -> bool {
    match inner.config.min_replicas {
        None => true,
        Some((n, _)) => matches!(v, Some(Value::Int(a)) if *a >= n as i64),
    }
}

async fn renew_chunk(r: &Renewer<'_>, chunk: &[Arc<Entry>]) {
    let inner = r.inner;
    let guard = inner.config.min_replicas;
    let limit = inner
        .config
        .response_timeout
        .min(inner.config.renew_interval())
        .saturating_add(guard.map_or(std::time::Duration::ZERO, |(_, t)| t));
    let mut conn = inner.link.shared().clone();
    for _attempt in 0..2 {
        let sent = Instant::now();
        let mut noscript = false;
        if conn.is_cluster() {
            // Keys live on different nodes: one command (or [command, WAIT] pipeline) per
            // lock, all in flight at once; the cluster connection routes each by its slot
            // and multiplexes per node.
            let futs = chunk.iter().map(|e| {
                let mut c = conn.clone();
                let mut pipe = redis::pipe();
                pipe.add_command(r.backend.renew_cmd(e));
                let n = 1 + push_replica_wait(&mut pipe, guard);
                async move { tokio::time::timeout(limit, send_pipeline(&mut c, &pipe, n)).await }
            });
            let replies = futures::future::join_all(futs).await;
            for (e, r) in chunk.iter().zip(replies) {
                match r {
                    Ok(Ok(vals)) => {
                        let ok = acked(inner, vals.get(1));
                        if let Some(v) = vals.into_iter().next() {
                            noscript |= apply(inner, e, v, sent, ok);
                        }
                    }
                    // The cluster connection reports error replies as errors.
                    Ok(Err(err)) if err.code() == Some("NOSCRIPT") => noscript = true,
                    Ok(Err(err)) if err.code() == Some("WRONGTYPE") && e.is_active() => {
                        e.mark(LostReason::NotHeld);
                        inner.registry.forget(e);
                    }
                    _ => {}
                }
            }
        } else {
            let mut pipe = redis::pipe();
            for e in chunk {
                pipe.add_command(r.backend.renew_cmd(e));
            }
            // On the same connection: WAIT covers every renewal above.
            let n = chunk.len() + push_replica_wait(&mut pipe, guard);
            let r = tokio::time::timeout(limit, send_pipeline(&mut conn, &pipe, n)).await;
            let values = match r {
                Ok(Ok(v)) => v,
                // Unreachable or slow: the deadline decides (checked each tick and by LostSignal).
                _ => return,
            };
            let ok = guard.is_none() || acked(inner, values.get(chunk.len()));
            for (e, v) in chunk.iter().zip(values) {
                noscript |= apply(inner, e, v, sent, ok);
            }
        }
        if !noscript {
            return;
        }
        // The server forgot a script (restart, SCRIPT FLUSH): load them and redo the batch.
        r.backend.reload_scripts(&mut conn).await;
    }
}
