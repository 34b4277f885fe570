//! The servers a scenario names (`servers.topology`), the fields a driver connects with,
//! and the faults applied to them. Started with `dlock-testutil`; every process is killed
//! when its owner is dropped, also on a panic.

use std::collections::HashSet;
use std::time::Duration;

use dlock_testutil::{sync_replicas, wait_for, Cluster, ReplicaSet, Sentinels, Server};
pub use rustix::process::Signal;
use rustix::process::{kill_process, Pid};
use serde_json::{json, Map, Value};

/// How long a failover or a restart may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

pub enum Topology {
    /// One server with the module; its data directory outlives a restart.
    Standalone {
        server: Server,
        data: tempfile::TempDir,
    },
    /// One server without the module (the script backend's home).
    NoModule(Server),
    /// A master, a replica, three sentinels; `primary` indexes [master, replica].
    Sentinel {
        set: ReplicaSet,
        sentinels: Sentinels,
        primary: usize,
    },
    /// Three masters, one replica each (node `3 + i` replicates node `i`).
    Cluster(Cluster),
}

impl Topology {
    pub fn start(name: &str) -> Result<Topology, String> {
        Ok(match name {
            "standalone" => {
                let data = tempfile::tempdir().map_err(|e| e.to_string())?;
                let server = Server::builder().dir(data.path()).start();
                Topology::Standalone { server, data }
            }
            "standalone-no-module" => {
                Topology::NoModule(Server::builder().without_module().start())
            }
            "sentinel" => {
                let set = ReplicaSet::with_module(1);
                let sentinels = Sentinels::start(&set, 3);
                Topology::Sentinel {
                    set,
                    sentinels,
                    primary: 0,
                }
            }
            "cluster" => Topology::Cluster(Cluster::builder(3).replicas(1).start()),
            other => return Err(format!("unknown topology {other:?}")),
        })
    }

