//! The DLOCK commands toward WATCH and keyspace notifications, as core commands: a key is
//! signalled as modified, and announced with the event of the core command making the same
//! change (`hset`, `hdel`, `del`, `expire`, `set`), exactly when it changes; refusals, errors
//! and reads signal and announce nothing. The module is not woken by its own events.

use crate::common;
use common::*;
use std::time::Duration;

/// Runs `change` (on another connection) between WATCH `key` and EXEC; returns whether the
/// transaction still ran (true) or WATCH aborted it (false).
fn exec_survives(srv: &Server, key: &str, change: impl FnOnce(&mut Connection)) -> bool {
    let mut w = srv.connection();
    assert_eq!(cmd(&mut w, &["WATCH", key]), Reply::Status("OK".into()));
    let mut other = srv.connection();
    change(&mut other);
    assert_eq!(cmd(&mut w, &["MULTI"]), Reply::Status("OK".into()));
    assert_eq!(
        cmd(&mut w, &["SET", "watch:marker", "1"]),
        Reply::Status("QUEUED".into())
    );
    match cmd(&mut w, &["EXEC"]) {
        Reply::Nil => false,
        Reply::Arr(_) => true,
        other => panic!("EXEC: {other:?}"),
    }
}

/// A command that must leave WATCH on `key` alone: (key, command, check of its reply).
type NoChange = (&'static str, Vec<&'static str>, fn(&Reply) -> bool);

#[test]
fn watch_survives_refusals_errors_and_reads() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "A", 60_000), Reply::Int(1));
    assert_eq!(rwlock(&mut c, "rw", "A", "READ", 60_000), Reply::Int(1));
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut c).unwrap();
    let no_change: Vec<NoChange> = vec![
        ("k", vec!["DLOCK.ACQUIRE", "k", "B", "1000"], Reply::is_nil),
        (
            "k",
            vec!["DLOCK.ACQUIRE", "k", "B", "1000", "FENCE"],
            Reply::is_nil,
        ),
        ("k", vec!["DLOCK.RELEASE", "k", "B"], Reply::is_nil),
        ("k", vec!["DLOCK.RENEW", "k", "B", "1000"], |r| {
            *r == Reply::Int(0)
        }),
        (
            "k",
            vec!["DLOCK.RWLOCK", "k", "A", "READ", "1000"],
            Reply::is_err,
        ),
        ("k", vec!["DLOCK.RELEASE", "k", "A", "READ"], Reply::is_err),
        ("k", vec!["DLOCK.INFO", "k"], |r| matches!(r, Reply::Arr(_))),
        (
            "rw",
            vec!["DLOCK.RWLOCK", "rw", "B", "WRITE", "1000"],
            Reply::is_nil,
        ),
        (
            "rw",
            vec!["DLOCK.RWLOCK", "rw", "A", "WRITE", "1000"],
            Reply::is_err,
        ),
        ("s", vec!["DLOCK.ACQUIRE", "s", "A", "1000"], Reply::is_err),
        ("s", vec!["DLOCK.RELEASE", "s", "A"], Reply::is_err),
        ("free", vec!["DLOCK.RELEASE", "free", "A"], Reply::is_nil),
        ("free", vec!["DLOCK.RENEW", "free", "A", "1000"], |r| {
            *r == Reply::Int(0)
        }),
    ];
    for (key, args, expected) in no_change {
        let survived = exec_survives(&srv, key, |o| {
            let r = cmd(o, &args);
            assert!(expected(&r), "{args:?} -> {r:?}");
        });
        assert!(
            survived,
            "{args:?} changed nothing but aborted WATCH on {key}"
        );
    }
}

