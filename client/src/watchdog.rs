//! The one background task per client that renews every watchdog-held lock.

use std::sync::{Arc, Weak};

use redis::Value;
use tokio::time::{Instant, MissedTickBehavior};

use crate::backend::ActiveBackend;
use crate::holds::Entry;
use crate::rebind::Bound;
use crate::shared::Inner;
use crate::topology::{push_replica_wait, Answered, Connection, Stamp};
use crate::{Error, LostReason, Result};

/// Send a pipeline and get every reply (errors stay inline as `Value::ServerError`).
async fn send_pipeline(
    conn: &mut Connection,
    pipe: &redis::Pipeline,
    n: usize,
) -> redis::RedisResult<Vec<Value>> {
    use redis::aio::ConnectionLike;
    conn.req_packed_commands(pipe, 0, n).await
}

/// What woke the watchdog.
enum Round {
    /// The renew interval passed, or the shared connection closed (the holds bound to it
    /// are rebound on the new one at once).
    Renew,
    /// Time to check that the bound connection gave a sign of life lately.
    Beat,
}

/// Renew every watched lock each renew interval until the client is gone; where the shared
/// connection tracks its answers (a single node) and holds are bound, keep a regular sign of
/// life on it (see [`sign_of_life`]).
pub(crate) async fn run(weak: Weak<Inner>, backend: Weak<ActiveBackend>) {
    let Some((interval, closed, beat)) = weak.upgrade().zip(backend.upgrade()).map(|(i, b)| {
        let shared = i.link.shared();
        let beat = b
            .bound(&i, i.config.lease)
            .and_then(|b| Some((Bound::beat(b.grace), b.answered?)));
        (i.config.renew_interval(), shared.closed_signal(), beat)
    }) else {
        return;
    };
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await;
    let mut beat_tick = tokio::time::interval(beat.as_ref().map_or(interval, |b| b.0));
    beat_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let round = tokio::select! {
            _ = tick.tick() => Round::Renew,
            _ = notified(closed.as_deref()) => Round::Renew,
            _ = beat_tick.tick(), if beat.is_some() => Round::Beat,
        };
        let (Some(inner), Some(backend)) = (weak.upgrade(), backend.upgrade()) else {
            return;
        };
        match (round, &beat) {
            (Round::Beat, Some((every, answered))) => {
                sign_of_life(&inner, answered, *every).await;
            }
            _ => {
                renew_all(&Renewer {
                    inner: &inner,
                    backend: &backend,
                })
                .await
            }
        }
    }
}

/// Resolves when `closed` is signalled; never without one.
async fn notified(closed: Option<&tokio::sync::Notify>) {
    match closed {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// A bound hold stays valid a grace after the last moment its connection is known open (the
/// send time of the last command answered on it; see [`crate::rebind`]). When nothing was
/// answered on the shared connection for `every` (a third of the grace) and holds are
/// bound, one `PING` says it is still open: one per client, not one per hold.
async fn sign_of_life(inner: &Inner, answered: &Answered, every: std::time::Duration) {
    if answered.last().is_some_and(|l| l.elapsed() < every) || inner.registry.watched_count() == 0 {
        return;
    }
    let ping = redis::cmd("PING");
    let _ = tokio::time::timeout(every, inner.link.shared().send(&ping)).await;
}

/// Renew `e` now, at the caller's request (a guard's `renew()`): `Ok` when the server
/// renewed it, [`Error::NotHeld`] when this owner no longer holds it (then it is lost).
pub(crate) async fn renew_now(
    inner: &Inner,
    backend: &ActiveBackend,
    e: &Arc<Entry>,
) -> Result<()> {
    let key = &*e.key;
    if e.lost_now().is_some() {
        return Err(Error::NotHeld(key.to_string()));
    }
    let mut conn = inner.link.shared().clone();
    for _attempt in 0..2 {
        let sent = Instant::now();
        // (The cluster connection reports error replies as errors.)
        let (r, stamp) = conn.send_stamped(&backend.renew_cmd(e)).await;
        let stamp = stamp.unwrap_or(Stamp::unlinked(sent));
        let v = match r {
            Ok(v) => v,
            Err(err) if err.code() == Some("NOSCRIPT") => {
                backend.reload_scripts(&mut conn).await;
                continue;
            }
            Err(err) => {
                if err.code() == Some("WRONGTYPE") {
                    e.mark(LostReason::NotHeld);
                    inner.registry.forget(e);
                }
                return Err(Error::from_redis(key, err));
            }
        };
        if apply(inner, e, v.clone(), (sent, stamp), true) {
            // The server forgot the scripts (restart, SCRIPT FLUSH): load them, once.
            backend.reload_scripts(&mut conn).await;
            continue;
        }
        return match v {
            Value::Int(1) => Ok(()),
            Value::Int(0) => Err(Error::NotHeld(key.to_string())),
            Value::ServerError(se) => Err(Error::from_server_value(key, se)),
            other => Err(Error::Protocol(format!("renewal answered {other:?}"))),
        };
    }
    Err(Error::Protocol("renewal answered NOSCRIPT twice".into()))
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
/// `sent`: the renewal's send time (the lease counts from it), and the link that answered.
fn apply(
    inner: &Inner,
    e: &Arc<Entry>,
    v: Value,
    sent: (Instant, Stamp),
    replicated: bool,
) -> bool {
    match v {
        Value::Int(1) if !replicated && e.is_active() => {
            // Held, but the failover guard's WAIT got too few acknowledgements.
            e.mark(LostReason::NotReplicated);
            inner.registry.forget(e);
        }
        Value::Int(1) => e.renewed(sent.0, sent.1),
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
                            noscript |= apply(inner, e, v, (sent, Stamp::unlinked(sent)), ok);
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
            let r = tokio::time::timeout(limit, conn.pipeline_stamped(&pipe, n)).await;
            let (values, stamp) = match r {
                Ok((Ok(v), stamp)) => (v, stamp.unwrap_or(Stamp::unlinked(sent))),
                // Unreachable or slow: the deadline decides (checked each tick and by LostSignal).
                _ => return,
            };
            let ok = guard.is_none() || acked(inner, values.get(chunk.len()));
            for (e, v) in chunk.iter().zip(values) {
                noscript |= apply(inner, e, v, (sent, stamp), ok);
            }
        }
        if !noscript {
            return;
        }
        // The server forgot a script (restart, SCRIPT FLUSH): load them and redo the batch.
        r.backend.reload_scripts(&mut conn).await;
    }
}
