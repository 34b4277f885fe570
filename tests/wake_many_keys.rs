//! Every wake source with clients queued on 1,000 keys at once: the cost of watching for
//! DEL/RENAME/MOVE/overwrite does not depend on how many keys are waited on, and nothing is
//! left once the waiters have gone.

use crate::common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const KEYS: usize = 1000;

/// Event-driven wake sources (DEL, UNLINK, RENAME, MOVE, EXPIRE, release, FLUSHDB): the
/// promise is 10 ms; the bound leaves room for a busy 2-core machine.
const EVENT_BOUND: Duration = Duration::from_millis(500);

/// An overwrite by another type is found by the poll: within 100 ms × ⌈1,000 / 32⌉ = 3.2 s
/// with 1,000 waited keys (docs/BEHAVIOUR.md, *Waking waiters*), with the same room.
const OVERWRITE_BOUND: Duration = Duration::from_millis(3200 + 1500);

/// A waiter on its own connection, written raw (1,000 blocked clients without 1,000 threads).
struct RawWaiter {
    reader: BufReader<TcpStream>,
}

impl RawWaiter {
    fn start(port: u16, args: &[&str]) -> RawWaiter {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let parts: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        s.write_all(&resp_encode(&parts)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        RawWaiter {
            reader: BufReader::new(s),
        }
    }

    /// The first line of the reply (`:1`, `-WRONGTYPE ...`, `_`/`*-1` for null).
    fn line(&mut self, what: usize) -> String {
        let mut l = String::new();
        self.reader
            .read_line(&mut l)
            .unwrap_or_else(|e| panic!("no reply to waiter {what}: {e}"));
        l.trim_end().to_string()
    }
}

fn key(i: usize) -> String {
    format!("many:{i}")
}

#[test]
fn wake_sources_with_a_thousand_queued_keys() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut p = redis::pipe();
    for i in 0..KEYS {
        p.cmd("DLOCK.ACQUIRE").arg(key(i)).arg("h").arg(60_000);
    }
    let _: Vec<i64> = p.query(&mut c).unwrap();
    let mut waiters: Vec<RawWaiter> = (0..KEYS)
        .map(|i| {
            RawWaiter::start(
                srv.port(),
                &["DLOCK.ACQUIRE", &key(i), "w", "60000", "WAIT", "30000"],
            )
        })
        .collect();
    wait_for(Duration::from_secs(20), "1,000 waiters queued", || {
        (info_dlock(&mut c)["dlock_waiters"] == KEYS as i64).then_some(())
    });

    // One wake source per key, each far from the others in the set of waited keys.
    let mut lat = vec![];
    let mut timed = |i: usize, expect: &str, act: &mut dyn FnMut(&mut Connection)| {
        let t = Instant::now();
        act(&mut c);
        let got = waiters[i].line(i);
        assert!(got.starts_with(expect), "waiter {i}: {got}");
        // Only a SET (an overwrite by another type, no event) waits for the poll.
        let bound = if i == 777 {
            OVERWRITE_BOUND
        } else {
            EVENT_BOUND
        };
        lat.push((i, t.elapsed(), bound));
    };
    timed(10, ":1", &mut |c| {
        let _: i64 = redis::cmd("DEL").arg(key(10)).query(c).unwrap();
    });
    timed(333, ":1", &mut |c| {
        let _: () = redis::cmd("RENAME")
            .arg(key(333))
            .arg("elsewhere")
            .query(c)
            .unwrap();
    });
    timed(500, ":1", &mut |c| {
        assert_eq!(release(c, &key(500), "h"), Reply::Int(1))
    });
    timed(777, "-WRONGTYPE", &mut |c| {
        let _: () = redis::cmd("SET").arg(key(777)).arg("v").query(c).unwrap();
    });
    timed(999, ":1", &mut |c| {
        let _: i64 = redis::cmd("PEXPIRE").arg(key(999)).arg(1).query(c).unwrap();
    });
    timed(123, ":1", &mut |c| {
        let _: i64 = redis::cmd("UNLINK").arg(key(123)).query(c).unwrap();
    });
    timed(888, "-WRONGTYPE", &mut |c| {
        // COPY ... REPLACE of a list over the lock: the generic `copy_to` event.
        let _: i64 = redis::cmd("RPUSH").arg("a-list").arg("x").query(c).unwrap();
        let copied: i64 = redis::cmd("COPY")
            .arg("a-list")
            .arg(key(888))
            .arg("REPLACE")
            .query(c)
            .unwrap();
        assert_eq!(copied, 1);
    });
    // Last: on Valkey 8.1, once a module listens to generic keyspace events, `MOVE` leaves the
    // calling connection in the target database (seen 2026-11-27; a server bug: a later
    // command of this connection would run there: hence the SELECT).
    timed(654, ":1", &mut |c| {
        let _: i64 = redis::cmd("MOVE").arg(key(654)).arg(3).query(c).unwrap();
        let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    });
    for (i, d, bound) in &lat {
        println!("waiter {i} answered {d:?} after its key changed");
        assert!(d < bound, "waiter {i}: {d:?} (bound {bound:?})");
    }

    // Every other waiter leaves (disconnects): nothing queued is left behind.
    drop(waiters);
    wait_for(Duration::from_secs(20), "the waiters to be gone", || {
        (info_dlock(&mut c)["dlock_waiters"] == 0).then_some(())
    });
    // The module still serves a new wait on one key.
    let w = enqueue(
        &srv,
        &mut c,
        &key(1),
        &["DLOCK.ACQUIRE", &key(1), "w2", "1000", "WAIT", "10000"],
        1,
    );
    let _: i64 = redis::cmd("DEL").arg(key(1)).query(&mut c).unwrap();
    assert_eq!(w.reply(), Reply::Int(1));
}
