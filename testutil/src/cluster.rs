//! A Redis Cluster of throw-away servers: slots split evenly over the primaries,
//! `cluster_state:ok` awaited on every node, and the steps of a live slot migration.

use std::time::Duration;

use redis::{Connection, Value};

use crate::info::info_field;
use crate::server::on_a_free_port;
use crate::{free_port, wait_for, Server, ServerBuilder};

const SLOTS: u16 = 16384;

/// How to start a cluster.
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    primaries: usize,
    replicas_per_primary: usize,
    node: ServerBuilder,
    node_timeout_ms: u64,
}

impl ClusterBuilder {
    /// `n` replicas for each primary (default 0).
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas_per_primary = n;
        self
    }
    /// `cluster-node-timeout` (default 5000 ms): how soon a dead node is declared failed.
    pub fn node_timeout_ms(mut self, ms: u64) -> Self {
        self.node_timeout_ms = ms;
        self
    }
    /// Start every node from `node` (e.g. with an ACL file); the cluster options are added.
    pub fn node(mut self, node: ServerBuilder) -> Self {
        self.node = node;
        self
    }

    /// One node on a free port and bus port, both picked again when one was taken meanwhile.
    fn start_node(&self) -> Server {
        on_a_free_port(|| {
            let bus = free_port().to_string();
            self.node
                .clone()
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", &self.node_timeout_ms.to_string()])
                // The default bus port (port + 10000) may be taken or out of range.
                .args(["--cluster-port", bus.as_str()])
                .args(["--cluster-announce-ip", "127.0.0.1"])
                .try_start()
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start the nodes, join them, assign the slots and wait for `cluster_state:ok` on every
    /// node (and for every replica's link to its primary).
    pub fn start(self) -> Cluster {
        let total = self.primaries * (1 + self.replicas_per_primary);
        let nodes: Vec<Server> = (0..total).map(|_| self.start_node()).collect();
        let cluster = Cluster {
            nodes,
            primaries: self.primaries,
        };
        // Distinct config epochs before the nodes meet, as `redis-cli --cluster create` does,
        // so that no epoch collision has to be resolved.
        for (i, n) in cluster.nodes.iter().enumerate() {
            let mut c = n.connection();
            let _: () = redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(i + 1)
                .query(&mut c)
                .expect("CLUSTER SET-CONFIG-EPOCH");
        }
        // Slots split evenly over the primaries.
        let per = SLOTS as usize / self.primaries;
        for i in 0..self.primaries {
            let lo = i * per;
            let hi = if i + 1 == self.primaries {
                SLOTS as usize - 1
            } else {
                lo + per - 1
            };
            let mut c = cluster.nodes[i].connection();
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(lo)
                .arg(hi)
                .query(&mut c)
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        // Every node meets the first; gossip does the rest.
        let mut first = cluster.nodes[0].connection();
        for n in &cluster.nodes[1..] {
            let mut c = n.connection();
            let bus: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("cluster-port")
                .query(&mut c)
                .expect("CONFIG GET cluster-port");
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(n.port())
                .arg(&bus[1])
                .query(&mut first)
                .expect("CLUSTER MEET");
        }
        for n in &cluster.nodes {
            let mut c = n.connection();
            wait_for(Duration::from_secs(30), "every node known", || {
                let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).ok()?;
                (nodes.lines().count() == total).then_some(())
            });
        }
        // Replicas follow their primary.
        for r in 0..self.primaries * self.replicas_per_primary {
            let primary = r % self.primaries;
            let id = cluster.node_id(primary);
            let replica = &cluster.nodes[self.primaries + r];
            let mut c = replica.connection();
            let _: () = redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(&id)
                .query(&mut c)
                .expect("CLUSTER REPLICATE");
            wait_for(Duration::from_secs(30), "cluster replica link up", || {
                (info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up"))
                    .then_some(())
            });
        }
        cluster.wait_ok();
        cluster
    }
}

/// A running cluster; every node is killed when dropped. Nodes `0..primaries` are the
/// primaries (node `i` serves the `i`-th share of the slots at start), then the replicas.
pub struct Cluster {
    pub nodes: Vec<Server>,
    primaries: usize,
}

impl Cluster {
    /// A cluster of `primaries` primaries, no replicas, module loaded on every node.
    pub fn start(primaries: usize) -> Cluster {
        Cluster::builder(primaries).start()
    }

    pub fn builder(primaries: usize) -> ClusterBuilder {
        assert!(primaries >= 1, "a cluster needs a primary");
        ClusterBuilder {
            primaries,
            replicas_per_primary: 0,
            node: Server::builder(),
            node_timeout_ms: 5000,
        }
    }

    /// The primaries (nodes `0..primaries`).
    pub fn primaries(&self) -> &[Server] {
        &self.nodes[..self.primaries]
    }

    /// Every node's URL (seeds for a cluster client).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// Waits until every node reports `cluster_state:ok`.
    pub fn wait_ok(&self) {
        for n in &self.nodes {
            let mut c = n.connection();
            wait_for(Duration::from_secs(30), "cluster_state:ok", || {
                cluster_ok(&mut c).then_some(())
            });
        }
    }

    /// `CLUSTER MYID` of node `i`.
    pub fn node_id(&self, i: usize) -> String {
        let mut c = self.nodes[i].connection();
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut c)
            .expect("CLUSTER MYID")
    }

    /// The node (index) serving `slot`, as node 0's `CLUSTER SLOTS` says.
    pub fn slot_owner(&self, slot: u16) -> usize {
        self.slot_owner_seen_by(0, slot)
    }

    /// The node (index) serving `slot`, as node `by`'s `CLUSTER SLOTS` says.
    pub fn slot_owner_seen_by(&self, by: usize, slot: u16) -> usize {
        let mut c = self.nodes[by].connection();
        let v: Vec<Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut c)
            .expect("CLUSTER SLOTS");
        for r in v {
            let Value::Array(r) = r else { continue };
            let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(node))) =
                (r.first(), r.get(1), r.get(2))
            else {
                continue;
            };
            if *lo <= slot as i64 && slot as i64 <= *hi {
                let Some(Value::Int(port)) = node.get(1) else {
                    panic!("CLUSTER SLOTS: no port in {node:?}")
                };
                return self
                    .nodes
                    .iter()
                    .position(|n| i64::from(n.port()) == *port)
                    .expect("the slot's node is one of ours");
            }
        }
        panic!("slot {slot} unassigned")
    }

    /// The node (index) serving `key`'s slot.
    pub fn key_owner(&self, key: &str) -> usize {
        self.slot_owner(dlock_core::names::key_slot(key.as_bytes()))
    }

    /// A key of node `node`'s slots, distinct per `tag` (`reshard:<tag>:<i>`).
    pub fn key_on(&self, node: usize, tag: &str) -> String {
        (0..)
            .map(|i| format!("reshard:{tag}:{i}"))
            .find(|k| self.key_owner(k) == node)
            .expect("some key hashes to every node")
    }

    /// Moves `slot` from node `from` to node `to` as `redis-cli --cluster reshard` does:
    /// `SETSLOT IMPORTING/MIGRATING`, `MIGRATE` of every key, `SETSLOT NODE` on every primary.
    pub fn move_slot(&self, slot: u16, from: usize, to: usize) {
        self.begin_slot_migration(slot, from, to);
        self.finish_slot_migration(slot, from, to);
    }

    /// The node (index) whose keyspace holds `key` now, asked of each primary directly with
    /// `ASKING` (so that a node importing the key's slot answers too; a node that does not
    /// serve the slot answers MOVED or ASK, not 1).
    pub fn holder(&self, key: &str) -> Option<usize> {
        self.primaries()
            .iter()
            .position(|n| exists_asking(&mut n.connection(), key))
    }

    /// First step of a live migration of `slot` from node `from` to node `to`: `to` imports
    /// it, `from` migrates it. Until [`Cluster::set_slot_owner`], `from` answers `ASK` for the
    /// slot's keys it no longer has.
    pub fn begin_slot_migration(&self, slot: u16, from: usize, to: usize) {
        self.setslot(to, slot, "IMPORTING", &self.node_id(from));
        self.setslot(from, slot, "MIGRATING", &self.node_id(to));
    }

    /// Moves `keys` (of a migrating slot) from node `from` to node `to` (`MIGRATE`).
    pub fn migrate_keys(&self, from: usize, to: usize, keys: &[&str]) {
        let mut c = self.nodes[from].connection();
        let _: Value = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(self.nodes[to].port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(keys)
            .query(&mut c)
            .expect("MIGRATE");
    }

    /// Ends a live migration of `slot` from `from` to `to`: moves the keys `from` still has,
    /// then gives the slot to `to` ([`Cluster::set_slot_owner`]).
    pub fn finish_slot_migration(&self, slot: u16, from: usize, to: usize) {
        let mut c = self.nodes[from].connection();
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut c)
                .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            self.migrate_keys(from, to, &keys);
        }
        self.set_slot_owner(slot, to);
    }

    /// Gives `slot` to node `to` on every primary (`CLUSTER SETSLOT slot NODE id`): ends a
    /// migration, or moves an empty slot at once. The new owner first, as Redis advises.
    ///
    /// First `to` takes the highest config epoch, knowing every primary's current one: a
    /// `PING` the old owner sent before its own `SETSLOT` still claims the slot, and wins over
    /// `to` if its epoch is higher; the old owner then names `to` and `to` names the old owner,
    /// for good (seen with slots moved back and forth quickly on Redis 7.0: `to` had not heard
    /// of the old owner's last bump, so its own `SETSLOT NODE` bump did not happen).
    pub fn set_slot_owner(&self, slot: u16, to: usize) {
        self.take_highest_epoch(to);
        let id = self.node_id(to);
        self.setslot(to, slot, "NODE", &id);
        for i in (0..self.primaries).filter(|i| *i != to) {
            self.setslot(i, slot, "NODE", &id);
        }
    }

    /// Node `to` alone claims `slot` (`CLUSTER SETSLOT slot NODE` there, with the highest
    /// config epoch): the other nodes learn of it only from `to`'s messages, as when a slot is
    /// taken by a newer configuration elsewhere. The old owner then drops the slot and its keys.
    pub fn claim_slot_elsewhere(&self, slot: u16, to: usize) {
        self.take_highest_epoch(to);
        let id = self.node_id(to);
        self.setslot(to, slot, "NODE", &id);
    }

    /// Moves `slot` from node `from` to node `to` with Valkey 9's atomic slot migration
    /// (`CLUSTER MIGRATESLOTS`), and waits until both nodes see `to` as its owner and `from`
    /// has dropped its copies of the slot's keys. `Err`: the source refused the command.
    pub fn migrate_slot_atomically(&self, slot: u16, from: usize, to: usize) -> Result<(), String> {
        let mut c = self.nodes[from].connection();
        let _: () = redis::cmd("CLUSTER")
            .arg("MIGRATESLOTS")
            .arg("SLOTSRANGE")
            .arg(slot)
            .arg(slot)
            .arg("NODE")
            .arg(self.node_id(to))
            .query(&mut c)
            .map_err(|e| e.to_string())?;
        wait_for(
            Duration::from_secs(30),
            "atomic slot migration done",
            || {
                let owned = [from, to]
                    .iter()
                    .all(|&n| self.slot_owner_seen_by(n, slot) == to);
                let left: i64 = redis::cmd("CLUSTER")
                    .arg("COUNTKEYSINSLOT")
                    .arg(slot)
                    .query(&mut c)
                    .ok()?;
                (owned && left == 0).then_some(())
            },
        );
        Ok(())
    }

    /// Waits until node `to` sees every primary's own config epoch, then `CLUSTER BUMPEPOCH`
    /// there: `to`'s epoch is then greater than any other node's.
    fn take_highest_epoch(&self, to: usize) {
        let own: Vec<(String, u64)> = (0..self.primaries)
            .filter(|i| *i != to)
            .map(|i| {
                let mine = config_epochs(&mut self.nodes[i].connection());
                mine.into_iter()
                    .find(|(_, _, myself)| *myself)
                    .map(|(id, epoch, _)| (id, epoch))
                    .expect("CLUSTER NODES names myself")
            })
            .collect();
        let mut c = self.nodes[to].connection();
        wait_for(
            Duration::from_secs(30),
            "the new owner knows every primary's epoch",
            || {
                let seen = config_epochs(&mut c);
                own.iter()
                    .all(|(id, epoch)| seen.iter().any(|(i, e, _)| i == id && e >= epoch))
                    .then_some(())
            },
        );
        let _: Value = redis::cmd("CLUSTER")
            .arg("BUMPEPOCH")
            .query(&mut c)
            .expect("CLUSTER BUMPEPOCH");
    }

    fn setslot(&self, node: usize, slot: u16, what: &str, id: &str) {
        let mut c = self.nodes[node].connection();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(what)
            .arg(id)
            .query(&mut c)
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {what} on node {node}: {e}"));
    }
}

/// `CLUSTER NODES` as (node id, config epoch, is myself) per node.
fn config_epochs(c: &mut Connection) -> Vec<(String, u64, bool)> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(c)
        .expect("CLUSTER NODES");
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let epoch = f.get(6)?.parse().ok()?;
            let myself = f.get(2)?.split(',').any(|x| x == "myself");
            Some((f[0].to_string(), epoch, myself))
        })
        .collect()
}

fn cluster_ok(c: &mut Connection) -> bool {
    let info: redis::RedisResult<String> = redis::cmd("CLUSTER").arg("INFO").query(c);
    info.is_ok_and(|s| s.contains("cluster_state:ok"))
}

/// `ASKING` then `EXISTS key` on one connection: 1 only where the key physically is.
pub fn exists_asking(c: &mut Connection, key: &str) -> bool {
    let r: redis::RedisResult<(Value, i64)> =
        redis::pipe().cmd("ASKING").cmd("EXISTS").arg(key).query(c);
    matches!(r, Ok((_, 1)))
}
