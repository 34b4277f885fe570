//! Sentinels monitoring a primary, with fast failure detection (down after 500 ms).
//!
//! `REDIS_SENTINEL` names the Sentinel binary (default `redis-sentinel`, Debian package
//! `redis-sentinel`).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::server::on_a_free_port;
use crate::{free_port, wait_for, ReplicaSet, Server};

/// The Sentinel binary to run.
pub fn sentinel_binary() -> String {
    std::env::var("REDIS_SENTINEL").unwrap_or_else(|_| "redis-sentinel".into())
}

/// One `redis-sentinel` process, killed when dropped.
pub struct Sentinel {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sentinel {
    pub fn port(&self) -> u16 {
        self.port
    }
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
    /// Everything the Sentinel logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }
    /// Answers PING, and `INFO server`'s `process_id` is this process's (not another server
    /// that had the port).
    fn answers_as_itself(&self) -> bool {
        self.try_connection()
            .is_some_and(|mut c| crate::server::answered_by(&mut c, self.child.id()))
    }
    fn try_connection(&self) -> Option<redis::Connection> {
        redis::Client::open(self.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()
    }
    /// `SENTINEL <sub> <name>` as field/value pairs (None when the Sentinel does not answer).
    fn master_fields(&self, name: &str) -> Option<Vec<(String, String)>> {
        let mut c = self.try_connection()?;
        let v: Vec<String> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(name)
            .query(&mut c)
            .ok()?;
        Some(
            v.chunks(2)
                .filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone())))
                .collect(),
        )
    }
    /// One field of `SENTINEL MASTER <name>`.
    fn master_field(&self, name: &str, field: &str) -> Option<String> {
        self.master_fields(name)?
            .into_iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v)
    }
}

/// Sentinels monitoring one primary under the name [`Sentinels::NAME`]. Failure detection is
/// fast: the primary is considered down after 500 ms, a failover times out after 2 s.
pub struct Sentinels {
    pub sentinels: Vec<Sentinel>,
}

impl Sentinels {
    /// The name the Sentinels know the primary by.
    pub const NAME: &'static str = "m";

    /// `count` Sentinels (quorum: a majority) monitoring `set.primary`; returns once each
    /// knows the primary, every replica of `set` and the other Sentinels.
    pub fn start(set: &ReplicaSet, count: usize) -> Sentinels {
        let quorum = count / 2 + 1;
        let sentinels: Vec<Sentinel> = (0..count)
            .map(|_| start_one(&set.primary, quorum))
            .collect();
        let group = Sentinels { sentinels };
        let replicas = set.replicas.len().to_string();
        let others = (count - 1).to_string();
        for s in &group.sentinels {
            wait_for(
                Duration::from_secs(20),
                "sentinels see the topology",
                || {
                    let f = s.master_fields(Self::NAME)?;
                    let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                    (get("num-slaves") == Some(&replicas)
                        && get("num-other-sentinels") == Some(&others))
                    .then_some(())
                },
            );
        }
        group
    }

    /// The Sentinels' URLs (for a Sentinel client).
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    /// The primary's port as the first Sentinel names it, once no failover is in progress
    /// and the primary is not flagged down.
    pub fn primary_port(&self) -> Option<u16> {
        let s = &self.sentinels[0];
        let f = s.master_fields(Self::NAME)?;
        let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let flags = get("flags")?;
        if flags.contains("failover_in_progress") || flags.contains("down") {
            return None;
        }
        get("port")?.parse().ok()
    }

    /// Waits until the Sentinels name `new_primary` as the primary (a failover finished).
    pub fn wait_failover_to(&self, new_primary: &Server, timeout: Duration) {
        let port = new_primary.port();
        wait_for(timeout, "sentinel failover", || {
            (self.primary_port() == Some(port)).then_some(())
        });
    }

    /// `SENTINEL MASTERS` of the first Sentinel and its log, for a failure message.
    pub fn describe(&self) -> String {
        let s = &self.sentinels[0];
        format!(
            "flags: {:?}\nsentinel log:\n{}",
            s.master_field(Self::NAME, "flags"),
            s.log()
        )
    }
}

/// One Sentinel on a free port, once it answers as itself; started again on another port when
/// the one picked was taken before the Sentinel could listen on it.
fn start_one(primary: &Server, quorum: usize) -> Sentinel {
    on_a_free_port(|| {
        let mut s = spawn_one(primary, quorum);
        let up = wait_for(Duration::from_secs(20), "a sentinel answers", || {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Some(Err(format!("sentinel exited at start ({status})")));
            }
            s.answers_as_itself().then_some(Ok(()))
        });
        match up {
            Ok(()) => Ok(s),
            Err(e) => Err(format!("{e}; log:\n{}", s.log())),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn spawn_one(primary: &Server, quorum: usize) -> Sentinel {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let conf = dir.path().join("sentinel.conf");
    let name = Sentinels::NAME;
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {d}\nlogfile {d}/sentinel.log\n\
             sentinel announce-ip 127.0.0.1\n\
             sentinel monitor {name} 127.0.0.1 {primary} {quorum}\n\
             sentinel down-after-milliseconds {name} 500\n\
             sentinel failover-timeout {name} 2000\n",
            d = dir.path().display(),
            primary = primary.port(),
        ),
    )
    .expect("write sentinel.conf");
    let child = Command::new(sentinel_binary())
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} ({e})", sentinel_binary()));
    Sentinel { child, port, dir }
}
