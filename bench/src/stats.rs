//! Percentiles, repetition summaries and the server's own view (INFO cpu, commandstats).

use std::collections::HashMap;
use std::time::Duration;

use crate::resp::{encode, RawConn, Reply};

/// Percentile `p` (0..=100) of `v` (sorted in place), nearest rank.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// p50, p99 and max of latencies, in microseconds.
pub fn latency_us(d: &[Duration]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = d.iter().map(|x| x.as_secs_f64() * 1e6).collect();
    let p50 = percentile(&mut v, 50.0);
    let p99 = percentile(&mut v, 99.0);
    let max = v.last().copied().unwrap_or(f64::NAN);
    (p50, p99, max)
}

/// Median, min and max of the repetitions of one figure.
pub fn summary(v: &[f64]) -> (f64, f64, f64) {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (med, s[0], s[n - 1])
}

/// The server's view of a measured interval: CPU it burnt and what each command cost it.
pub struct ServerView {
    /// used_cpu_user + used_cpu_sys, seconds.
    pub cpu: f64,
    /// command name -> (calls, usec)
    pub commands: HashMap<String, (u64, u64)>,
}

impl ServerView {
    /// Commands a client sent for the work itself (not INFO/CONFIG/CLIENT/HELLO of the harness).
    pub fn work_calls(&self) -> u64 {
        self.commands
            .iter()
            .filter(|(k, _)| !is_harness(k))
            .map(|(_, v)| v.0)
            .sum()
    }
    /// Calls a client sent (not the ones scripts made: Redis counts a script's
    /// `redis.call`s in commandstats too, and its EVALSHA's usec already includes them).
    pub fn top_calls(&self, script_calls: &[&str]) -> u64 {
        self.work_calls() - script_calls.iter().map(|c| self.calls(c)).sum::<u64>()
    }
    pub fn calls(&self, name: &str) -> u64 {
        self.commands.get(name).map_or(0, |v| v.0)
    }
    pub fn usec(&self, name: &str) -> u64 {
        self.commands.get(name).map_or(0, |v| v.1)
    }
}

fn is_harness(cmd: &str) -> bool {
    cmd == "info"
        || cmd == "ping"
        || cmd == "hello"
        || cmd.starts_with("config")
        || cmd.starts_with("client")
        || cmd.starts_with("script")
        || cmd.starts_with("module")
}

async fn info(conn: &mut RawConn, section: &str) -> String {
    match conn.call(&encode(&[b"INFO", section.as_bytes()])).await {
        Ok(Reply::Bulk(b)) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO {section}: {other:?}"),
    }
}

/// `INFO <section>` as field -> value.
pub async fn info_fields(conn: &mut RawConn, section: &str) -> HashMap<String, String> {
    info(conn, section)
        .await
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Starts an interval: CONFIG RESETSTAT (zeroes commandstats) and returns the CPU so far.
pub async fn begin(conn: &mut RawConn) -> f64 {
    let r = conn
        .call(&encode(&[b"CONFIG", b"RESETSTAT"]))
        .await
        .expect("CONFIG RESETSTAT");
    assert_eq!(r, Reply::Status("OK".into()), "CONFIG RESETSTAT");
    cpu(conn).await
}

pub async fn cpu(conn: &mut RawConn) -> f64 {
    let f = info_fields(conn, "cpu").await;
    let g = |k: &str| f.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    g("used_cpu_user") + g("used_cpu_sys")
}

/// Ends an interval started by [`begin`].
pub async fn end(conn: &mut RawConn, cpu_before: f64) -> ServerView {
    let cpu_after = cpu(conn).await;
    let text = info(conn, "commandstats").await;
    let mut commands = HashMap::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let mut calls = 0;
        let mut usec = 0;
        for kv in fields.split(',') {
            match kv.split_once('=') {
                Some(("calls", v)) => calls = v.parse().unwrap_or(0),
                Some(("usec", v)) => usec = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        commands.insert(name.to_string(), (calls, usec));
    }
    ServerView {
        cpu: cpu_after - cpu_before,
        commands,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut v: Vec<f64> = (1..=100).map(|x| x as f64).collect();
        assert_eq!(percentile(&mut v, 50.0), 50.0);
        assert_eq!(percentile(&mut v, 99.0), 99.0);
        assert_eq!(summary(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(summary(&[4.0, 1.0, 2.0, 3.0]).0, 2.5);
    }
}