    /// The `connect` fields for this topology.
    pub fn connect_fields(&self) -> Map<String, Value> {
        let v = match self {
            Topology::Standalone { server, .. } | Topology::NoModule(server) => json!({
                "topology": "standalone",
                "url": format!("redis://127.0.0.1:{}/0", server.port()),
            }),
            Topology::Sentinel { sentinels, .. } => json!({
                "topology": "sentinel",
                "sentinels": sentinels.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port())).collect::<Vec<_>>(),
                "service": Sentinels::NAME,
            }),
            Topology::Cluster(c) => json!({
                "topology": "cluster",
                "nodes": c.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect::<Vec<_>>(),
            }),
        };
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    /// Every data server (not the sentinels).
    pub fn servers(&self) -> Vec<&Server> {
        match self {
            Topology::Standalone { server, .. } | Topology::NoModule(server) => vec![server],
            Topology::Sentinel { set, .. } => {
                std::iter::once(&set.primary).chain(&set.replicas).collect()
            }
            Topology::Cluster(c) => c.nodes.iter().collect(),
        }
    }

    /// The masters now.
    fn masters(&self) -> Vec<&Server> {
        match self {
            Topology::Sentinel { primary, .. } => vec![self.servers()[*primary]],
            Topology::Cluster(c) => {
                let all: Vec<&Server> = c.nodes.iter().collect();
                let mut seen = HashSet::new();
                (0..16384u16)
                    .step_by(5461)
                    .map(|slot| c.slot_owner(slot))
                    .filter(|i| seen.insert(*i))
                    .map(|i| all[i])
                    .collect()
            }
            _ => self.servers(),
        }
    }

    pub fn has_module(&self) -> bool {
        !matches!(self, Topology::NoModule(_))
    }

    /// The master serving `key`.
    pub fn key_owner(&self, key: &str) -> &Server {
        match self {
            Topology::Cluster(c) => &c.nodes[c.key_owner(key)],
            _ => self.masters()[0],
        }
    }

    /// FLUSHALL on every master (between scenarios on a reused topology).
    pub fn flush(&self) -> Result<(), String> {
        for s in self.masters() {
            let mut c = s.try_connection_pub()?;
            redis::cmd("FLUSHALL")
                .query::<()>(&mut c)
                .map_err(|e| format!("FLUSHALL on {}: {e}", s.port()))?;
        }
        Ok(())
    }

    /// A raw command on the key's master or on every master.
    pub fn command(&self, cmd: &[Value], on_all: bool) -> Result<Value, String> {
        let args: Vec<String> = cmd
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let Some((name, rest)) = args.split_first() else {
            return Err("empty command".into());
        };
        let targets = if on_all {
            self.masters()
        } else {
            vec![self.key_owner(rest.first().map(String::as_str).unwrap_or(""))]
        };
        let mut last = Value::Null;
        for s in targets {
            let mut c = s.try_connection_pub()?;
            let r: redis::Value = redis::cmd(name)
                .arg(rest)
                .query(&mut c)
                .map_err(|e| format!("{args:?} on {}: {e}", s.port()))?;
            last = to_json(r);
        }
        Ok(last)
    }

    /// `DLOCK.WAITERS key` on the key's master: how many wait (0 without the module).
    pub fn waiters(&self, key: &str) -> Result<usize, String> {
        if !self.has_module() {
            return Ok(0);
        }
        match self.command(&[json!("DLOCK.WAITERS"), json!(key)], false)? {
            Value::Array(a) => Ok(a.len()),
            Value::Null => Ok(0),
            other => Err(format!("DLOCK.WAITERS answered {other}")),
        }
    }

    /// The PIDs of the key's master (`key`) or of every data server (`None`): what
    /// `hang_server` stops.
    pub fn server_pids(&self, key: Option<&str>) -> Vec<u32> {
        match key {
            Some(k) => vec![self.key_owner(k).pid()],
            None => self.servers().iter().map(|s| s.pid()).collect(),
        }
    }

    /// How many connections each data server lists (`CLIENT LIST`), the asking one not
    /// counted.
    pub fn client_counts(&self) -> Result<Vec<usize>, String> {
        self.servers()
            .iter()
            .map(|s| {
                let mut c = s.try_connection_pub()?;
                let list: String = redis::cmd("CLIENT")
                    .arg("LIST")
                    .query(&mut c)
                    .map_err(|e| format!("CLIENT LIST on {}: {e}", s.port()))?;
                Ok(list.lines().count().saturating_sub(1))
            })
            .collect()
    }

    /// `CLIENT KILL ADDR` of every connection process `pid` has open to a data server.
    /// Answers how many were closed.
    pub fn close_connections(&self, pid: u32) -> Result<usize, String> {
        let ports: HashSet<u16> = self.servers().iter().map(|s| s.port()).collect();
        let mut closed = 0;
        for (local, remote) in tcp_connections_of(pid)? {
            if !ports.contains(&remote) {
                continue;
            }
            let server = self
                .servers()
                .into_iter()
                .find(|s| s.port() == remote)
                .expect("port");
            let mut c = server.try_connection_pub()?;
            let r: redis::RedisResult<()> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ADDR")
                .arg(format!("127.0.0.1:{local}"))
                .query(&mut c);
            if r.is_ok() {
                closed += 1;
            }
        }
        Ok(closed)
    }

    /// Restart the standalone server on its port with its data (`SAVE` first).
    pub fn restart(&mut self) -> Result<(), String> {
        let Topology::Standalone { server, data } = self else {
            return Err("restart_server: standalone only".into());
        };
        let port = server.port();
        let mut c = server.try_connection_pub()?;
        redis::cmd("SAVE")
            .query::<()>(&mut c)
            .map_err(|e| format!("SAVE: {e}"))?;
        server.shutdown();
        *server = Server::builder()
            .port(port)
            .dir(data.path())
            .try_start()
            .map_err(|e| format!("restart on {port}: {e}"))?;
        Ok(())
    }

    /// Replace the key's master by its replica.
    pub fn failover(&mut self, key: &str) -> Result<(), String> {
        match self {
            Topology::Sentinel {
                set,
                sentinels,
                primary,
            } => {
                if *primary != 0 {
                    return Err("failover: once per scenario".into());
                }
                // Every write has reached the replica first (a fair failover, not a lost
                // write); then the master dies, as masters do. (A `SENTINEL FAILOVER` leaves
                // the old master accepting writes until it is reconfigured: a split brain that
                // only the failover guard, `min_replicas`, covers.)
                let mut oc = set.primary.try_connection_pub()?;
                sync_replicas(&mut oc);
                set.primary.kill();
                sentinels.wait_failover_to(&set.replicas[0], PATIENCE);
                *primary = 1;
                Ok(())
            }
            Topology::Cluster(cl) => {
                let slot = dlock_core::names::key_slot(key.as_bytes());
                let owner = cl.slot_owner(slot);
                let replica = 3 + owner;
                let mut oc = cl.nodes[owner].try_connection_pub()?;
                sync_replicas(&mut oc);
                redis::cmd("CLUSTER")
                    .arg("FAILOVER")
                    .arg("TAKEOVER")
                    .query::<()>(&mut cl.nodes[replica].try_connection_pub()?)
                    .map_err(|e| format!("CLUSTER FAILOVER: {e}"))?;
                wait_for(PATIENCE, "the replica promoted", || {
                    (0..3)
                        .all(|by| cl.slot_owner_seen_by(by, slot) == replica)
                        .then_some(())
                });
                Ok(())
            }
            _ => Err("failover: sentinel or cluster only".into()),
        }
    }

    /// Move the key's slot (and the key) to another master.
    pub fn move_slot(&self, key: &str) -> Result<(), String> {
        let Topology::Cluster(cl) = self else {
            return Err("move_slot: cluster only".into());
        };
        let slot = dlock_core::names::key_slot(key.as_bytes());
        let from = cl.slot_owner(slot);
        let to = (from + 1) % 3;
        cl.begin_slot_migration(slot, from, to);
        if cl.holder(key) == Some(from) {
            cl.migrate_keys(from, to, &[key]);
        }
        cl.set_slot_owner(slot, to);
        wait_for(PATIENCE, "every master sees the slot's new owner", || {
            (0..3)
                .all(|by| cl.slot_owner_seen_by(by, slot) == to)
                .then_some(())
        });
        Ok(())
    }
}

