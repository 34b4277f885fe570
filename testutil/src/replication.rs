//! A primary and its replicas: start-up in sync, the waits on replication state, and the check
//! that a replica mirrors its primary.

use std::time::Duration;

use redis::Connection;

use crate::info::{info_field, info_fields, info_int};
use crate::keys::{hgetall, pttl};
use crate::{wait_for, Server, ServerBuilder};

/// How long a replica may take to connect and load the primary's data at start-up (a
/// primary under valgrind is many times slower).
const SYNC_PATIENCE: Duration = Duration::from_secs(60);

/// A primary and its replicas, every replica in sync when [`ReplicaSet::start`] returns.
/// Each server is killed when the set is dropped.
pub struct ReplicaSet {
    pub primary: Server,
    pub replicas: Vec<Server>,
}

impl ReplicaSet {
    /// A primary started from `primary` and `n` replicas started from `replica` (each with
    /// [`ServerBuilder::replica_of`] the primary added).
    pub fn start(primary: ServerBuilder, n: usize, replica: ServerBuilder) -> ReplicaSet {
        let primary = primary.start();
        let replicas = (0..n)
            .map(|_| replica.clone().replica_of(&primary).start())
            .collect();
        ReplicaSet { primary, replicas }
    }

    /// A primary with the module and `n` replicas without it: what the module propagates
    /// must stand on its own there (plain commands).
    pub fn plain_replicas(n: usize) -> ReplicaSet {
        ReplicaSet::start(Server::builder(), n, Server::builder().without_module())
    }

    /// A primary and `n` replicas, all with the module loaded.
    pub fn with_module(n: usize) -> ReplicaSet {
        ReplicaSet::start(Server::builder(), n, Server::builder())
    }

    /// A new connection to the primary and one to the first replica.
    pub fn connections(&self) -> (Connection, Connection) {
        (self.primary.connection(), self.replicas[0].connection())
    }
}

/// Makes the running `replica` a replica of `primary` (`REPLICAOF` at run time) and waits until
/// it is in sync.
pub fn replicate(replica: &Server, primary: &Server) {
    let mut r = replica.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query(&mut r)
        .expect("REPLICAOF");
    wait_replica_synced(replica, primary.port());
}

/// Waits until `replica` follows the primary on `primary_port`: its link is up, the primary
/// counts it online (after a diskless sync only once the replica's first `REPLCONF ACK`
/// arrived; a client's `WAIT` counts only online replicas), and every replica applied every
/// write so far ([`sync_replicas`]).
pub fn wait_replica_synced(replica: &Server, primary_port: u16) {
    let mut r = replica.connection();
    wait_for(SYNC_PATIENCE, "replica link up", || {
        (info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up"))
            .then_some(())
    });
    let mut p = redis::Client::open(format!("redis://127.0.0.1:{primary_port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .expect("connect to the primary");
    let online = format!("port={},state=online", replica.port());
    wait_for(SYNC_PATIENCE, "replica online on the primary", || {
        let s: String = redis::cmd("INFO").arg("replication").query(&mut p).ok()?;
        s.contains(&online).then_some(())
    });
    sync_replicas(&mut p);
}

/// Waits until every replica of `primary` has applied all that the primary propagated so far:
/// each replica's `slave_repl_offset` reaches the primary's `master_repl_offset` (asserted
/// within the sync patience). Not `WAIT`: it waits only for the writes of the connection it
/// is sent on, and the writes that matter here are other connections' and the module's own
/// (a timer's lease cut); on a connection that wrote nothing it returns at once.
#[track_caller]
pub fn sync_replicas(primary: &mut Connection) {
    // The offset and the replicas from one reading of INFO.
    let info = info_fields(primary, "replication");
    let target: i64 = info
        .get("master_repl_offset")
        .and_then(|v| v.parse().ok())
        .expect("INFO replication: master_repl_offset");
    let lines: Vec<&String> = (0..)
        .map_while(|i| info.get(&format!("slave{i}")))
        .collect();
    assert!(!lines.is_empty(), "no replica is connected to sync with");
    for (i, line) in lines.iter().enumerate() {
        let field = |name: &str| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_string)
                .unwrap_or_else(|| panic!("{name} in slave{i}: {line}"))
        };
        let url = format!("redis://{}:{}/", field("ip"), field("port"));
        let mut r = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("connect to a replica");
        wait_for(
            SYNC_PATIENCE,
            "a replica applies the primary's writes",
            || {
                let applied = info_int(&mut r, "replication", "slave_repl_offset")?;
                (applied >= target).then_some(())
            },
        );
    }
}

/// Waits until `server` reports `role:master` (a promoted replica).
pub fn wait_promoted(server: &Server, timeout: Duration) {
    let mut c = server.connection();
    wait_for(timeout, "replica promoted", || {
        (info_field(&mut c, "replication", "role").as_deref() == Some("master")).then_some(())
    });
}

/// Assert the replica shows the same type, hash and TTL (± 300 ms) for each key.
#[track_caller]
pub fn assert_mirrored(primary: &mut Connection, replica: &mut Connection, keys: &[&str]) {
    sync_replicas(primary);
    for k in keys {
        let tm: String = redis::cmd("TYPE").arg(*k).query(primary).unwrap();
        let tr: String = redis::cmd("TYPE").arg(*k).query(replica).unwrap();
        assert_eq!(tr, tm, "TYPE of {k} on the replica");
        match tm.as_str() {
            "hash" => assert_eq!(hgetall(replica, k), hgetall(primary, k), "HGETALL {k}"),
            "string" => {
                let a: Option<String> = redis::cmd("GET").arg(*k).query(primary).unwrap();
                let b: Option<String> = redis::cmd("GET").arg(*k).query(replica).unwrap();
                assert_eq!(b, a, "GET {k}");
            }
            _ => {}
        }
        let pm = pttl(primary, k);
        let pr = pttl(replica, k);
        if pm < 0 || pr < 0 {
            assert_eq!(pr, pm, "PTTL {k} (primary {pm}, replica {pr})");
        } else {
            assert!(
                (pm - pr).abs() <= 300,
                "PTTL {k}: primary {pm}, replica {pr}"
            );
        }
    }
}
