//! The monitoring route of docs/OPERATIONS.md, end to end: a server with the module, the real
//! redis_exporter (Debian's `prometheus-redis-exporter`, installed by `make setup`) run with the
//! arguments of `deploy/monitoring/prometheus-redis-exporter.default` (the server's address and
//! the script's installed path swapped for this test's), and its /metrics read over HTTP. The
//! exporter must serve every `INFO dlock` field with the server's value, including a waiter
//! counted while it waits, and every metric the alert rules and the Grafana dashboard use.

use crate::common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The exporter binary: `DLOCK_REDIS_EXPORTER`, else Debian's name, else upstream's.
fn exporter_binary() -> String {
    if let Ok(b) = std::env::var("DLOCK_REDIS_EXPORTER") {
        return b;
    }
    for b in ["prometheus-redis-exporter", "redis_exporter"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {b}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if found {
            return b.to_string();
        }
    }
    panic!("no redis_exporter: `make setup` installs Debian's prometheus-redis-exporter");
}

/// A running exporter, killed by PID when dropped.
struct Exporter {
    child: Child,
    port: u16,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    /// Starts it for `srv` and waits until it answers; another port if the first was taken.
    fn start(srv: &Server) -> Exporter {
        let args = documented_args(srv);
        for _ in 0..3 {
            let port = dlock_testutil::free_port();
            let child = Command::new(exporter_binary())
                .args(&args)
                .arg("-web.listen-address")
                .arg(format!("127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start the exporter");
            let mut e = Exporter { child, port };
            let up = wait_for(Duration::from_secs(20), "the exporter", || {
                if e.child.try_wait().unwrap().is_some() {
                    return Some(false); // exited: the port was taken meanwhile
                }
                TcpStream::connect(("127.0.0.1", port)).ok().map(|_| true)
            });
            if up {
                return e;
            }
        }
        panic!("the exporter did not start on three free ports");
    }

    /// One scrape: the `redis_script_values{key="..."}` series, and `redis_up`.
    fn scrape(&self) -> (HashMap<String, i64>, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to /metrics");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).expect("read /metrics");
        assert!(
            body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
            "{body:.200}"
        );
        let mut values = HashMap::new();
        let mut up = String::new();
        for line in body.lines() {
            if let Some(rest) = line.strip_prefix("redis_script_values{key=\"") {
                let (key, value) = rest.split_once("\"} ").expect(line);
                values.insert(key.to_string(), value.parse::<f64>().expect(line) as i64);
            } else if let Some(v) = line.strip_prefix("redis_up ") {
                up = v.to_string();
            }
        }
        (values, up)
    }
}

/// The `ARGS` of the documented /etc/default file, for `srv` and the script in this repository.
fn documented_args(srv: &Server) -> Vec<String> {
    let file = "deploy/monitoring/prometheus-redis-exporter.default";
    let text = std::fs::read_to_string(repo_file(file)).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ARGS="))
        .expect(file);
    let mut args: Vec<String> = line
        .trim_matches('"')
        .split_whitespace()
        .map(String::from)
        .collect();
    let mut swapped = 0;
    for i in 1..args.len() {
        match args[i - 1].as_str() {
            "-redis.addr" => args[i] = srv.url(),
            "-script" => {
                // `make install` puts the script there.
                assert_eq!(args[i], "/usr/local/share/dlock/dlock-info.lua", "{file}");
                args[i] = repo_file("deploy/monitoring/dlock-info.lua")
                    .display()
                    .to_string();
            }
            _ => continue,
        }
        swapped += 1;
    }
    assert_eq!(
        swapped, 2,
        "{file}: -redis.addr and -script expected in {args:?}"
    );
    args
}

/// The `key="dlock_..."` metrics a monitoring file uses (quotes escaped or not).
fn keys_used(rel: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_file(rel)).unwrap();
    let text = text.replace("\\\"", "\"");
    text.split("key=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().to_string())
        .collect()
}

#[test]
fn redis_exporter_serves_info_dlock_through_the_script() {
    let srv = Server::start();
    let mut c = srv.connection();
    let exporter = Exporter::start(&srv);

    // A waiter while it waits: the gauge shows it.
    assert_eq!(acquire(&mut c, "mon:a", "alice", 30_000), Reply::Int(1));
    let bob = spawn_cmd(
        &srv,
        &["DLOCK.ACQUIRE", "mon:a", "bob", "30000", "WAIT", "10000"],
    );
    wait_waiters(&mut c, "mon:a", 1);
    let (during, up) = exporter.scrape();
    assert_eq!(up, "1", "redis_up");
    assert_eq!(during.get("dlock_waiters"), Some(&1), "{during:?}");

    // A hand-off, an expired lease and an error reply, then the counters must agree.
    assert_eq!(release(&mut c, "mon:a", "alice"), Reply::Int(1));
    assert_eq!(bob.wait(Duration::from_secs(10)).0, Reply::Int(1));
    assert_eq!(acquire(&mut c, "mon:short", "carol", 20), Reply::Int(1));
    wait_for(Duration::from_secs(10), "the lease to expire", || {
        (info_dlock(&mut c)["dlock_leases_expired"] >= 1).then_some(())
    });
    assert!(cmd(&mut c, &["DLOCK.ACQUIRE", "mon:a", "x", "not-a-number"]).is_err());

    let info = info_dlock(&mut c);
    let (metrics, _) = exporter.scrape();
    assert_eq!(metrics, info, "the exporter's values against INFO dlock");
    assert_eq!(metrics["dlock_handoffs"], 1);
    assert!(metrics["dlock_leases_expired"] >= 1);
    assert!(metrics["dlock_errors"] >= 1);
    assert!(metrics["dlock_wait_max_us"] > 0);

    for file in [
        "deploy/monitoring/alerts.yml",
        "deploy/monitoring/grafana-dashboard.json",
    ] {
        let used = keys_used(file);
        assert!(used.len() >= 5, "{file}: {used:?}");
        for k in used {
            assert!(
                metrics.contains_key(&k),
                "{file} uses {k}, which the exporter does not serve"
            );
        }
    }
}
