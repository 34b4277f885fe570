//! The two ways of talking to the server behind one interface, [`ActiveBackend`] (the one a client
//! chose at connect time; [`Backend`](crate::Backend) is the user's wish):
//! - [`native`]: the dlock module's `DLOCK.*` commands (server-side FIFO waiting, fencing);
//! - [`script`]: Redisson's Lua scripts ([`lua`]) on plain Redis, waiting through the
//!   unlock channel ([`subscriber`]).
//!
//! Nothing outside this folder asks which backend is in use; each kind of lock (exclusive,
//! read, write, semaphore permits) is a [`LockKind`] with its commands here.

pub mod lua;
mod native;
mod script;
mod subscriber;

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::config::{unlimited, Backend};
use crate::holds::Entry;
use crate::kind::LockKind;
use crate::shared::Inner;
use crate::topology::{Connection, Stamp};
use crate::{Error, Result};

/// One release: `count` permits of a semaphore, else one hold, of `owner` on `key`
/// (`lease`: what a script release resets when holds remain).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Release<'a> {
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) kind: LockKind,
    pub(crate) lease: Duration,
    pub(crate) count: u64,
}

impl<'a> Release<'a> {
    /// `count` of the hold `e` (permits of a semaphore, else one hold), with its lease.
    pub(crate) fn of(e: &'a Entry, count: u64) -> Release<'a> {
        Release {
            key: &e.key,
            owner: &e.owner,
            kind: e.kind,
            lease: e.lease,
            count,
        }
    }
}

/// How long to wait for a lock held by someone else.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// One attempt.
    No,
    /// Up to this long.
    For(Duration),
    /// As long as it takes.
    Forever,
}

impl Wait {
    /// `try_acquire_for`'s wait: zero = one attempt, [`Duration::MAX`] (or anything beyond
    /// the module's maximum) = no limit.
    pub(crate) fn from_duration(d: Duration) -> Wait {
        if d.is_zero() {
            Wait::No
        } else if unlimited(d) {
            Wait::Forever
        } else {
            Wait::For(d)
        }
    }
}

/// The permits a semaphore request asks for ([`LockKind::Semaphore`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Permits {
    /// The semaphore's capacity (fixed while its key exists).
    pub(crate) capacity: u32,
    /// Permits to take.
    pub(crate) count: u32,
}

/// One acquire as the backends see it.
pub(crate) struct Request<'a> {
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) kind: LockKind,
    /// Set for (and only for) [`LockKind::Semaphore`].
    pub(crate) permits: Option<Permits>,
    pub(crate) lease_ms: u64,
    pub(crate) fence: bool,
    /// Bind the hold to the connection (`BIND`, native backend with a grace): watchdog-held
    /// locks only, the ones the client rebinds when its connection changes.
    pub(crate) bind: bool,
    /// `LOCKDELAY` of an exclusive or WRITE grant (native backend).
    pub(crate) lock_delay_ms: Option<u64>,
    pub(crate) wait: Wait,
    pub(crate) started: Instant,
}

/// A grant: when it was made (for the lease deadline), the hold count when the server
/// said it, and the fencing token when asked for.
pub(crate) struct Grant {
    pub(crate) at: Instant,
    pub(crate) count: Option<u64>,
    pub(crate) token: Option<u64>,
    /// Replica acknowledgements of the grant (with the failover guard).
    pub(crate) acks: Option<u32>,
    /// The command that bound the hold to the shared connection (native, bound holds).
    pub(crate) bound: Option<Stamp>,
}

/// The backend in use.
pub(crate) enum ActiveBackend {
    Native(native::Native),
    /// Boxed: a dozen script handles, against the native backend's nothing.
    Script(Box<script::Script>),
}

impl ActiveBackend {
    /// The backend `wanted` on the server behind `conn`: `Auto` asks the server whether it
    /// knows the `DLOCK.*` commands; `Native` insists on them. `bind`: the grace the native
    /// backend binds holds with (the script backend cannot bind).
    /// `addr` names the server in the error.
    pub(crate) async fn detect(
        wanted: Backend,
        conn: &Connection,
        bind: Option<Duration>,
        addr: &str,
    ) -> Result<ActiveBackend> {
        let native = match wanted {
            Backend::Script => false,
            Backend::Native => {
                if !native::has_module(conn).await? {
                    return Err(Error::Config(format!(
                        "Backend::Native: the server at {addr} does not have the dlock module's commands"
                    )));
                }
                true
            }
            Backend::Auto => native::has_module(conn).await?,
        };
        Ok(if native {
            ActiveBackend::Native(native::Native::new(bind))
        } else {
            ActiveBackend::Script(Box::new(script::Script::new()))
        })
    }

    pub(crate) fn is_native(&self) -> bool {
        matches!(self, ActiveBackend::Native(_))
    }

    /// The client is closing: end the backend's own connections (the script backend's
    /// pub/sub connections).
    pub(crate) fn close(&self, rt: &tokio::runtime::Handle) {
        if let ActiveBackend::Script(s) = self {
            s.close(rt);
        }
    }

