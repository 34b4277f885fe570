//! The script backend: Redisson's `RLock` protocol on plain Redis. A waiting acquire tries
//! the lock script, subscribes to the unlock channel, and tries again on each unlock
//! message or after the holder's remaining lease.

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::subscriber::Subscribers;
use super::{lua, Grant, Release, Request, Wait};
use crate::holds::Entry;
use crate::kind::LockKind;
use crate::shared::Inner;
use crate::topology::{call, Connection};
use crate::{Error, Result};
use dlock_core::error::LockError;

pub(crate) struct Script {
    lock: redis::Script,
    unlock: redis::Script,
    renew: redis::Script,
    force_unlock: redis::Script,
    rw_lock: redis::Script,
    rw_unlock: redis::Script,
    rw_renew: redis::Script,
    sem_acquire: redis::Script,
    sem_release: redis::Script,
    sem_renew: redis::Script,
    subscribers: Subscribers,
}

impl Script {
    pub(crate) fn new() -> Script {
        Script {
            lock: redis::Script::new(lua::LOCK),
            unlock: redis::Script::new(lua::UNLOCK),
            renew: redis::Script::new(lua::RENEW),
            force_unlock: redis::Script::new(lua::FORCE_UNLOCK),
            rw_lock: redis::Script::new(&lua::rw_lock_script(lua::RW_LOCK_BODY)),
            rw_unlock: redis::Script::new(&lua::rw_lock_script(lua::RW_UNLOCK_BODY)),
            rw_renew: redis::Script::new(&lua::rw_lock_script(lua::RW_RENEW_BODY)),
            sem_acquire: redis::Script::new(&lua::semaphore_script(lua::SEMAPHORE_ACQUIRE_BODY)),
            sem_release: redis::Script::new(&lua::semaphore_script(lua::SEMAPHORE_RELEASE_BODY)),
            sem_renew: redis::Script::new(&lua::semaphore_script(lua::SEMAPHORE_RENEW_BODY)),
            subscribers: Subscribers::default(),
        }
    }

    /// `Ok(Ok(grant))` = granted, `Ok(Err(ms))` = held by someone else (PTTL, or how long
    /// until the earliest conflicting lease ends; for a semaphore at most 100 ms).
    async fn try_once(&self, inner: &Inner, req: &Request<'_>) -> Result<Result<Grant, i64>> {
        let sent = Instant::now();
        let (v, acks) = if inner.config.min_replicas.is_some() {
            call::guarded_call(
                &inner.link,
                req.key,
                &grant_cmd(req),
                inner.config.min_replicas,
            )
            .await?
        } else {
            let mut conn = inner.link.shared().clone();
            let mut inv = match req.kind {
                LockKind::Exclusive => self.lock.key(req.key),
                LockKind::Semaphore => self.sem_acquire.key(req.key),
                _ => self.rw_lock.key(req.key),
            };
            match (req.kind, req.permits) {
                (LockKind::Exclusive, _) => inv.arg(req.lease_ms).arg(req.owner),
                (_, Some(p)) => inv
                    .arg(req.owner)
                    .arg(p.capacity)
                    .arg(req.lease_ms)
                    .arg(p.count),
                (k, None) => inv.arg(req.owner).arg(k.script_word()).arg(req.lease_ms),
            };
            let v: Value = inv
                .invoke_async(&mut conn)
                .await
                .map_err(|e| Error::from_redis(req.key, e))?;
            (v, None)
        };
        let grant = |count| {
            Ok(Grant {
                at: sent,
                count,
                token: None,
                acks,
                bound: None,
            })
        };
        match v {
            Value::Nil => Ok(grant(None)),
            Value::Int(n) => Ok(Err(n)),
            Value::Array(a) if a.len() == 2 => match (&a[0], &a[1]) {
                (Value::Int(1), Value::Int(c)) => Ok(grant(Some(*c as u64))),
                (Value::Int(0), Value::Int(w)) => Ok(Err(*w)),
                (Value::Int(-1), Value::Int(stored)) if req.permits.is_some() => {
                    Err(Error::Server(error_text(LockError::CapacityMismatch {
                        stored: *stored,
                        asked: req.permits.map_or(0, |p| i64::from(p.capacity)),
                    })))
                }
                _ => Err(Error::Protocol(format!("lock script answered {a:?}"))),
            },
            Value::ServerError(e) => Err(Error::from_server_value(req.key, e)),
            other => Err(Error::Protocol(format!("lock script answered {other:?}"))),
        }
    }

