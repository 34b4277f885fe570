//! [`Link`]: the transport under a client. It owns what talks to the deployment (the
//! shared connection, the `redis` seed client, the pool of dedicated connections, the
//! cluster slot map, the runtime) and the settings of talking (response time-out, retry),
//! connects per topology, and routes a command to the node serving its key. It knows
//! nothing of locks or of the client above it (as redis-rs's `ConnectionManager`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::cluster::SlotMap;
use super::pool::WaitPool;
use super::sentinel::SentinelConn;
use super::single::Single;
use super::{ConnKind, Connection};
use crate::config::{Retry, Target};
use crate::{Error, Result};

pub(crate) struct Link {
    /// The single node, the master found at connect time, or the first cluster seed.
    seed: redis::Client,
    /// What [`Client::connection`](crate::Client::connection) hands out (`None` once
    /// closed).
    manager: Mutex<Option<ConnectionManager>>,
    shared: Connection,
    pub(super) pool: WaitPool,
    runtime: tokio::runtime::Handle,
    response_timeout: Duration,
}

/// `host:port` of a client's node, for messages.
fn addr_of(c: &redis::Client) -> String {
    c.get_connection_info().addr.to_string()
}

impl Link {
    /// Connect to `target`: its shared connection (per topology) and a reconnecting
    /// connection for the user's own commands, each within twice `response_timeout`.
    pub(crate) async fn connect(
        target: &Target,
        response_timeout: Duration,
        retry: Retry,
    ) -> Result<Link> {
        let limit = response_timeout.saturating_mul(2);
        let (seed, kind) = match target {
            Target::Single(url) => {
                let c = redis::Client::open(url.as_str())
                    .map_err(|e| Error::Config(format!("{url}: {e}")))?;
                // One attempt: a refused port or a bad host answers at once with its cause
                // and address.
                let single = Single::connect(c.clone(), response_timeout, retry).await?;
                (c, ConnKind::Single(single))
            }
            Target::Sentinel { sentinels, service } => {
                let s = redis::sentinel::Sentinel::build(sentinels.clone())
                    .map_err(|e| Error::Config(e.to_string()))?;
                let sc = Arc::new(SentinelConn {
                    sentinel: tokio::sync::Mutex::new(s),
                    service: service.clone(),
                    current: Mutex::new(None),
                    timeout: response_timeout,
                    shut: Default::default(),
                });
                let (c, _) = sc
                    .master()
                    .await
                    .map_err(|e| Error::connect(&sentinels.join(","), e))?;
                (c, ConnKind::Sentinel(sc))
            }
            Target::Cluster(nodes) => {
                let first = nodes
                    .first()
                    .ok_or_else(|| Error::Config("no cluster node given".into()))?;
                let seed = redis::Client::open(first.as_str())
                    .map_err(|e| Error::Config(format!("{first}: {e}")))?;
                let cc = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(response_timeout)
                    .response_timeout(response_timeout)
                    .retries(retry.attempts().max(1))
                    .build()
                    .map_err(|e| Error::Config(e.to_string()))?;
                let all = nodes.join(",");
                let mut c = tokio::time::timeout(limit, cc.get_async_connection())
                    .await
                    .map_err(|_| Error::connect_timeout(&all, limit))?
                    .map_err(|e| Error::connect(&all, e))?;
                let slots = Arc::new(SlotMap::default());
                slots.refresh(&mut c).await;
                (seed, ConnKind::Cluster(c, slots))
            }
        };
        let mgr_cfg = ConnectionManagerConfig::new()
            .set_number_of_retries(retry.attempts() as usize)
            .set_factor(retry.delay(0).as_millis().max(1) as u64)
            .set_exponent_base(2)
            .set_max_delay(retry.delay(u32::MAX).as_millis().max(1) as u64)
            .set_connection_timeout(response_timeout)
            .set_response_timeout(response_timeout);
        let addr = addr_of(&seed);
        let manager = tokio::time::timeout(
            limit,
            ConnectionManager::new_with_config(seed.clone(), mgr_cfg),
        )
        .await
        .map_err(|_| Error::connect_timeout(&addr, limit))?
        .map_err(|e| Error::connect(&addr, e))?;
        Ok(Link {
            seed,
            manager: Mutex::new(Some(manager)),
            shared: Connection { kind },
            pool: WaitPool::default(),
            runtime: tokio::runtime::Handle::current(),
            response_timeout,
        })
    }

    /// The multiplexed connection every non-blocking command goes on.
    pub(crate) fn shared(&self) -> &Connection {
        &self.shared
    }

    /// A reconnecting connection to the seed node, for the user's own commands (`None`
    /// once closed).
    pub(crate) fn manager(&self) -> Option<ConnectionManager> {
        self.manager.lock().unwrap().clone()
    }

    /// Close what this link opened: the shared connection (single node, Sentinel master;
    /// a cluster's connections close when the last handle of the client goes), the
    /// manager's (clones handed out to the user stay theirs) and the idle wait
    /// connections. Sends nothing.
    pub(crate) fn close(&self) {
        let manager = self.manager.lock().unwrap().take();
        drop(manager);
        match &self.shared.kind {
            ConnKind::Single(s) => s.close(),
            ConnKind::Sentinel(s) => s.close(),
            ConnKind::Cluster(..) => {}
        }
        self.pool.close();
    }

    /// The runtime the client was built on (background clean-ups run there).
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Client-side time-out of one command.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// A client for the node that owns `key` (single node, current Sentinel master, or the
    /// cluster node serving the key's slot, from the cached slot map).
    pub(crate) async fn node_client(&self, key: &str) -> Result<redis::Client> {
        match &self.shared.kind {
            ConnKind::Single(_) => Ok(self.seed.clone()),
            ConnKind::Sentinel(s) => s
                .master()
                .await
                .map(|(c, _)| c)
                .map_err(|e| Error::from_redis(key, e)),
            ConnKind::Cluster(_, slots) => match slots.addr_for(key) {
                Some(addr) => node_at(&addr),
                // Unknown: the seed node will redirect us.
                None => Ok(self.seed.clone()),
            },
        }
    }

    /// The client the script backend's unlock-channel subscriptions for `key` use: the
    /// node serving `key` (pub/sub messages of a cluster reach every node, but the
    /// subscription belongs with the key).
    pub(crate) async fn pubsub_client(&self, key: &str) -> redis::Client {
        self.node_client(key)
            .await
            .unwrap_or_else(|_| self.seed.clone())
    }

    /// The cluster's slot map changed (a `MOVED` reply): read it again.
    pub(crate) async fn slots_moved(&self) {
        if let ConnKind::Cluster(c, slots) = &self.shared.kind {
            slots.refresh(&mut c.clone()).await;
        }
    }
}

/// A client for the node at `addr` (`host:port`).
pub(super) fn node_at(addr: &str) -> Result<redis::Client> {
    redis::Client::open(format!("redis://{addr}/")).map_err(|e| Error::Config(e.to_string()))
}