    /// Try (and with `req.wait`, wait) for the lock.
    pub(crate) async fn acquire(&self, inner: &Inner, req: &Request<'_>) -> Result<Option<Grant>> {
        match self {
            ActiveBackend::Native(n) => n.acquire(inner, req).await,
            ActiveBackend::Script(s) => s.acquire(inner, req).await,
        }
    }

    /// The command that gives back `r` (a plain `EVAL` on the script backend).
    pub(crate) fn release_cmd(&self, inner: &Inner, r: &Release<'_>) -> redis::Cmd {
        match self {
            ActiveBackend::Native(_) => native::release_cmd(r.key, r.owner, r.kind, r.count),
            ActiveBackend::Script(_) => script::ReleaseCall::new(inner, r).eval(),
        }
    }

    /// Release one hold of `e` (`count` permits of a semaphore) on the shared connection.
    pub(crate) async fn release(
        &self,
        inner: &Inner,
        e: &Entry,
        count: u64,
    ) -> redis::RedisResult<Value> {
        let r = Release::of(e, count);
        match self {
            ActiveBackend::Native(_) => {
                let cmd = native::release_cmd(r.key, r.owner, r.kind, r.count);
                inner.link.shared().send(&cmd).await
            }
            ActiveBackend::Script(s) => s.release(inner, &r).await,
        }
    }

    /// The watchdog's renewal of `e`.
    pub(crate) fn renew_cmd(&self, e: &Entry) -> redis::Cmd {
        match self {
            ActiveBackend::Native(n) => n.renew_cmd(e),
            ActiveBackend::Script(s) => s.renew_cmd(e),
        }
    }

    /// The server answered NOSCRIPT to a renewal: load the scripts again.
    pub(crate) async fn reload_scripts(&self, conn: &mut Connection) {
        if let ActiveBackend::Script(_) = self {
            script::reload_scripts(conn).await
        }
    }

    /// Delete the lock whoever holds it; true if there was one.
    pub(crate) async fn force_unlock(&self, inner: &Inner, key: &str) -> Result<bool> {
        let r: i64 = match self {
            ActiveBackend::Native(_) => {
                redis::cmd("DEL")
                    .arg(key)
                    .query_async(&mut inner.link.shared().clone())
                    .await
            }
            ActiveBackend::Script(s) => s.force_unlock(inner, key).await,
        }
        .map_err(|e| Error::from_redis(key, e))?;
        Ok(r == 1)
    }

    /// An acquire of `owner` on `key` was abandoned mid-flight (its future dropped, or its
    /// connection failed): return once the server is done with it, so that its hash shows
    /// whether it was granted.
    pub(crate) async fn settle_abandoned(&self, inner: &Inner, key: &str, owner: &str) {
        if let ActiveBackend::Native(_) = self {
            native::wait_not_queued(inner, key, owner).await
        }
        // Script: the attempt was one EVAL on the shared connection (or a pooled one with
        // the failover guard), which the server runs before anything sent after it.
    }

    /// The grace holds are bound with (native backend), if any.
    pub(crate) fn bind_grace(&self) -> Option<Duration> {
        match self {
            ActiveBackend::Native(n) => n.bind_grace(),
            ActiveBackend::Script(_) => None,
        }
    }

    /// The binding of a watched hold with `lease` (native backend with a grace): the grace
    /// sent (at most the lease) and where the shared connection's answers are tracked.
    pub(crate) fn bound(&self, inner: &Inner, lease: Duration) -> Option<crate::rebind::Bound> {
        let grace = self.bind_grace()?.min(lease);
        Some(crate::rebind::Bound {
            grace,
            answered: inner.link.shared().answered(),
        })
    }

    /// Whether this backend can keep the next holder out after a lapse (`LOCKDELAY`).
    pub(crate) fn check_lock_delay(&self) -> Result<()> {
        match self {
            ActiveBackend::Native(_) => Ok(()),
            ActiveBackend::Script(_) => {
                Err(Error::Unsupported("lock-delay needs the dlock module"))
            }
        }
    }

    /// Whether this backend gives fencing tokens.
    pub(crate) fn check_fencing(&self) -> Result<()> {
        match self {
            ActiveBackend::Native(_) => Ok(()),
            ActiveBackend::Script(_) => {
                Err(Error::Unsupported("fencing tokens need the dlock module"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_from_duration() {
        assert!(matches!(Wait::from_duration(Duration::ZERO), Wait::No));
        assert!(matches!(
            Wait::from_duration(Duration::from_millis(1)),
            Wait::For(d) if d == Duration::from_millis(1)
        ));
        assert!(matches!(Wait::from_duration(Duration::MAX), Wait::Forever));
        // The module's longest wait and beyond mean "no limit".
        let max = Duration::from_millis(crate::config::MAX_MS);
        assert!(matches!(Wait::from_duration(max), Wait::Forever));
        assert!(matches!(
            Wait::from_duration(max - Duration::from_millis(1)),
            Wait::For(_)
        ));
    }
}