#[test]
fn watch_aborts_on_real_changes() {
    let srv = Server::start();
    let fk = slot_fence_key("k");
    let changes: Vec<(&str, Vec<&str>)> = vec![
        ("k", vec!["DLOCK.ACQUIRE", "k", "A", "60000"]), // grant
        ("k", vec!["DLOCK.ACQUIRE", "k", "A", "60000"]), // re-entry
        ("k", vec!["DLOCK.RENEW", "k", "A", "30000"]),   // lease only
        ("k", vec!["DLOCK.RELEASE", "k", "A"]),          // count down
        ("k", vec!["DLOCK.RELEASE", "k", "A"]),          // delete
        ("k", vec!["DLOCK.ACQUIRE", "k", "A", "1000", "FENCE"]),
        (&fk, vec!["DLOCK.ACQUIRE", "k2", "A", "1000"]), // other lock: no
        ("rw", vec!["DLOCK.RWLOCK", "rw", "A", "READ", "60000"]),
        ("rw", vec!["DLOCK.RWLOCK", "rw", "B", "READ", "60000"]),
        ("rw", vec!["DLOCK.RELEASE", "rw", "A"]),
    ];
    for (n, (key, args)) in changes.into_iter().enumerate() {
        let survived = exec_survives(&srv, key, |o| {
            let r = cmd(o, &args);
            assert!(!r.is_err() && !r.is_nil(), "{args:?} -> {r:?}");
        });
        // Step 6 is on another lock (another slot): its fence key is not the one watched.
        assert_eq!(survived, n == 6, "step {n}: {args:?} on watched {key}");
    }
    // The slot's fencing counter is signalled when a fresh FENCE grant advances it, and left
    // alone by a grant without FENCE.
    let mut c = srv.connection();
    assert_eq!(release(&mut c, "k", "A"), Reply::Int(1));
    let survived = exec_survives(&srv, &fk, |o| {
        assert_eq!(acquire(o, "k", "B", 1000), Reply::Int(1));
    });
    assert!(survived, "no token taken");
    assert_eq!(release(&mut c, "k", "B"), Reply::Int(1));
    let survived = exec_survives(&srv, &fk, |o| {
        let r = cmd(o, &["DLOCK.ACQUIRE", "k", "B", "1000", "FENCE"]);
        assert_eq!(r, Reply::Arr(vec![Reply::Int(1), Reply::Int(2)]));
    });
    assert!(!survived, "the fence advanced");
}

/// Keyspace notifications (`__keyspace@0__:<key>` -> event) seen by a pattern subscriber.
struct Events {
    ps: redis::PubSub<'static>,
}

impl Events {
    fn new(srv: &Server, admin: &mut Connection) -> Events {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg("KA")
            .query(admin)
            .unwrap();
        let con: &'static mut Connection = Box::leak(Box::new(srv.connection()));
        con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut ps = con.as_pubsub();
        ps.psubscribe("__keyspace@0__:*").unwrap();
        Events { ps }
    }

    /// Every `(key, event)` before the `set` on the sentinel key that this call makes.
    fn drain(&mut self, c: &mut Connection) -> Vec<(String, String)> {
        let _: () = redis::cmd("SET").arg("sentinel").arg("1").query(c).unwrap();
        let mut out = vec![];
        loop {
            let m = self.ps.get_message().expect("events before the sentinel");
            let key = m.get_channel_name()["__keyspace@0__:".len()..].to_string();
            let event: String = m.get_payload().unwrap();
            if key == "sentinel" {
                return out;
            }
            out.push((key, event));
        }
    }
}

fn events(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, e)| (k.to_string(), e.to_string()))
        .collect()
}

