//! A master found through Redis Sentinel, asked again after a failover.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

pub(crate) struct SentinelConn {
    pub(crate) sentinel: tokio::sync::Mutex<redis::sentinel::Sentinel>,
    pub(crate) service: String,
    pub(crate) current: std::sync::Mutex<Option<(redis::Client, MultiplexedConnection)>>,
    pub(crate) timeout: Duration,
    /// The client was closed: no connection is made any more.
    pub(crate) shut: std::sync::atomic::AtomicBool,
}

impl SentinelConn {
    /// The master's client and a connection to it (asking the sentinels when needed).
    pub(crate) async fn master(&self) -> RedisResult<(redis::Client, MultiplexedConnection)> {
        if self.shut.load(std::sync::atomic::Ordering::Relaxed) {
            return Err((redis::ErrorKind::ClientError, "the dlock client is closed").into());
        }
        if let Some(c) = self.current.lock().unwrap().clone() {
            return Ok(c);
        }
        let client = {
            let mut s = self.sentinel.lock().await;
            tokio::time::timeout(self.timeout, s.async_master_for(&self.service, None))
                .await
                .map_err(|_| timeout_error("asking the sentinels for the master"))?
                // No usable master right now (e.g. a failover in progress): a connection
                // problem, worth a retry.
                .map_err(|e| {
                    redis::RedisError::from((
                        redis::ErrorKind::IoError,
                        "no master from the sentinels",
                        e.to_string(),
                    ))
                })?
        };
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout);
        let conn = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?;
        // Make sure it is the master (the sentinels may not have noticed a change yet).
        let mut c2 = conn.clone();
        let role: Value = redis::cmd("ROLE").query_async(&mut c2).await?;
        if let Value::Array(a) = &role {
            let is_master = matches!(a.first(), Some(Value::BulkString(b)) if b == b"master");
            if !is_master {
                return Err((
                    redis::ErrorKind::IoError,
                    "the sentinels' master is not a master yet",
                )
                    .into());
            }
        }
        *self.current.lock().unwrap() = Some((client.clone(), conn.clone()));
        Ok((client, conn))
    }

    /// Close the connection to the master and make no new one.
    pub(crate) fn close(&self) {
        self.shut.store(true, std::sync::atomic::Ordering::Relaxed);
        let current = self.current.lock().unwrap().take();
        drop(current);
    }

    /// Forget the current master if `r` says it is gone or demoted.
    pub(crate) fn check<T>(&self, r: &RedisResult<T>) {
        if let Err(e) = r {
            if e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout()
                || e.kind() == redis::ErrorKind::ReadOnly
                || e.code() == Some("READONLY")
            {
                *self.current.lock().unwrap() = None;
            }
        }
    }
}

pub(crate) fn timeout_error(what: &str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::IoError, "timed out", what.to_string()))
}
