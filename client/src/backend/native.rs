//! The native backend: the dlock module's commands. A waiting acquire is one
//! `DLOCK.ACQUIRE ... WAIT` (or `DLOCK.RWLOCK ... WAIT`): the server queues it FIFO and
//! answers when it grants or the wait ends.

use redis::Value;
use tokio::time::Instant;

use super::{Grant, Request, Wait};
use crate::holds::Entry;
use crate::kind::LockKind;
use crate::shared::Inner;
use crate::topology::{call, redirect, Connection, Stamp};
use crate::{Error, Result};

/// `bind`: the grace every grant and renewal binds the hold with (`BIND`), if any.
pub(crate) struct Native {
    bind: Option<std::time::Duration>,
}

/// Does the server know the module's commands? Asked with `DLOCK.INFO` on a key, which
/// every user allowed to lock may run (unlike `MODULE LIST`, an admin command).
pub(crate) async fn has_module(conn: &Connection) -> Result<bool> {
    let r: redis::RedisResult<Value> = redis::cmd("DLOCK.INFO")
        .arg("dlock:probe")
        .query_async(&mut conn.clone())
        .await;
    match r {
        Ok(Value::ServerError(e)) => Ok(!is_unknown_command(Some(e.code()), e.details())),
        Ok(_) => Ok(true),
        Err(e)
            if e.kind() == redis::ErrorKind::ResponseError
                || e.kind() == redis::ErrorKind::ExtensionError
                || e.code().is_some() =>
        {
            Ok(!is_unknown_command(e.code(), e.detail()))
        }
        Err(e) => Err(Error::from_redis("", e)),
    }
}

/// `ERR unknown command 'DLOCK.INFO'`: no module. Any other error (WRONGTYPE on the probe
/// key, NOPERM for the key pattern) still proves the command exists.
fn is_unknown_command(code: Option<&str>, detail: Option<&str>) -> bool {
    let d = detail.unwrap_or("").to_ascii_lowercase();
    code == Some("ERR") && d.contains("unknown command")
}

impl Native {
    pub(crate) fn new(bind: Option<std::time::Duration>) -> Native {
        Native { bind }
    }

    pub(crate) fn bind_grace(&self) -> Option<std::time::Duration> {
        self.bind
    }

    /// `BIND grace-ms` for a command whose lease is `lease_ms` (the grace may not exceed it).
    fn bind_ms(&self, lease_ms: u64) -> Option<u64> {
        self.bind.map(|g| (g.as_millis() as u64).min(lease_ms))
    }

    /// `BIND grace-ms` for the grant of `req`, if it is to be bound.
    fn grant_bind_ms(&self, req: &Request<'_>) -> Option<u64> {
        self.bind_ms(req.lease_ms).filter(|_| req.bind)
    }

