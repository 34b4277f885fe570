//! [`Inner`]: the state a client's handles share, above the transport and below the
//! backends: the [`Link`], the settings, the owner prefix, and the registry of held locks
//! the watchdog renews.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::holds::Registry;
use crate::inflight::InFlight;
use crate::topology::Link;
use crate::{Config, Error, Result};

pub(crate) struct Inner {
    pub(crate) link: Link,
    pub(crate) config: Config,
    /// Owner ids of this client are `<prefix>:<n>`.
    pub(crate) prefix: String,
    /// The server's name for ordering and its address for messages.
    pub(crate) names: (String, String),
    pub(crate) registry: Registry,
    /// Acquires and releases on their way, per (key, owner, kind).
    pub(crate) in_flight: InFlight,
    /// The watchdog task, stopped when the last handle goes.
    pub(crate) watchdog: Mutex<Option<tokio::task::AbortHandle>>,
    /// True once [`Client::close`](crate::Client::close) was called.
    closed: watch::Sender<bool>,
}

impl Inner {
    pub(crate) fn new(
        link: Link,
        config: Config,
        prefix: String,
        names: (String, String),
    ) -> Inner {
        Inner {
            link,
            config,
            prefix,
            names,
            registry: Registry::default(),
            in_flight: InFlight::default(),
            watchdog: Mutex::new(None),
            closed: watch::Sender::new(false),
        }
    }

    /// Mark the client closed; true if it was open until now.
    pub(crate) fn set_closed(&self) -> bool {
        !self.closed.send_replace(true)
    }

    /// [`Error::Closed`] once the client is closed.
    pub(crate) fn check_open(&self) -> Result<()> {
        if *self.closed.borrow() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// `call`, unless the client is (or gets) closed first: then [`Error::Closed`] (and
    /// `call` is dropped, as a cancelled call).
    pub(crate) async fn until_closed<T>(&self, call: impl Future<Output = Result<T>>) -> Result<T> {
        self.check_open()?;
        let mut rx = self.closed.subscribe();
        tokio::select! {
            r = call => r,
            _ = rx.wait_for(|c| *c) => Err(Error::Closed),
        }
    }

    /// [`until_closed`](Self::until_closed), and within `limit` (the contract's bound of
    /// a call: one response time-out, or a wait plus one): else [`Error::Timeout`] naming
    /// the server.
    pub(crate) async fn bounded<T>(
        &self,
        limit: Duration,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(limit, self.until_closed(call)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout(format!(
                "{}: no answer within {limit:?}",
                self.names.1
            ))),
        }
    }

    /// One response time-out: the bound of every call that does not wait.
    pub(crate) async fn within_response_timeout<T>(
        &self,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        self.bounded(self.config.response_timeout, call).await
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = self.watchdog.lock().unwrap().take() {
            h.abort();
        }
    }
}