    /// The client is closing: end the pub/sub connections.
    pub(crate) fn close(&self, rt: &tokio::runtime::Handle) {
        self.subscribers.close(rt);
    }

    /// Redisson's `tryLock(waitTime, leaseTime)`: try; subscribe to the unlock channel;
    /// retry on each unlock message or after min(PTTL, remaining wait).
    pub(crate) async fn acquire(&self, inner: &Inner, req: &Request<'_>) -> Result<Option<Grant>> {
        if let Ok(g) = self.try_once(inner, req).await? {
            return Ok(Some(g));
        }
        let deadline = match req.wait {
            Wait::No => return Ok(None),
            Wait::For(d) => req.started.checked_add(d),
            Wait::Forever => None,
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        let channel = lua::channel_name(&inner.config.channel_prefix, req.key);
        let sub = self
            .subscribers
            .subscribe(
                &inner.link.pubsub_client(req.key).await,
                &channel,
                inner.link.runtime(),
            )
            .await;
        loop {
            let ttl = match self.try_once(inner, req).await? {
                Ok(g) => return Ok(Some(g)),
                Err(t) => t,
            };
            let now = Instant::now();
            let mut until = deadline;
            if ttl >= 0 {
                let t = now + Duration::from_millis(ttl as u64);
                until = Some(until.map_or(t, |d| d.min(t)));
            }
            if sub.is_none() {
                // No subscription (pub/sub unavailable): poll.
                let t = now + Duration::from_millis(100);
                until = Some(until.map_or(t, |d| d.min(t)));
            }
            match (&sub, until) {
                (Some(s), Some(u)) => {
                    let _ = tokio::time::timeout_at(u, s.notified()).await;
                }
                (Some(s), None) => s.notified().await,
                (None, Some(u)) => tokio::time::sleep_until(u).await,
                (None, None) => unreachable!("no subscription means a polling deadline"),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // One last try, as Redisson's loop does before giving up on time.
                return Ok(self.try_once(inner, req).await?.ok());
            }
        }
    }

    pub(crate) async fn release(
        &self,
        inner: &Inner,
        r: &Release<'_>,
    ) -> redis::RedisResult<Value> {
        let mut conn = inner.link.shared().clone();
        let call = ReleaseCall::new(inner, r);
        let script = match r.kind {
            LockKind::Semaphore => &self.sem_release,
            LockKind::Exclusive => &self.unlock,
            LockKind::Read | LockKind::Write => &self.rw_unlock,
        };
        let mut invocation = script.prepare_invoke();
        for k in &call.keys {
            invocation.key(k);
        }
        for a in &call.args {
            invocation.arg(a);
        }
        let v = invocation.invoke_async(&mut conn).await?;
        if r.kind == LockKind::Semaphore {
            over_held(r.count, v)
        } else {
            Ok(v)
        }
    }

    pub(crate) fn renew_cmd(&self, e: &Entry) -> redis::Cmd {
        let hash = match e.kind {
            LockKind::Exclusive => self.renew.get_hash(),
            LockKind::Semaphore => self.sem_renew.get_hash(),
            LockKind::Read | LockKind::Write => self.rw_renew.get_hash(),
        };
        let mut c = redis::cmd("EVALSHA");
        c.arg(hash)
            .arg(1)
            .arg(&*e.key)
            .arg(crate::config::wire_ms(e.lease))
            .arg(&*e.owner);
        c
    }

    pub(crate) async fn force_unlock(&self, inner: &Inner, key: &str) -> redis::RedisResult<i64> {
        self.force_unlock
            .key(key)
            .key(lua::channel_name(&inner.config.channel_prefix, key))
            .arg(lua::UNLOCK_MESSAGE)
            .invoke_async(&mut inner.link.shared().clone())
            .await
    }
}

/// The grant attempt as a plain `EVAL` (for a dedicated connection).
fn grant_cmd(req: &Request<'_>) -> redis::Cmd {
    let mut c = redis::cmd("EVAL");
    if let Some(p) = req.permits {
        c.arg(lua::semaphore_script(lua::SEMAPHORE_ACQUIRE_BODY))
            .arg(1)
            .arg(req.key)
            .arg(req.owner)
            .arg(p.capacity)
            .arg(req.lease_ms)
            .arg(p.count);
        return c;
    }
    match req.kind {
        LockKind::Exclusive => {
            c.arg(lua::LOCK)
                .arg(1)
                .arg(req.key)
                .arg(req.lease_ms)
                .arg(req.owner);
        }
        k => {
            c.arg(lua::rw_lock_script(lua::RW_LOCK_BODY))
                .arg(1)
                .arg(req.key)
                .arg(req.owner)
                .arg(k.script_word())
                .arg(req.lease_ms);
        }
    }
    c
}

/// One hold (`count` permits of a semaphore) given back: the release script's KEYS and ARGV
/// (the lock and its unlock channel; the arguments in the order each script reads them), sent
/// as `EVALSHA` through `redis::Script` or as a plain `EVAL` ([`ReleaseCall::eval`]).
pub(crate) struct ReleaseCall {
    kind: LockKind,
    keys: [String; 2],
    args: Vec<String>,
}

impl ReleaseCall {
    pub(crate) fn new(inner: &Inner, r: &Release<'_>) -> ReleaseCall {
        let Release {
            key,
            owner,
            kind,
            lease,
            count,
        } = *r;
        let channel = lua::channel_name(&inner.config.channel_prefix, key);
        let message = lua::UNLOCK_MESSAGE.to_string();
        let args = match kind {
            LockKind::Semaphore => vec![owner.to_string(), count.to_string(), message],
            LockKind::Exclusive => vec![
                message,
                crate::config::wire_ms(lease).to_string(),
                owner.to_string(),
            ],
            LockKind::Read | LockKind::Write => {
                vec![owner.to_string(), kind.script_word().to_string(), message]
            }
        };
        ReleaseCall {
            kind,
            keys: [key.to_string(), channel],
            args,
        }
    }