    pub(crate) async fn acquire(&self, inner: &Inner, req: &Request<'_>) -> Result<Option<Grant>> {
        let guard = inner.config.min_replicas;
        // With a wait, the time left of it now; zero or no wait: one try, below.
        let limit = match req.wait {
            Wait::No => None,
            Wait::For(d) => {
                let end = req.started + d;
                (end > Instant::now()).then_some(call::Limit::Until {
                    end,
                    // The server answers a wait at its end: allow for the round trip (the
                    // contract's bound of a wait: its time-out plus one response time-out).
                    slack: inner.config.response_timeout,
                })
            }
            // No client-side time-out either: the request keeps its place in the server's
            // queue until granted (the link is watched meanwhile).
            Wait::Forever => Some(call::Limit::Unlimited),
        };
        let Some(limit) = limit else {
            return self.try_once(inner, req).await;
        };
        if guard.is_none() && self.grant_bind_ms(req).is_some() {
            // A bound hold: a try on the shared connection first binds an immediate grant
            // where it belongs (no rebind, no dedicated connection); only a busy lock queues.
            match self.try_once(inner, req).await {
                Ok(Some(g)) => return Ok(Some(g)),
                Ok(None) => {}
                // A redirect the shared cluster connection stopped following: the path
                // below follows it within the wait's own bounds.
                Err(e) if redirect::is_redirect_error(&e) => {}
                Err(e) => return Err(e),
            }
        }
        // With a wait, one command does it all: the server grants at once when it can, else
        // queues the request. It goes on a dedicated connection to the key's node: a blocked
        // reply would stall the shared one. When the key's slot moves meanwhile (a reshard),
        // the node answers with a redirect and the request is sent to the new owner with
        // what is left of the wait (see `call::node_call`); run out between redirects, the
        // wait ends ungranted, as it would on the server.
        let asked = call::node_call(&inner.link, req.key, guard, limit, |left| {
            grant_cmd(req, Some(wait_ms(left)), self.grant_bind_ms(req))
        })
        .await?;
        let Some((v, acks)) = asked else {
            return Ok(None);
        };
        let Some(grant) = parse_grant(req.key, v)? else {
            return Ok(None);
        };
        // The grant happened at an unknown moment of the wait: its lease started no earlier
        // than the acquire did.
        let (at, bound) = self.confirm(inner, req, req.started).await?;
        Ok(to_grant(Some(grant), at, acks, bound))
    }
}

impl Native {
    /// One try without waiting: on the shared connection, or with the failover guard on a
    /// dedicated one (followed by its replication `WAIT`).
    async fn try_once(&self, inner: &Inner, req: &Request<'_>) -> Result<Option<Grant>> {
        let guard = inner.config.min_replicas;
        let cmd = grant_cmd(req, None, self.grant_bind_ms(req));
        let sent = Instant::now();
        let (v, acks, mut bound) = if guard.is_some() {
            let (v, acks) = call::guarded_call(&inner.link, req.key, &cmd, guard).await?;
            (v, acks, None)
        } else {
            let (r, stamp) = inner.link.shared().send_stamped(&cmd).await;
            let v = r.map_err(|e| Error::from_redis(req.key, e))?;
            (v, None, Some(stamp.unwrap_or(Stamp::unlinked(sent))))
        };
        let grant = parse_grant(req.key, v)?;
        let mut at = sent;
        let lease = std::time::Duration::from_millis(req.lease_ms);
        // Granted on a dedicated connection (with its replication WAIT), or answered so late
        // that less than half the lease is left (a cluster connection tries `TRYAGAIN`
        // again by itself, for seconds during a slot migration): confirmed, so the grant
        // is not handed out already lost (the client contract's rule 2).
        if grant.is_some() && (guard.is_some() || sent + lease / 2 <= Instant::now()) {
            (at, bound) = self.confirm(inner, req, sent).await?;
        }
        Ok(to_grant(grant, at, acks, bound))
    }

    /// Confirm a grant that came on a dedicated connection, whose lease started no earlier
    /// than `known`: answers the send time the hold's lease (and binding) count from.
    ///
    /// - A bound hold is bound to the connection that carried the grant; that connection
    ///   goes back to the pool, where it may be closed (a cancelled wait, an overfull pool)
    ///   and cut the hold. It is bound to the shared connection instead, which lives as long
    ///   as the client.
    /// - A grant whose lease may be half gone (a wait longer than half the lease; the
    ///   server's lease started at the grant, somewhere in the wait) is renewed before it is
    ///   handed out, so the caller never gets a hold that is already lost (see the client
    ///   contract in docs/CLIENTS.md).
    ///
    /// Both send one `DLOCK.RENEW` with the full lease on the shared connection. Answered
    /// 0, the hold is gone ([`Error::NotHeld`]); unanswered, the lease counts from `known`
    /// and the watchdog's next renewal rebinds.
    /// Also answers the command that bound the hold, when it was bound here.
    async fn confirm(
        &self,
        inner: &Inner,
        req: &Request<'_>,
        known: Instant,
    ) -> Result<(Instant, Option<Stamp>)> {
        let bind = self.grant_bind_ms(req);
        let lease = std::time::Duration::from_millis(req.lease_ms);
        if bind.is_none() && known + lease / 2 > Instant::now() {
            return Ok((known, None));
        }
        let cmd = renew_with(req.key, req.owner, req.lease_ms, bind);
        let sent = Instant::now();
        let r = tokio::time::timeout(
            inner.config.response_timeout,
            inner.link.shared().send_stamped(&cmd),
        )
        .await;
        match r {
            Ok((Ok(Value::Int(1)), stamp)) => {
                Ok((sent, Some(stamp.unwrap_or(Stamp::unlinked(sent)))))
            }
            Ok((Ok(Value::Int(0)), _)) => Err(Error::NotHeld(req.key.to_string())),
            // Unknown: still bound to the dedicated connection, known open when the wait began.
            _ => Ok((known, Some(Stamp::unlinked(known)))),
        }
    }

