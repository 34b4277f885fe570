//! One throw-away `redis-server` process: [`ServerBuilder`] starts it on a free loopback port
//! in its own temporary directory, [`Server`] kills it by PID when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::module_build::module_path;

/// The server binary to run.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().unwrap().port();
        if port != 6379 {
            return port;
        }
    }
}

/// How to start a server.
#[derive(Clone, Debug)]
pub struct ServerBuilder {
    load_module: bool,
    module_args: Vec<String>,
    extra: Vec<String>,
    dir: Option<PathBuf>,
    port: Option<u16>,
    wrapper: Vec<String>,
    /// Port of the primary to replicate (`--replicaof`).
    primary: Option<u16>,
    /// The server binary, when not [`server_binary`].
    binary: Option<String>,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            load_module: true,
            module_args: vec![],
            extra: vec![],
            dir: None,
            port: None,
            wrapper: vec![],
            primary: None,
            binary: None,
        }
    }
}

impl ServerBuilder {
    /// Start without loading the dlock module (e.g. a plain replica, or the script backend).
    pub fn without_module(mut self) -> Self {
        self.load_module = false;
        self
    }
    /// Arguments after the module path on the `--loadmodule` line.
    pub fn module_args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.module_args.extend(args.into_iter().map(Into::into));
        self
    }
    /// Extra server options, e.g. `["--appendonly", "yes"]`.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.extra.extend(args.into_iter().map(Into::into));
        self
    }
    /// The append-only file on, every write synced before the reply (`--appendonly yes
    /// --appendfsync always`): what a restart or a server without the module replays.
    pub fn aof(self) -> Self {
        self.args(["--appendonly", "yes", "--appendfsync", "always"])
    }
    /// Use this data directory (kept after the server stops) instead of a fresh temp dir:
    /// for restart tests.
    pub fn dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }
    /// Listen on this port (for a restart on the same port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }
    /// Run the server under this program and its arguments (e.g. `valgrind --tool=callgrind`).
    pub fn wrapper<I: IntoIterator<Item = S>, S: Into<String>>(mut self, cmd: I) -> Self {
        self.wrapper = cmd.into_iter().map(Into::into).collect();
        self
    }
    /// Start as a replica of `primary` (`--replicaof`); [`start`](Self::start) then also waits
    /// until the replica is in sync (see [`crate::wait_replica_synced`]).
    pub fn replica_of(mut self, primary: &Server) -> Self {
        self.primary = Some(primary.port());
        self
    }
    /// Run this server binary instead of [`server_binary`] (e.g. a Valkey 9 for a test of
    /// atomic slot migration, see [`crate::valkey9_binary`]).
    pub fn binary(mut self, path: &str) -> Self {
        self.binary = Some(path.to_string());
        self
    }
    /// Start the server and wait until it answers PING. Panics with the server log on failure.
    pub fn start(self) -> Server {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start the server; on failure return the reason and the server's log.
    ///
    /// A port picked here ([`free_port`]) may be taken before the server binds it (by another
    /// test's server, or as the local port of some connection): then the start is tried again
    /// on another port.
    pub fn try_start(self) -> Result<Server, String> {
        match self.port {
            Some(port) => self.start_on(port),
            None => on_a_free_port(|| self.start_on(free_port())),
        }
    }

    fn start_on(&self, port: u16) -> Result<Server, String> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = self.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
        let log = tmp.path().join("server.log");
        let binary = self.binary.clone().unwrap_or_else(server_binary);
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
        cmd.arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
            .args([
                "--repl-diskless-sync-delay",
                "0",
                "--enable-debug-command",
                "yes",
            ])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(&log);
        if self.load_module {
            cmd.arg("--loadmodule")
                .arg(module_path())
                .args(&self.module_args);
        }
        if let Some(primary) = self.primary {
            // Announced as 127.0.0.1 so that Sentinels and primaries name a reachable address.
            cmd.args(["--replicaof", "127.0.0.1", &primary.to_string()])
                .args(["--replica-announce-ip", "127.0.0.1"]);
        }
        cmd.args(&self.extra);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {binary}: {e}"))?;
        let mut server = Server {
            child,
            port,
            log,
            _tmp: tmp,
            dir,
        };
        // A wrapped server (valgrind) starts many times slower.
        let patience = if self.wrapper.is_empty() { 20 } else { 120 };
        let deadline = Instant::now() + Duration::from_secs(patience);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "server exited at start ({status}); log:\n{}",
                    server.log()
                ));
            }
            // The answer must come from this server, not from another one on the same port.
            if server.answers_as_itself() {
                if let Some(primary) = self.primary {
                    crate::replication::wait_replica_synced(&server, primary);
                }
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "server did not answer PING in {patience} s; log:\n{}",
                    server.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The server behind `c` is process `pid` (`INFO server`'s `process_id`; servers that do not
/// report it are taken at their word): after a lost race for a port, another server may be
/// the one answering there.
pub(crate) fn answered_by(c: &mut redis::Connection, pid: u32) -> bool {
    let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(c) else {
        return false;
    };
    match info.lines().find_map(|l| l.strip_prefix("process_id:")) {
        Some(reported) => reported.trim() == pid.to_string(),
        None => true,
    }
}

/// Runs `start` (which picks its ports itself) again, up to five times in all, while its
/// failure, which carries the server's log, says a port was taken: a port [`free_port`] picked
/// may be taken before the server binds it (by another test's server, or as the local port of
/// some connection).
pub(crate) fn on_a_free_port<T>(mut start: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    const ATTEMPTS: usize = 5;
    let mut attempt = 1;
    loop {
        match start() {
            Err(e) if attempt < ATTEMPTS && e.contains("Address already in use") => attempt += 1,
            done => return done,
        }
    }
}

/// A running redis-server, killed when dropped.
pub struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Server {
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }
    /// A server with the module loaded and default settings.
    pub fn start() -> Server {
        ServerBuilder::default().start()
    }
    pub fn port(&self) -> u16 {
        self.port
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
    /// A RESP3 URL (`?protocol=resp3`).
    pub fn url_resp3(&self) -> String {
        format!("redis://127.0.0.1:{}/?protocol=resp3", self.port)
    }
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }
    /// PING answered (data loaded) by this very process: `INFO server`'s `process_id` is its
    /// PID. A server that lost the race for its port must not take another one's answer.
    fn answers_as_itself(&self) -> bool {
        let Ok(mut c) = self.try_connection() else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut c).is_ok() && answered_by(&mut c, self.child.id())
    }

    pub(crate) fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        let c = self.client();
        c.get_connection_with_timeout(Duration::from_secs(2))
    }
    /// A new synchronous connection (panics if the server does not answer).
    pub fn connection(&self) -> redis::Connection {
        self.try_connection().expect("connect to test server")
    }
    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
    /// Kill the process (SIGKILL) and wait for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    /// Ask the server to stop (SHUTDOWN NOSAVE) and wait for the process; falls back to kill.
    pub fn shutdown(&mut self) {
        self.shutdown_within(Duration::from_secs(10));
    }
    /// [`Server::shutdown`], waiting up to `patience` for the process to exit.
    pub fn shutdown_within(&mut self, patience: Duration) {
        if let Ok(mut c) = self.try_connection() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut c);
        }
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_cannot_listen_does_not_take_another_servers_answer() {
        let first = Server::builder().without_module().start();
        // Same port given explicitly: no retry on another port, and the first server's PING
        // must not pass for the second's.
        let second = Server::builder()
            .without_module()
            .port(first.port())
            .try_start();
        let e = second.err().expect("two servers cannot listen on one port");
        assert!(e.contains("Address already in use"), "{e}");
    }
}
