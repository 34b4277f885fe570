//! [`Node`]: one server of a [`MultiLock`](crate::MultiLock) or [`RedLock`](crate::RedLock)
//! that may be down. It is made from a [`ClientBuilder`] without needing the server to
//! answer, connects when it does, and is tried again (in the background, one attempt at a
//! time) each time a lock needs it while it does not. A RedLock counts a node that is down
//! as a failed vote; a multi-lock fails with [`Error::Connect`] naming it.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::owner::next_owner_number;
use crate::{Client, ClientBuilder, ConnectReason, Error, Lock, LockKind, Owner, Result};

/// A server that locks spanning several servers use, up or down. Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> dlock_client::Result<()> {
/// use dlock_client::{Client, Node, RedLock};
/// let urls = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"];
/// let mut nodes = Vec::new();
/// for u in urls {
///     nodes.push(Node::connect(Client::builder(u)).await?); // Ok even if the server is down
/// }
/// let red = RedLock::on_nodes(&nodes, "job");               // a node that is down: a failed vote
/// let g = red.try_acquire(std::time::Duration::from_secs(10)).await?;
/// # let _ = g; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Node {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    /// How to connect; `None` for a node made from a connected [`Client`].
    builder: Option<ClientBuilder>,
    /// Where connection attempts (and so the client's tasks) run: the runtime the node was
    /// made on.
    runtime: Option<tokio::runtime::Handle>,
    /// The server's name for ordering (the same as its client's).
    id: String,
    /// The address, for messages.
    addr: String,
    state: Mutex<State>,
}

/// Why the last attempt failed, kept so that every caller waiting on it can be told.
#[derive(Clone)]
enum Failure {
    Connect(ConnectReason, String),
    Other(String),
}

type Attempt = Shared<BoxFuture<'static, std::result::Result<Client, Failure>>>;

enum State {
    Up(Client),
    /// Down; the attempt to connect that is under way (or finished and failed).
    Down(Option<Attempt>),
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("address", &self.inner.addr)
            .field("up", &self.is_up())
            .finish()
    }
}

impl From<Client> for Node {
    /// A node that is up: `client`'s server.
    fn from(client: Client) -> Node {
        Node {
            inner: Arc::new(NodeInner {
                builder: None,
                runtime: None,
                id: client.server_id().to_string(),
                addr: client.server_address(),
                state: Mutex::new(State::Up(client)),
            }),
        }
    }
}

impl Node {
    /// The server `builder` describes: connected now if it answers, else down (and tried
    /// again whenever a lock needs it). Waits for this first attempt (bounded by the
    /// builder's response time-out).
    ///
    /// Errors: only settings that can never work ([`Error::Config`]: a bad URL, a lease of
    /// 0, [`Backend::Native`](crate::Backend::Native) on a server without the module, ...);
    /// a server that cannot be reached is not an error.
    ///
    /// Cancel safety: cancel-safe (the attempt goes on in the background).
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let node = dlock_client::Node::connect(dlock_client::Client::builder("redis://127.0.0.1:6379/")).await?;
    /// println!("{} up: {}", node.address(), node.is_up());
    /// # Ok(()) }
    /// ```
    pub async fn connect(builder: ClientBuilder) -> Result<Node> {
        let (id, addr) = builder.target.names()?;
        let node = Node {
            inner: Arc::new(NodeInner {
                builder: Some(builder),
                runtime: Some(tokio::runtime::Handle::current()),
                id,
                addr,
                state: Mutex::new(State::Down(None)),
            }),
        };
        match node.client_within(None).await {
            Err(Error::Config(e)) => Err(Error::Config(e)),
            _ => Ok(node),
        }
    }

    /// The connected client, if the node is up.
    /// ```no_run
    /// # fn demo(node: dlock_client::Node) {
    /// if let Some(client) = node.client() { println!("native: {}", client.is_native()); }
    /// # }
    /// ```
    pub fn client(&self) -> Option<Client> {
        match &*self.inner.state.lock().unwrap() {
            State::Up(c) => Some(c.clone()),
            State::Down(_) => None,
        }
    }

    /// Whether the node has connected (it may have failed since: its client reconnects).
    /// ```no_run
    /// # fn demo(node: dlock_client::Node) { println!("{}", node.is_up()); }
    /// ```
    pub fn is_up(&self) -> bool {
        self.client().is_some()
    }

    /// The server's address (`host:port`; Sentinel and Cluster: the addresses given).
    /// ```no_run
    /// # fn demo(node: dlock_client::Node) { println!("{}", node.address()); }
    /// ```
    pub fn address(&self) -> &str {
        &self.inner.addr
    }

    pub(crate) fn id(&self) -> &str {
        &self.inner.id
    }

    /// A new owner for a lock on this node: the client's when up, else one with the
    /// builder's owner prefix (or this process's random one).
    pub(crate) fn new_owner(&self) -> Owner {
        self.owner_numbered(next_owner_number())
    }

    /// The owner `<prefix>:<n>` for a lock on this node (the prefix as in [`new_owner`](Self::new_owner)).
    pub(crate) fn owner_numbered(&self, n: u64) -> Owner {
        if let Some(c) = self.client() {
            return c.owner_numbered(n);
        }
        let prefix = self
            .inner
            .builder
            .as_ref()
            .and_then(|b| b.config.owner_prefix.clone())
            .unwrap_or_else(|| process_prefix().to_string());
        Owner::from_id(format!("{prefix}:{n}"))
    }