    /// The watchdog's renewal (or an explicit one) of `e`, rebinding a bound hold to the
    /// connection that sends it.
    pub(crate) fn renew_cmd(&self, e: &Entry) -> redis::Cmd {
        let lease_ms = crate::config::wire_ms(e.lease);
        let bind = self.bind_ms(lease_ms).filter(|_| e.bound.is_some());
        renew_with(&e.key, &e.owner, lease_ms, bind)
    }
}
/// `WAIT`'s argument for the time left of a wait (`None`: no limit, `WAIT 0`): rounded up to
/// whole milliseconds, so that the server never gives up before the caller's deadline (a
/// rounded-down 399.9 ms answered nil 0.2 ms early); at least 1 ms, since 0 means no limit.
fn wait_ms(left: Option<std::time::Duration>) -> u64 {
    left.map_or(0, |d| (d.as_micros().div_ceil(1000) as u64).max(1))
}

/// A command sized for its arguments up front: building one is a measurable part of the
/// client's CPU per acquire+release, and growing the buffers arg by arg doubled it.
fn command(name: &str, args: usize, data: usize) -> redis::Cmd {
    let mut c = redis::Cmd::with_capacity(args + 1, name.len() + data);
    c.arg(name);
    c
}

/// The module's grant command for the request's kind.
fn grant_cmd(req: &Request<'_>, wait_ms: Option<u64>, bind_ms: Option<u64>) -> redis::Cmd {
    // key, owner, [mode | capacity], lease, [COUNT n], [WAIT ms], [FENCE], [BIND ms],
    // [LOCKDELAY ms]; 20 bytes a number.
    let data = req.key.len() + req.owner.len() + 20 + 20 + 5 + 20 + 4 + 20 + 5 + 24 + 29;
    let mut cmd = match (req.permits, req.kind.word()) {
        (Some(p), _) => {
            let mut c = command("DLOCK.SEMAPHORE", 9, data);
            c.arg(req.key)
                .arg(req.owner)
                .arg(p.capacity)
                .arg(req.lease_ms)
                .arg("COUNT")
                .arg(p.count);
            c
        }
        (None, None) => {
            let mut c = command("DLOCK.ACQUIRE", 6, data);
            c.arg(req.key).arg(req.owner).arg(req.lease_ms);
            c
        }
        (None, Some(w)) => {
            let mut c = command("DLOCK.RWLOCK", 7, data);
            c.arg(req.key).arg(req.owner).arg(w).arg(req.lease_ms);
            c
        }
    };
    if let Some(ms) = wait_ms {
        cmd.arg("WAIT").arg(ms);
    }
    if req.fence {
        cmd.arg("FENCE");
    }
    if let Some(ms) = bind_ms {
        bind_arg(&mut cmd, ms, req.lease_ms);
    }
    if let Some(ms) = req.lock_delay_ms {
        cmd.arg("LOCKDELAY").arg(ms);
    }
    cmd
}

