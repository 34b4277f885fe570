//! The error type of every fallible call in this crate.

/// What went wrong. No call of this crate panics on a server error or a disconnect; it
/// answers one of these instead.
///
/// ```
/// use dlock_client::Error;
/// let e = Error::Server("ERR lease-ms must be a positive integer".into());
/// assert!(e.to_string().contains("lease-ms"));
/// assert!(!e.is_connection());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server at `addr` could not be reached: refused, DNS, time-out, authentication.
    #[error("cannot connect to {addr}: {reason} ({detail})")]
    Connect {
        /// The address tried (`host:port`).
        addr: String,
        /// Why.
        reason: ConnectReason,
        /// The underlying error's text.
        detail: String,
    },
    /// A connection that was up dropped or failed.
    #[error("connection error: {0}")]
    Connection(#[source] redis::RedisError),
    /// The server did not answer in time (client-side time-out).
    #[error("timed out: {0}")]
    Timeout(String),
    /// A Redis Cluster sent the request on (`MOVED`/`ASK`) more times than the client
    /// follows (16): its slot map does not settle.
    #[error("{key:?}: still redirected after {redirects} cluster redirections (last to {last})")]
    Redirected {
        /// The lock key.
        key: String,
        /// Redirections followed.
        redirects: u32,
        /// The address the last one named (`host:port`).
        last: String,
    },
    /// The lock is not held by this owner (e.g. [`LockGuard::release`](crate::LockGuard::release)
    /// of a lock that expired or was deleted).
    #[error("lock {0:?} is not held by this owner")]
    NotHeld(String),
    /// The key holds something that is not a lock of this kind (`WRONGTYPE`).
    #[error("key {key:?} does not hold a lock: {message}")]
    WrongType {
        /// The lock key.
        key: String,
        /// The server's message.
        message: String,
    },
    /// Any other error reply from the server, with its message (e.g. `ERR ...`).
    #[error("server error: {0}")]
    Server(String),
    /// The chosen backend cannot do this (e.g. fencing tokens need the dlock module).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// The failover guard ([`min_replicas`](crate::ClientBuilder::min_replicas)): the grant
    /// reached fewer replicas than asked within the time-out, so it was released again.
    #[error("lock {key:?}: the grant reached {acked} replica(s), {wanted} required; released")]
    NotReplicated {
        /// The lock key.
        key: String,
        /// Replicas that acknowledged (`WAIT`'s reply).
        acked: u32,
        /// Replicas required.
        wanted: u32,
    },
    /// The server refused a wait for `key` because it would close a cycle of owners waiting
    /// for each other on that node (`DEADLOCK ...`, native backend). The request changed
    /// nothing: it did not queue, and the other owners keep waiting. Not worth a retry as
    /// it is: one owner of the cycle must give something up first (e.g. release what it
    /// holds and start again).
    ///
    /// ```
    /// let e = dlock_client::Error::Deadlock {
    ///     key: "k1".into(),
    ///     cycle: "b waits for k1 held by a, a waits for k2 held by b".into(),
    /// };
    /// assert!(!e.is_connection());
    /// assert!(e.to_string().contains("a waits for k2"));
    /// ```
    #[error("lock {key:?}: deadlock: {cycle}")]
    Deadlock {
        /// The lock key the refused request was for.
        key: String,
        /// The server's description of the cycle, from the requester round to itself:
        /// `<owner> waits for <key> held by <owner>, ...` (a step through a queue reads
        /// `<owner> waits for <key> behind <owner>`); see docs/COMMANDS.md.
        cycle: String,
    },
    /// A bad URL or configuration value.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The server answered something this client did not expect.
    #[error("unexpected reply: {0}")]
    Protocol(String),
    /// The client was closed ([`Client::close`](crate::Client::close)): every call after
    /// it, and every call still in flight when it came (a waiting acquire), answers this.
    ///
    /// ```
    /// assert!(!dlock_client::Error::Closed.is_connection());
    /// ```
    #[error("the dlock client is closed")]
    Closed,
}