    /// As a plain `EVAL` (for a dedicated connection or a blind clean-up).
    pub(crate) fn eval(&self) -> redis::Cmd {
        let text = match self.kind {
            LockKind::Semaphore => lua::semaphore_script(lua::SEMAPHORE_RELEASE_BODY),
            LockKind::Exclusive => lua::UNLOCK.to_string(),
            LockKind::Read | LockKind::Write => lua::rw_lock_script(lua::RW_UNLOCK_BODY),
        };
        let mut c = redis::cmd("EVAL");
        c.arg(text)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        c
    }
}

/// Load the renewal scripts (after the server forgot them: restart, SCRIPT FLUSH). On a
/// cluster, SCRIPT LOAD goes to every master.
pub(crate) async fn reload_scripts(conn: &mut Connection) {
    for text in [
        lua::RENEW.to_string(),
        lua::rw_lock_script(lua::RW_RENEW_BODY),
        lua::semaphore_script(lua::SEMAPHORE_RENEW_BODY),
    ] {
        let _: redis::RedisResult<Value> = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(text)
            .query_async(conn)
            .await;
    }
}

/// An error text of dlock-core (the module's own), as this client reports server errors.
fn error_text(e: LockError) -> String {
    e.message("")
}

/// The semaphore release script's `{-1, held}` (asked to give back more permits than the
/// owner holds) as the error reply the module gives; any other reply as it is.
fn over_held(count: u64, v: Value) -> redis::RedisResult<Value> {
    let Value::Array(a) = &v else { return Ok(v) };
    let [Value::Int(-1), Value::Int(held)] = a.as_slice() else {
        return Ok(v);
    };
    let text = error_text(LockError::CountOverHeld {
        count: count as i64,
        held: *held,
    });
    let detail = text.strip_prefix("ERR ").unwrap_or(&text).to_string();
    Err((redis::ErrorKind::ResponseError, "semaphore release", detail).into())
}
