//! [`Inner`]: the state a client's handles share, above the transport and below the
//! backends: the [`Link`], the settings, the owner prefix, and the registry of held locks
//! the watchdog renews.

use std::sync::Mutex;

use crate::conn::Link;
use crate::inflight::InFlight;
use crate::lease::Registry;
use crate::Config;

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
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = self.watchdog.lock().unwrap().take() {
            h.abort();
        }
    }
}
