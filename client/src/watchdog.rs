//! The one background task per client that renews every watchdog-held lock.

use std::sync::{Arc, Weak};

use redis::Value;
use tokio::time::{Instant, MissedTickBehavior};

use crate::{remove_entry, scripts, send_pipeline, Entry, Inner, LostReason};

pub(crate) async fn run(weak: Weak<Inner>) {
    let interval = match weak.upgrade() {
        Some(i) => i.config.renew_interval(),
        None => return,
    };
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(inner) = weak.upgrade() else { return };
        renew_all(&inner).await;
    }
}

async fn renew_all(inner: &Inner) {
    let entries: Vec<Arc<Entry>> = {
        let mut map = inner.registry.lock().unwrap();
        map.retain(|_, e| e.is_active());
        map.values().filter(|e| e.is_watched()).cloned().collect()
    };
    if entries.is_empty() {
        return;
    }
    let now = Instant::now();
    let mut live = Vec::with_capacity(entries.len());
    for e in entries {
        if e.deadline() <= now {
            // No successful renewal within the lease: it may have expired on the server.
            e.mark(LostReason::LeaseExpired);
            remove_entry(&inner.registry, &e);
        } else {
            live.push(e);
        }
    }
    let futs = live
        .chunks(inner.config.renew_batch.max(1))
        .map(|c| renew_chunk(inner, c));
    futures::future::join_all(futs).await;
}

async fn renew_chunk(inner: &Inner, chunk: &[Arc<Entry>]) {
    let limit = inner
        .config
        .response_timeout
        .min(inner.config.renew_interval());
    let mut conn = inner.conn.clone();
    for _attempt in 0..2 {
        let mut pipe = redis::pipe();
        for e in chunk {
            let ms = e.lease.as_millis() as u64;
            if inner.native {
                pipe.cmd("DLOCK.RENEW").arg(&e.key).arg(&e.owner).arg(ms);
            } else {
                pipe.cmd("EVALSHA")
                    .arg(inner.scripts.renew.get_hash())
                    .arg(1)
                    .arg(&e.key)
                    .arg(ms)
                    .arg(&e.owner);
            }
        }
        let sent = Instant::now();
        let values =
            match tokio::time::timeout(limit, send_pipeline(&mut conn, &pipe, chunk.len())).await {
                Ok(Ok(v)) => v,
                // Unreachable or slow: the deadline decides (checked each tick and by LostSignal).
                _ => return,
            };
        let mut noscript = false;
        for (e, v) in chunk.iter().zip(values) {
            match v {
                Value::Int(1) => e.renewed(sent),
                Value::Int(0) if e.is_active() => {
                    e.mark(LostReason::NotHeld);
                    remove_entry(&inner.registry, e);
                }
                Value::ServerError(se) if se.code() == "NOSCRIPT" => noscript = true,
                // The key was overwritten with something that is not a lock.
                Value::ServerError(se) if se.code() == "WRONGTYPE" && e.is_active() => {
                    e.mark(LostReason::NotHeld);
                    remove_entry(&inner.registry, e);
                }
                _ => {}
            }
        }
        if !noscript {
            return;
        }
        // The server forgot the script (restart, SCRIPT FLUSH): load it and redo the batch.
        let _: redis::RedisResult<String> = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(scripts::RENEW)
            .query_async(&mut conn)
            .await;
    }
}
