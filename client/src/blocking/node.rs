//! A blocking [`Node`]: a server of a multi-lock or RedLock, up or down.

use std::sync::Arc;

use super::{runtime, Client};
use crate::{ClientBuilder, Result};

/// A server for a blocking [`MultiLock`] or [`RedLock`], up or down (the blocking face of
/// [`crate::Node`]): made without needing the server to answer, tried again whenever a lock
/// needs it.
///
/// ```no_run
/// use dlock_client::{blocking, Client};
/// let nodes: Vec<blocking::Node> = [6379, 6380, 6381]
///     .iter()
///     .map(|p| blocking::Node::connect(Client::builder(format!("redis://127.0.0.1:{p}/"))))
///     .collect::<Result<_, _>>()?;
/// let red = blocking::RedLock::on_nodes(&nodes, "job");
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Node {
    pub(super) node: crate::Node,
    pub(super) rt: Arc<tokio::runtime::Runtime>,
}

impl Node {
    /// The server `builder` describes, on a runtime of its own: connected now if it answers,
    /// else down. Errors: only settings that can never work (see [`crate::Node::connect`]).
    /// ```no_run
    /// let n = dlock_client::blocking::Node::connect(dlock_client::Client::builder("redis://127.0.0.1:6379/"))?;
    /// println!("{} up: {}", n.address(), n.is_up());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn connect(builder: ClientBuilder) -> Result<Node> {
        let rt = Arc::new(runtime()?);
        let node = rt.block_on(crate::Node::connect(builder))?;
        Ok(Node { node, rt })
    }
    /// Whether the node has connected.
    /// ```no_run
    /// # fn demo(n: dlock_client::blocking::Node) { println!("{}", n.is_up()); }
    /// ```
    pub fn is_up(&self) -> bool {
        self.node.is_up()
    }
    /// The server's address.
    /// ```no_run
    /// # fn demo(n: dlock_client::blocking::Node) { println!("{}", n.address()); }
    /// ```
    pub fn address(&self) -> &str {
        self.node.address()
    }
}

impl From<Client> for Node {
    /// A node that is up: `client`'s server.
    fn from(c: Client) -> Node {
        Node {
            node: crate::Node::from(c.inner),
            rt: c.rt,
        }
    }
}