/// Send `sig` to each process of `pids` (servers this crate started): all of them are
/// tried; the first failure is answered.
pub fn signal_all(pids: &[u32], sig: Signal) -> Result<(), String> {
    let mut first = Ok(());
    for &pid in pids {
        let r = Pid::from_raw(pid as i32)
            .ok_or_else(|| format!("no pid {pid}"))
            .and_then(|p| {
                kill_process(p, sig).map_err(|e| format!("{sig:?} to server {pid}: {e}"))
            });
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// A connection to `s`, as an error string when it fails.
trait TryConnection {
    fn try_connection_pub(&self) -> Result<redis::Connection, String>;
}

impl TryConnection for Server {
    fn try_connection_pub(&self) -> Result<redis::Connection, String> {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(5))
            .map_err(|e| format!("connect to 127.0.0.1:{}: {e}", self.port()))
    }
}

/// The (local port, remote port) of every TCP socket process `pid` has open, from
/// `/proc/<pid>/fd` (socket inodes) and `/proc/net/tcp{,6}`.
pub fn tcp_connections_of(pid: u32) -> Result<Vec<(u16, u16)>, String> {
    let fds =
        std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(|e| format!("/proc/{pid}/fd: {e}"))?;
    let inodes: HashSet<String> = fds
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || !inodes.contains(f[9]) {
                continue;
            }
            let port = |a: &str| {
                a.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            if let (Some(l), Some(r)) = (port(f[1]), port(f[2])) {
                out.push((l, r));
            }
        }
    }
    Ok(out)
}

/// A reply as JSON (for `redis` steps' expectations and messages).
pub fn to_json(v: redis::Value) -> Value {
    match v {
        redis::Value::Nil => Value::Null,
        redis::Value::Int(n) => n.into(),
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned().into(),
        redis::Value::SimpleString(s) => s.into(),
        redis::Value::Okay => "OK".into(),
        redis::Value::Array(a) | redis::Value::Set(a) => a.into_iter().map(to_json).collect(),
        redis::Value::Map(m) => m
            .into_iter()
            .flat_map(|(k, v)| [to_json(k), to_json(v)])
            .collect(),
        redis::Value::Boolean(b) => b.into(),
        redis::Value::Double(d) => d.into(),
        redis::Value::ServerError(e) => json!({"error": format!("{e:?}")}),
        other => format!("{other:?}").into(),
    }
}
