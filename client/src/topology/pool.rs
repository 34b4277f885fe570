//! Dedicated connections for commands that may block (a waiting `DLOCK.ACQUIRE ... WAIT`)
//! or must share a connection with a replication `WAIT`: a small pool of idle ones per
//! node address, so a blocked reply never stalls the shared connection.
//!
//! These are redis-rs's plain (non-multiplexed) async connections on purpose: dropping
//! one closes its socket at once, so a waiter whose acquire is cancelled leaves the
//! server's queue. A multiplexed connection keeps its socket open until every request in
//! flight has been answered, which for a wait without limit may be never.

#![allow(deprecated)] // aio::Connection: see above.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::Connection as PlainConnection;

use crate::{Error, Result};

/// Idle dedicated connections, by node address.
#[derive(Default)]
pub(crate) struct WaitPool {
    idle: Mutex<HashMap<String, Vec<PlainConnection>>>,
    /// The client was closed: no new connection, none kept.
    closed: AtomicBool,
}

/// At most this many idle connections are kept per node.
const IDLE_PER_NODE: usize = 64;

impl WaitPool {
    pub(super) async fn take(
        &self,
        addr: &str,
        client: &redis::Client,
        connect_timeout: Duration,
    ) -> Result<PlainConnection> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if let Some(c) = self
            .idle
            .lock()
            .unwrap()
            .get_mut(addr)
            .and_then(|v| v.pop())
        {
            return Ok(c);
        }
        // No response time-out on these connections: a wait lasts as long as it lasts.
        match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
            Ok(r) => r.map_err(|e| Error::connect(addr, e)),
            Err(_) => Err(Error::connect_timeout(addr, connect_timeout)),
        }
    }

    /// Close every idle connection; later ones are closed when given back.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.idle.lock().unwrap().clear();
    }

    pub(super) fn put(&self, addr: String, c: PlainConnection) {
        let mut idle = self.idle.lock().unwrap();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let v = idle.entry(addr).or_default();
        if v.len() < IDLE_PER_NODE {
            v.push(c);
        }
    }
}
