//! Who waits on a lock: [`Client::waiters`] reads the module's queue (`DLOCK.WAITERS`) as
//! [`Waiter`] values.

use std::time::Duration;

use redis::Value;

use crate::{Error, Result};

/// What a queued client asks for (the `request` of `DLOCK.WAITERS`).
///
/// ```
/// use dlock_client::WaitRequest;
/// assert_ne!(WaitRequest::Permits(2), WaitRequest::Lock);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WaitRequest {
    /// The exclusive lock (`DLOCK.ACQUIRE`).
    Lock,
    /// A read hold of a read-write lock.
    Read,
    /// The write lock of a read-write lock.
    Write,
    /// This many permits of a semaphore.
    Permits(u32),
    /// A request word this client does not know (a newer server), as sent.
    Other(String),
}

impl WaitRequest {
    /// The word `DLOCK.WAITERS` sends (dlock-core's `Want::describe`: `lock`, `read`,
    /// `write`, `permits:<n>`).
    fn parse(word: &str) -> WaitRequest {
        match word {
            "lock" => WaitRequest::Lock,
            "read" => WaitRequest::Read,
            "write" => WaitRequest::Write,
            _ => match word.strip_prefix("permits:").map(str::parse) {
                Some(Ok(n)) => WaitRequest::Permits(n),
                _ => WaitRequest::Other(word.to_string()),
            },
        }
    }
}

/// One client waiting on a lock, in the queue's order (see [`Client::waiters`]).
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// for w in client.waiters("pool").await? {
///     println!("{} wants {:?}, waiting for {:?}", w.owner, w.request, w.waited);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The waiting owner's id.
    pub owner: String,
    /// What it asks for.
    pub request: WaitRequest,
    /// How long it has waited so far.
    pub waited: Duration,
    /// How long until its wait times out; `None` for a wait without limit.
    pub timeout_left: Option<Duration>,
}

impl Waiter {
    /// One row `[owner, request, waited-ms, timeout-left-ms]`.
    fn parse(key: &str, row: Value) -> Result<Waiter> {
        let bad = |row: &dyn std::fmt::Debug| {
            Error::Protocol(format!("DLOCK.WAITERS {key} answered the row {row:?}"))
        };
        let Value::Array(fields) = row else {
            return Err(bad(&row));
        };
        let [owner, request, waited, left] = fields.as_slice() else {
            return Err(bad(&fields));
        };
        let text = |v: &Value| redis::from_redis_value::<String>(v).map_err(|_| bad(&fields));
        let (Value::Int(waited), Value::Int(left)) = (waited, left) else {
            return Err(bad(&fields));
        };
        let ms = |n: i64| Duration::from_millis(n.max(0) as u64);
        Ok(Waiter {
            owner: text(owner)?,
            request: WaitRequest::parse(&text(request)?),
            waited: ms(*waited),
            timeout_left: (*left >= 0).then(|| ms(*left)),
        })
    }
}

/// `DLOCK.WAITERS key` on `conn`: the queue of `key`, first in line first.
pub(crate) async fn query(conn: &mut crate::Connection, key: &str) -> Result<Vec<Waiter>> {
    let v: Value = redis::cmd("DLOCK.WAITERS")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(|e| Error::from_redis(key, e))?;
    match v {
        Value::Array(rows) => rows.into_iter().map(|r| Waiter::parse(key, r)).collect(),
        Value::ServerError(e) => Err(Error::from_server_value(key, e)),
        other => Err(Error::Protocol(format!(
            "DLOCK.WAITERS {key} answered {other:?}"
        ))),
    }
}