/// `Result` with this crate's [`Error`].
///
/// ```
/// fn f() -> dlock_client::Result<u32> { Ok(1) }
/// assert_eq!(f().unwrap(), 1);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True for connection problems and time-outs (worth a retry), false for server answers.
    ///
    /// ```
    /// assert!(dlock_client::Error::Timeout("x".into()).is_connection());
    /// ```
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            Error::Connection(_) | Error::Timeout(_) | Error::Connect { .. }
        )
    }

    /// Classify a failure to connect to `addr`.
    pub(crate) fn connect(addr: &str, e: redis::RedisError) -> Error {
        let text = e.to_string();
        let reason = if e.is_connection_refusal() {
            ConnectReason::Refused
        } else if e.is_timeout() {
            ConnectReason::Timeout
        } else if e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        {
            ConnectReason::Auth
        } else if text.contains("lookup") || text.contains("not known") || text.contains("resolve")
        {
            ConnectReason::Dns
        } else {
            ConnectReason::Other
        };
        Error::Connect {
            addr: addr.to_string(),
            reason,
            detail: text,
        }
    }

    /// A connect attempt to `addr` that took longer than `limit`.
    pub(crate) fn connect_timeout(addr: &str, limit: std::time::Duration) -> Error {
        Error::Connect {
            addr: addr.to_string(),
            reason: ConnectReason::Timeout,
            detail: format!("no connection within {limit:?}"),
        }
    }

    /// Classify a `redis` error for lock `key`.
    pub(crate) fn from_redis(key: &str, e: redis::RedisError) -> Error {
        if e.is_timeout() {
            return Error::Timeout(e.to_string());
        }
        if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.kind() == redis::ErrorKind::ClientError
        {
            return Error::Connection(e);
        }
        if e.code() == Some(DEADLOCK) {
            return Error::Deadlock {
                key: key.to_string(),
                cycle: e.detail().unwrap_or("").to_string(),
            };
        }
        let msg = server_message(&e);
        if msg.contains("WRONGTYPE") {
            return Error::WrongType {
                key: key.to_string(),
                message: msg,
            };
        }
        Error::Server(msg)
    }

    pub(crate) fn from_server_value<E: Into<redis::RedisError>>(key: &str, e: E) -> Error {
        Error::from_redis(key, e.into())
    }
}

/// The error code of the server's answer to a wait that would close a cycle of owners.
const DEADLOCK: &str = "DEADLOCK";

/// `CODE detail` as the server sent it.
fn server_message(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(c), Some(d)) => format!("{c} {d}"),
        (Some(c), None) => c.to_string(),
        _ => e.to_string(),
    }
}

/// Why a connection could not be made ([`Error::Connect`]).
///
/// ```
/// assert_eq!(dlock_client::ConnectReason::Refused.to_string(), "refused");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectReason {
    /// Nothing listens there (the port is closed or the server stopped).
    Refused,
    /// The host name did not resolve.
    Dns,
    /// No answer in time.
    Timeout,
    /// The server refused the credentials.
    Auth,
    /// Anything else (see the detail).
    Other,
}

impl std::fmt::Display for ConnectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConnectReason::Refused => "refused",
            ConnectReason::Dns => "DNS lookup failed",
            ConnectReason::Timeout => "timed out",
            ConnectReason::Auth => "authentication failed",
            ConnectReason::Other => "failed",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadlock_reply_is_typed_and_not_retryable() {
        let cycle = "b waits for k1 held by a, a waits for k2 held by b";
        // As redis-rs reads the reply `-DEADLOCK <cycle>`.
        let e = match redis::parse_redis_value(format!("-DEADLOCK {cycle}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(se)) => redis::RedisError::from(se),
            Err(e) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(e.code(), Some("DEADLOCK"));
        match Error::from_redis("k1", e) {
            Error::Deadlock { key, cycle: c } => {
                assert_eq!(key, "k1");
                assert_eq!(c, cycle);
            }
            other => panic!("{other:?}"),
        }
        let other = redis::RedisError::from((
            redis::ErrorKind::ResponseError,
            "ERR",
            "syntax error".to_string(),
        ));
        assert!(matches!(Error::from_redis("k", other), Error::Server(_)));
    }
}