/// A command and the keyspace events it must announce, in order: (key, event).
type Step = (Vec<&'static str>, Vec<(&'static str, &'static str)>);

#[test]
fn notifications_name_each_change_like_core_commands() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut ev = Events::new(&srv, &mut c);
    // `Step` holds 'static names: the counter's name lives as long as the test.
    let fence: &'static str = Box::leak(slot_fence_key("k").into_boxed_str());

    let steps: Vec<Step> = vec![
        // grant: the holder field, then the lease
        (
            vec!["DLOCK.ACQUIRE", "k", "A", "60000"],
            vec![("k", "hset"), ("k", "expire")],
        ),
        // re-entry: count and lease (another lease: the same one within the same
        // millisecond would leave the deadline, and send no `expire`)
        (
            vec!["DLOCK.ACQUIRE", "k", "A", "50000"],
            vec![("k", "hset"), ("k", "expire")],
        ),
        (
            vec!["DLOCK.RENEW", "k", "A", "30000"],
            vec![("k", "expire")],
        ),
        // count down, lease left as it is
        (vec!["DLOCK.RELEASE", "k", "A"], vec![("k", "hset")]),
        (vec!["DLOCK.RELEASE", "k", "A"], vec![("k", "del")]),
        // a fresh FENCE grant creates and advances the counter
        (
            vec!["DLOCK.ACQUIRE", "k", "A", "60000", "FENCE"],
            vec![(fence, "set"), ("k", "hset"), ("k", "expire")],
        ),
        // refusals, errors, reads: nothing
        (vec!["DLOCK.ACQUIRE", "k", "B", "1000"], vec![]),
        (vec!["DLOCK.RELEASE", "k", "B"], vec![]),
        (vec!["DLOCK.RENEW", "k", "B", "1000"], vec![]),
        (vec!["DLOCK.RWLOCK", "k", "A", "READ", "1000"], vec![]),
        (vec!["DLOCK.INFO", "k"], vec![]),
        (vec!["DLOCK.RELEASE", "nothing", "A"], vec![]),
    ];
    for (args, expected) in steps {
        let _ = cmd(&mut c, &args);
        assert_eq!(ev.drain(&mut c), events(&expected), "{args:?}");
    }

    // A hand-off on release: the new holder's field, the old one's removal, the new lease.
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "W", "55000", "WAIT", "10000"], // a lease unlike A's
        1,
    );
    assert_eq!(release(&mut c, "k", "A"), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(1));
    let got = ev.drain(&mut c);
    for e in [("k", "hset"), ("k", "hdel"), ("k", "expire")] {
        assert!(got.contains(&(e.0.into(), e.1.into())), "{e:?} in {got:?}");
    }
    assert!(
        !got.iter().any(|(k, _)| k == fence),
        "a hand-off without FENCE leaves the counter: {got:?}"
    );
    assert!(!got.iter().any(|(_, e)| e == "del"), "no gap: {got:?}");

    // Read-write lock: fields of the mode and holder, then the lease.
    assert_eq!(rwlock(&mut c, "rw", "A", "READ", 60_000), Reply::Int(1));
    let got = ev.drain(&mut c);
    assert_eq!(
        got,
        events(&[("rw", "hset"), ("rw", "expire")]),
        "one HSET with every field"
    );
    assert_eq!(release(&mut c, "rw", "A"), Reply::Int(1));
    assert_eq!(ev.drain(&mut c), events(&[("rw", "del")]));
}

#[test]
fn own_events_do_not_wake_the_module() {
    // The module counts a lease that Redis expired on a lock it granted; had its own `hset`
    // and `expire` events reached its keyspace handler, it would have taken the key for
    // someone else's and not counted the expiry.
    let srv = Server::start();
    let mut c = srv.connection();
    let mut ev = Events::new(&srv, &mut c);
    let before = info_dlock(&mut c)["dlock_leases_expired"];
    assert_eq!(acquire(&mut c, "k", "A", 40), Reply::Int(1));
    assert_eq!(acquire(&mut c, "k", "A", 50), Reply::Int(2));
    assert_eq!(ev.drain(&mut c).len(), 4, "hset+expire twice");
    wait_for(Duration::from_secs(5), "the lease to be expired", || {
        (info_dlock(&mut c)["dlock_leases_expired"] == before + 1).then_some(())
    });
    assert_eq!(ev.drain(&mut c), events(&[("k", "expired")]));
}