    /// The client, connecting first if the node is down: waits for the attempt at most
    /// `limit` (`None`: until it ends). A failure names the node's address.
    pub(crate) async fn client_within(&self, limit: Option<Duration>) -> Result<Client> {
        let attempt = {
            let mut st = self.inner.state.lock().unwrap();
            match &mut *st {
                State::Up(c) => return Ok(c.clone()),
                State::Down(slot) => {
                    // An attempt that succeeded while nobody waited: the node is up.
                    if let Some(Some(Ok(c))) = slot.as_ref().map(|a| a.peek()) {
                        let c = c.clone();
                        *st = State::Up(c.clone());
                        return Ok(c);
                    }
                    // None yet, or the last one failed: start one.
                    if slot.as_ref().is_none_or(|a| a.peek().is_some()) {
                        *slot = Some(self.start_attempt());
                    }
                    slot.clone().expect("an attempt")
                }
            }
        };
        let outcome = match limit {
            None => attempt.await,
            Some(l) => match tokio::time::timeout(l, attempt).await {
                Ok(r) => r,
                Err(_) => return Err(Error::connect_timeout(&self.inner.addr, l)),
            },
        };
        match outcome {
            Ok(c) => {
                *self.inner.state.lock().unwrap() = State::Up(c.clone());
                Ok(c)
            }
            Err(Failure::Connect(reason, detail)) => Err(Error::Connect {
                addr: self.inner.addr.clone(),
                reason,
                detail,
            }),
            Err(Failure::Other(e)) => Err(Error::Config(e)),
        }
    }

    /// Build the client in a task of its own, so the attempt goes on when nobody waits.
    fn start_attempt(&self) -> Attempt {
        let builder = self
            .inner
            .builder
            .clone()
            .expect("a node that is down has a builder");
        let addr = self.inner.addr.clone();
        let task = match &self.inner.runtime {
            Some(rt) => rt.spawn(builder.build()),
            None => tokio::spawn(builder.build()),
        };
        async move {
            match task.await {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(Error::Connect { reason, detail, .. })) => {
                    Err(Failure::Connect(reason, detail))
                }
                Ok(Err(e)) if e.is_connection() => {
                    Err(Failure::Connect(ConnectReason::Other, e.to_string()))
                }
                Ok(Err(e)) => Err(Failure::Other(format!("{addr}: {e}"))),
                Err(e) => Err(Failure::Connect(ConnectReason::Other, e.to_string())),
            }
        }
        .boxed()
        .shared()
    }

    /// A connection failure of a lock on this node, naming the node.
    pub(crate) fn name_error(&self, e: Error) -> Error {
        match e {
            Error::Connection(re) => Error::connect(&self.inner.addr, re),
            Error::Timeout(t) => Error::Connect {
                addr: self.inner.addr.clone(),
                reason: ConnectReason::Timeout,
                detail: t,
            },
            other => other,
        }
    }

    /// How long a multi-lock waits for this node to connect: twice its response time-out.
    pub(crate) fn connect_limit(&self) -> Duration {
        match &self.inner.builder {
            Some(b) => b.config.response_timeout.saturating_mul(2),
            None => Duration::ZERO,
        }
    }
}

/// This process's owner prefix for owners made while their node is down.
fn process_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| format!("{:032x}", rand::random::<u128>()))
}

/// One lock of a multi-lock or RedLock: a name on a node, for an owner.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub(crate) node: Node,
    pub(crate) name: String,
    pub(crate) owner: Owner,
    pub(crate) kind: LockKind,
    pub(crate) fence: bool,
    pub(crate) lock_delay: Option<Duration>,
}

impl Member {
    /// The member `lock` is (its client's node).
    pub(crate) fn of(lock: &Lock) -> Member {
        Member {
            node: Node::from(lock.client.clone()),
            name: lock.name().to_string(),
            owner: lock.owner().clone(),
            kind: lock.kind(),
            fence: lock.is_fenced(),
            lock_delay: lock.lock_delay_of(),
        }
    }

    /// An exclusive lock `name` on `node` for `owner`.
    pub(crate) fn exclusive(node: Node, name: String, owner: Owner) -> Member {
        Member {
            node,
            name,
            owner,
            kind: LockKind::Exclusive,
            fence: false,
            lock_delay: None,
        }
    }

    /// The lock handle, once the node is up (waiting for it at most `limit`).
    pub(crate) async fn lock(&self, limit: Option<Duration>) -> Result<Lock> {
        let client = self.node.client_within(limit).await?;
        let l = Lock::new(client, self.name.clone(), self.owner.clone(), self.kind);
        let l = if self.fence { l.fenced() } else { l };
        Ok(match self.lock_delay {
            Some(d) => l.lock_delay(d),
            None => l,
        })
    }

    /// Canonical order: server, then key, then kind.
    pub(crate) fn order_key(&self) -> (String, String, u8) {
        (
            self.node.id().to_string(),
            self.name.clone(),
            self.kind.rank(),
        )
    }
}
