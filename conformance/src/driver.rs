//! One driver process (one actor of a scenario): requests written as JSON lines on its
//! stdin, replies and events read from its stdout by a thread, stderr kept for the report.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};
use serde_json::{Map, Value};

/// What the driver said so far.
#[derive(Default)]
pub struct Said {
    pub replies: HashMap<u64, Value>,
    /// Events in arrival order (`lost`, `alive`).
    pub events: Vec<Value>,
    /// The driver's stdout closed (it exited or was killed).
    pub gone: bool,
    /// The last lines of its stderr.
    pub stderr: String,
}

type Shared = Arc<(Mutex<Said>, Condvar)>;

/// A running driver; killed (SIGKILL) and reaped when dropped.
pub struct Driver {
    pub actor: String,
    child: Child,
    stdin: Option<ChildStdin>,
    said: Shared,
    next_id: u64,
    /// Stopped with SIGSTOP and not continued yet.
    pub stopped: bool,
    pub killed: bool,
}

impl Driver {
    /// Start `command` (run by `sh -c 'exec …'`, so the driver's PID is the shell's).
    pub fn spawn(actor: &str, command: &str) -> Result<Driver, String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {command}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start driver {command:?}: {e}"))?;
        let said: Shared = Arc::default();
        let out = child.stdout.take().expect("piped stdout");
        let s = said.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v: Value = match serde_json::from_str(&line) {
                    Ok(v) => v,
                    Err(_) => {
                        let mut g = s.0.lock().unwrap();
                        keep_tail(&mut g.stderr, &format!("(stdout, not JSON) {line}\n"));
                        continue;
                    }
                };
                let mut g = s.0.lock().unwrap();
                match v.get("id").and_then(Value::as_u64) {
                    Some(id) => {
                        g.replies.insert(id, v);
                    }
                    None => g.events.push(v),
                }
                s.1.notify_all();
            }
            s.0.lock().unwrap().gone = true;
            s.1.notify_all();
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let s = said.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                keep_tail(&mut s.0.lock().unwrap().stderr, &text);
            }
        });
        let stdin = child.stdin.take();
        Ok(Driver {
            actor: actor.to_string(),
            child,
            stdin,
            said,
            next_id: 1,
            stopped: false,
            killed: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send a request (its `id` added); answers the id.
    pub fn send(&mut self, mut req: Map<String, Value>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        req.insert("id".into(), id.into());
        let line = format!("{}\n", Value::Object(req));
        if let Some(stdin) = self.stdin.as_mut() {
            // A dead driver's pipe fails: its reply never comes, which the step reports.
            let _ = stdin.write_all(line.as_bytes()).and_then(|_| stdin.flush());
        }
        id
    }

    /// The reply to `id`, waiting up to `patience`.
    pub fn reply(&self, id: u64, patience: Duration) -> Option<Value> {
        let end = Instant::now() + patience;
        let (m, cv) = &*self.said;
        let mut g = m.lock().unwrap();
        loop {
            if let Some(v) = g.replies.get(&id) {
                return Some(v.clone());
            }
            let now = Instant::now();
            if g.gone || now >= end {
                return None;
            }
            g = cv.wait_timeout(g, end - now).unwrap().0;
        }
    }

    /// Wait until `f` finds something in what the driver said, up to `patience`.
    pub fn wait_said<T>(
        &self,
        patience: Duration,
        mut f: impl FnMut(&Said) -> Option<T>,
    ) -> Option<T> {
        let end = Instant::now() + patience;
        let (m, cv) = &*self.said;
        let mut g = m.lock().unwrap();
        loop {
            if let Some(v) = f(&g) {
                return Some(v);
            }
            let now = Instant::now();
            if now >= end {
                return None;
            }
            g = cv
                .wait_timeout(g, (end - now).min(Duration::from_millis(50)))
                .unwrap()
                .0;
        }
    }

    /// Look at what the driver said.
    pub fn said<T>(&self, f: impl FnOnce(&Said) -> T) -> T {
        f(&self.said.0.lock().unwrap())
    }

    pub fn signal(&mut self, sig: Signal) -> Result<(), String> {
        let pid = Pid::from_raw(self.pid() as i32).ok_or("no pid")?;
        kill_process(pid, sig).map_err(|e| format!("signal to driver {}: {e}", self.actor))
    }

    pub fn stop(&mut self) -> Result<(), String> {
        self.signal(Signal::STOP)?;
        self.stopped = true;
        Ok(())
    }

    pub fn cont(&mut self) -> Result<(), String> {
        self.signal(Signal::CONT)?;
        self.stopped = false;
        Ok(())
    }

    /// SIGKILL, and wait for the process and its stdout to end.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.killed = true;
        self.stdin = None;
        let _ = self.wait_said(Duration::from_secs(2), |s| s.gone.then_some(()));
    }

    /// Close the driver's stdin (the end of its requests) and wait up to `patience` for the
    /// process to exit by itself: its exit status, or `None` when it is still running.
    pub fn close_stdin_and_wait(&mut self, patience: Duration) -> Result<Option<i32>, String> {
        self.stdin = None;
        let end = Instant::now() + patience;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(Some(status.code().unwrap_or(-1))),
                Ok(None) if Instant::now() >= end => return Ok(None),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("driver {}: {e}", self.actor)),
            }
        }
    }

    /// Ask the driver to close (`close`), close its stdin, give it a moment to exit, then
    /// kill it.
    pub fn finish(&mut self) {
        if !self.killed {
            if self.stopped {
                let _ = self.cont();
            }
            if self.stdin.is_some() {
                let mut req = Map::new();
                req.insert("op".into(), "close".into());
                let id = self.send(req);
                let _ = self.reply(id, Duration::from_secs(2));
            }
            let _ = self.close_stdin_and_wait(Duration::from_secs(2));
        }
        self.kill();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keep the last 16 KiB of a driver's stderr.
fn keep_tail(buf: &mut String, more: &str) {
    buf.push_str(more);
    if buf.len() > 16 * 1024 {
        let mut cut = buf.len() - 16 * 1024;
        while !buf.is_char_boundary(cut) {
            cut += 1;
        }
        buf.drain(..cut);
    }
}