/// `DLOCK.RELEASE` of one hold, or of `count` permits of a semaphore.
pub(crate) fn release_cmd(key: &str, owner: &str, kind: LockKind, count: u64) -> redis::Cmd {
    let mut c = command("DLOCK.RELEASE", 4, key.len() + owner.len() + 25);
    c.arg(key).arg(owner);
    if kind == LockKind::Semaphore {
        c.arg("COUNT").arg(count);
    } else if let Some(w) = kind.word() {
        c.arg(w);
    }
    c
}

/// `DLOCK.RENEW key owner lease-ms [BIND grace-ms]`.
fn renew_with(key: &str, owner: &str, lease_ms: u64, bind_ms: Option<u64>) -> redis::Cmd {
    let mut c = command("DLOCK.RENEW", 5, key.len() + owner.len() + 45);
    c.arg(key).arg(owner).arg(lease_ms);
    if let Some(ms) = bind_ms {
        bind_arg(&mut c, ms, lease_ms);
    }
    c
}

/// `BIND grace-ms`, or a bare `BIND` where the module's default grace (2 s, or the lease if
/// shorter) is that grace: the default then costs the server no number to read.
fn bind_arg(c: &mut redis::Cmd, grace_ms: u64, lease_ms: u64) {
    c.arg("BIND");
    if grace_ms != (dlock_core::limits::DEFAULT_BIND_GRACE_MS as u64).min(lease_ms) {
        c.arg(grace_ms);
    }
}

/// The grant a parsed reply stands for, made at `at`.
fn to_grant(
    parsed: Option<(u64, Option<u64>)>,
    at: Instant,
    acks: Option<u32>,
    bound: Option<Stamp>,
) -> Option<Grant> {
    parsed.map(|(count, token)| Grant {
        at,
        count: Some(count),
        token,
        acks,
        bound,
    })
}

/// A grant reply: `count` or `[count, token]`; null = not granted.
fn parse_grant(key: &str, v: Value) -> Result<Option<(u64, Option<u64>)>> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(n) => Ok(Some((n as u64, None))),
        Value::Array(a) if a.len() == 2 => match (&a[0], &a[1]) {
            (Value::Int(c), Value::Int(t)) => Ok(Some((*c as u64, Some(*t as u64)))),
            _ => Err(Error::Protocol(format!("DLOCK.ACQUIRE answered {a:?}"))),
        },
        Value::ServerError(e) => Err(Error::from_server_value(key, e)),
        other => Err(Error::Protocol(format!("DLOCK.ACQUIRE answered {other:?}"))),
    }
}

/// Poll `DLOCK.WAITERS key` until `owner` no longer waits on `key` (the server dropped the
/// closed connection's request, or granted it), for at most twice the response time-out.
pub(crate) async fn wait_not_queued(inner: &Inner, key: &str, owner: &str) {
    let deadline = Instant::now() + inner.config.response_timeout.saturating_mul(2);
    let mut conn = inner.link.shared().clone();
    while Instant::now() < deadline {
        let Ok(waiters) = crate::waiters::query(&mut conn, key).await else {
            return;
        };
        if !waiters.iter().any(|w| w.owner == owner) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_grant_replies() {
        assert_eq!(parse_grant("k", Value::Nil).unwrap(), None);
        assert_eq!(parse_grant("k", Value::Int(2)).unwrap(), Some((2, None)));
        let fenced = Value::Array(vec![Value::Int(1), Value::Int(42)]);
        assert_eq!(parse_grant("k", fenced).unwrap(), Some((1, Some(42))));
        let odd = Value::Array(vec![Value::Int(1)]);
        assert!(matches!(parse_grant("k", odd), Err(Error::Protocol(_))));
        let bad = Value::Array(vec![Value::Int(1), Value::Nil]);
        assert!(matches!(parse_grant("k", bad), Err(Error::Protocol(_))));
        assert!(matches!(
            parse_grant("k", Value::Okay),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn an_unknown_command_means_no_module() {
        assert!(is_unknown_command(
            Some("ERR"),
            Some("unknown command 'DLOCK.INFO', with args beginning with: 'x'")
        ));
        assert!(!is_unknown_command(
            Some("WRONGTYPE"),
            Some("Operation against a key")
        ));
        assert!(!is_unknown_command(Some("NOPERM"), Some("No permissions")));
        assert!(!is_unknown_command(Some("ERR"), Some("syntax error")));
    }

    #[test]
    fn commands_on_the_wire() {
        let req = Request {
            key: "k",
            owner: "o",
            kind: LockKind::Write,
            permits: None,
            lease_ms: 500,
            fence: true,
            bind: true,
            lock_delay_ms: None,
            wait: Wait::No,
            started: Instant::now(),
        };
        let words = |c: &redis::Cmd| {
            c.args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                    redis::Arg::Cursor => "<cursor>".into(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            words(&grant_cmd(&req, Some(100), None)),
            "DLOCK.RWLOCK k o WRITE 500 WAIT 100 FENCE"
        );
        let delayed = Request {
            lock_delay_ms: Some(250),
            ..req
        };
        assert_eq!(
            words(&grant_cmd(&delayed, None, Some(200))),
            "DLOCK.RWLOCK k o WRITE 500 FENCE BIND 200 LOCKDELAY 250"
        );
        let sem = Request {
            kind: LockKind::Semaphore,
            permits: Some(super::super::Permits {
                capacity: 5,
                count: 2,
            }),
            fence: false,
            ..req
        };
        assert_eq!(
            words(&grant_cmd(&sem, None, None)),
            "DLOCK.SEMAPHORE k o 5 500 COUNT 2"
        );
        assert_eq!(
            words(&release_cmd("k", "o", LockKind::Read, 1)),
            "DLOCK.RELEASE k o READ"
        );
        assert_eq!(
            words(&release_cmd("k", "o", LockKind::Semaphore, 3)),
            "DLOCK.RELEASE k o COUNT 3"
        );
        assert_eq!(
            words(&release_cmd("k", "o", LockKind::Exclusive, 1)),
            "DLOCK.RELEASE k o"
        );
        // The grace is sent as at most the command's lease; none without binding.
        let bound = Native::new(Some(std::time::Duration::from_secs(2)));
        assert_eq!(bound.bind_ms(30_000), Some(2000));
        assert_eq!(bound.bind_ms(500), Some(500));
        assert_eq!(Native::new(None).bind_ms(500), None);
        assert_eq!(
            words(&renew_with("k", "o", 500, Some(200))),
            "DLOCK.RENEW k o 500 BIND 200"
        );
        assert_eq!(
            words(&renew_with("k", "o", 500, None)),
            "DLOCK.RENEW k o 500"
        );
        // The default grace goes as a bare BIND (the module's default: 2 s, or the lease).
        assert_eq!(
            words(&renew_with("k", "o", 30_000, bound.bind_ms(30_000))),
            "DLOCK.RENEW k o 30000 BIND"
        );
        assert_eq!(
            words(&renew_with("k", "o", 500, bound.bind_ms(500))),
            "DLOCK.RENEW k o 500 BIND"
        );
        assert_eq!(
            words(&grant_cmd(&delayed, None, Some(2000))),
            "DLOCK.RWLOCK k o WRITE 500 FENCE BIND 2000 LOCKDELAY 250"
        );
        let long = Request {
            lease_ms: 30_000,
            ..delayed
        };
        assert_eq!(
            words(&grant_cmd(&long, None, Some(2000))),
            "DLOCK.RWLOCK k o WRITE 30000 FENCE BIND LOCKDELAY 250"
        );
    }
}
