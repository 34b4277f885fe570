//! The Redisson unlock channel: `0` published on the last RELEASE when no waiter takes over;
//! prefix and `publish no` module arguments; channel naming with braces; `publish auto` (the
//! default) holding the message back while the server has no subscriber, and sending it late
//! to a subscriber that came meanwhile.

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::common;
use common::*;

/// A subscriber on one channel. `drain(pub)` publishes a sentinel from `pub` and returns
/// every message received before it: no sleeps needed to prove that nothing was published.
struct Sub {
    ps: redis::PubSub<'static>,
    chan: String,
}

impl Sub {
    fn new(srv: &Server, chan: &str) -> Sub {
        Sub {
            ps: subscriber(srv, chan),
            chan: chan.to_string(),
        }
    }
    fn drain(&mut self, publisher: &mut Connection) -> Vec<String> {
        let n: i64 = redis::cmd("PUBLISH")
            .arg(&self.chan)
            .arg("sentinel")
            .query(publisher)
            .unwrap();
        assert_eq!(n, 1, "subscriber present");
        let mut out = vec![];
        let ps = &mut self.ps;
        loop {
            let m = ps.get_message().expect("message before the sentinel");
            assert_eq!(m.get_channel_name(), self.chan);
            let p: String = m.get_payload().unwrap();
            if p == "sentinel" {
                return out;
            }
            out.push(p);
        }
    }
}

#[test]
fn last_release_publishes_zero() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut sub = Sub::new(&srv, &channel("k"));
    assert_eq!(channel("k"), "redisson_lock__channel:{k}");
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(2));
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(0));
    assert_eq!(
        sub.drain(&mut c),
        Vec::<String>::new(),
        "not on a non-final release"
    );
    assert_eq!(release(&mut c, "k", "x"), Reply::Nil);
    assert_eq!(
        sub.drain(&mut c),
        Vec::<String>::new(),
        "not on a null release"
    );
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(1));
    assert_eq!(sub.drain(&mut c), vec!["0"], "last release publishes 0");
}

#[test]
fn no_publish_when_a_waiter_takes_over_or_on_del_or_expiry() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut sub = Sub::new(&srv, &channel("k"));
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "60000", "WAIT", "10000"],
        1,
    );
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(1));
    assert_eq!(sub.drain(&mut c), Vec::<String>::new(), "waiter took over");
    let _: i64 = redis::cmd("DEL").arg("k").query(&mut c).unwrap();
    assert_eq!(sub.drain(&mut c), Vec::<String>::new(), "not on DEL");
    assert_eq!(acquire(&mut c, "k", "h", 50), Reply::Int(1));
    wait_for(5 * SEC, "expiry", || (!exists(&mut c, "k")).then_some(()));
    assert_eq!(sub.drain(&mut c), Vec::<String>::new(), "not on expiry");
    assert_eq!(acquire(&mut c, "k", "h", 5000), Reply::Int(1));
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(1));
    assert_eq!(sub.drain(&mut c), vec!["0"]);
}

#[test]
fn channel_name_with_braces() {
    let srv = Server::start();
    let mut c = srv.connection();
    let k = "user:{42}:lock";
    assert_eq!(channel(k), "redisson_lock__channel:user:{42}:lock");
    let mut sub = Sub::new(&srv, &channel(k));
    let mut wrong = Sub::new(&srv, &format!("redisson_lock__channel:{{{k}}}"));
    assert_eq!(acquire(&mut c, k, "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, k, "o"), Reply::Int(1));
    assert_eq!(sub.drain(&mut c), vec!["0"]);
    assert_eq!(wrong.drain(&mut c), Vec::<String>::new());
}

#[test]
fn channel_name_of_a_long_key() {
    // Longer than the module's stack buffer for names: put together on the heap instead.
    let srv = Server::start();
    let mut c = srv.connection();
    let k = "k".repeat(300);
    let mut sub = Sub::new(&srv, &channel(&k));
    assert_eq!(acquire(&mut c, &k, "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, &k, "o"), Reply::Int(1));
    assert_eq!(sub.drain(&mut c), vec!["0"]);
}

#[test]
fn channel_prefix_module_argument() {
    let srv = Server::builder()
        .module_args(["channel-prefix", "my_unlock"])
        .start();
    let mut c = srv.connection();
    let mut sub = Sub::new(&srv, &channel_with("my_unlock", "k"));
    let mut default = Sub::new(&srv, &channel("k"));
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(1));
    assert_eq!(sub.drain(&mut c), vec!["0"]);
    assert_eq!(default.drain(&mut c), Vec::<String>::new());
}

#[test]
fn publish_no_module_argument() {
    let srv = Server::builder().module_args(["publish", "no"]).start();
    let mut c = srv.connection();
    let mut sub = Sub::new(&srv, &channel("k"));
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(1));
    assert_eq!(sub.drain(&mut c), Vec::<String>::new(), "publish no");
    assert!(!exists(&mut c, "k"), "the release itself still happened");
}

fn held_back_and_late(c: &mut Connection) -> (i64, i64) {
    let info = info_dlock(c);
    (
        info["dlock_unlock_messages_held_back"],
        info["dlock_unlock_messages_sent_late"],
    )
}

#[test]
fn publish_auto_holds_the_message_back_while_nobody_subscribes() {
    let srv = Server::start(); // `publish auto` is the default
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(1));
    assert_eq!(held_back_and_late(&mut c), (1, 0), "nobody subscribed");
    // A subscriber to another channel cannot hear it.
    let _news = subscriber(&srv, "news");
    // Releases over 300 ms: the timer looks at least once (100 ms after a message is held
    // back) and finds nobody who can hear. A name each (one name is held back once per look).
    let since = std::time::Instant::now();
    let mut before = 1;
    for i in 0.. {
        if since.elapsed() >= ms(300) {
            break;
        }
        let k = format!("k{i}");
        assert_eq!(acquire(&mut c, &k, "o", 10_000), Reply::Int(1));
        assert_eq!(release(&mut c, &k, "o"), Reply::Int(1));
        let (held, late) = held_back_and_late(&mut c);
        assert_eq!((held, late), (before + 1, 0), "nobody under the prefix");
        before = held;
        std::thread::sleep(ms(20));
    }
    // A subscriber to anything (here a pattern) makes the next reading publish at once.
    let pattern: &'static mut Connection = Box::leak(Box::new(srv.connection()));
    pattern
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut ps = pattern.as_pubsub();
    ps.psubscribe("redisson_lock__channel:*").unwrap();
    // Published at once if the 100 ms between readings have passed, else held back and sent
    // late by the next reading: either way the subscriber hears it.
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(1));
    // A loop key's message still held back may come first, sent late by the same look.
    loop {
        let m = ps.get_message().expect("the unlock message");
        assert_eq!(m.get_payload::<String>().unwrap(), "0");
        if m.get_channel_name() == channel("k") {
            break;
        }
        assert!(m
            .get_channel_name()
            .starts_with(&channel("k").replace('}', "")));
    }
}

#[test]
fn publish_yes_always_publishes() {
    let srv = Server::builder().module_args(["publish", "yes"]).start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, "k", "o"), Reply::Int(1));
    assert_eq!(held_back_and_late(&mut c), (0, 0), "publish yes");
}

/// One RESP3 connection that sends its commands in one pipeline (run by the server in one
/// go, well within the 100 ms between two readings) and keeps all it reads.
struct Pipelined {
    s: TcpStream,
    got: Vec<u8>,
}

impl Pipelined {
    fn send(srv: &Server, cmds: &[String]) -> Pipelined {
        let mut s = TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
        s.set_read_timeout(Some(5 * SEC)).unwrap();
        let mut pipeline = String::from("HELLO 3\r\n");
        for cmd in cmds {
            pipeline.push_str(cmd);
            pipeline.push_str("\r\n");
        }
        s.write_all(pipeline.as_bytes()).unwrap();
        Pipelined { s, got: Vec::new() }
    }

    /// Reads until `want` has come (5 s at most).
    fn read_until(&mut self, want: &str) {
        let mut buf = [0u8; 4096];
        while !self.text().contains(want) {
            let n = self.s.read(&mut buf).expect("the message within 5 s");
            assert!(n > 0, "connection closed; got {:?}", self.text());
            self.got.extend_from_slice(&buf[..n]);
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.got).into_owned()
    }
}

/// A message on `chan` as a RESP3 push: `>3 message <chan> <payload>`.
fn pushed(chan: &str, payload: &str) -> String {
    format!(
        "$7\r\nmessage\r\n${}\r\n{chan}\r\n${}\r\n{payload}\r\n",
        chan.len(),
        payload.len()
    )
}

/// The one race of `publish auto`: a subscriber that comes after the server found none and
/// before the lock it waits for is released. One RESP3 connection sends, in one pipeline
/// (run by the server in one go, well within the 100 ms between two readings): a release
/// that finds no subscriber, the SUBSCRIBE, and the release of the subscribed lock. That
/// lock's message is held back, then sent late by the next reading.
#[test]
fn a_subscriber_that_comes_between_two_readings_gets_the_message_late() {
    let srv = Server::start();
    let mut c = srv.connection();
    let chan = channel("late");
    let sent = std::time::Instant::now();
    let mut p = Pipelined::send(
        &srv,
        &[
            "DLOCK.ACQUIRE first o 10000".to_string(),
            "DLOCK.RELEASE first o".into(),
            format!("SUBSCRIBE {chan}"),
            "DLOCK.ACQUIRE late o 10000".into(),
            "DLOCK.RELEASE late o".into(),
        ],
    );
    p.read_until(&pushed(&chan, "0"));
    let took = sent.elapsed();
    assert_eq!(
        held_back_and_late(&mut c),
        (2, 2),
        "both held back, both sent late"
    );
    assert!(
        took < 2 * SEC,
        "sent late by the next reading: took {took:?}"
    );
}

/// A lock freed twice before the look (here: released, FLUSHALL, taken and released again)
/// sends one message to a subscriber that came meanwhile, not one per freeing: one `0` wakes
/// every waiter, and the first freeing is one the lock has since gone past.
#[test]
fn a_name_freed_twice_before_the_look_is_sent_once() {
    let srv = Server::start();
    let mut c = srv.connection();
    let chan = channel("res");
    let mut p = Pipelined::send(
        &srv,
        &[
            "DLOCK.ACQUIRE res o 10000".to_string(),
            "DLOCK.RELEASE res o".into(),
            "FLUSHALL".into(),
            "DLOCK.ACQUIRE res o 10000".into(),
            "DLOCK.RELEASE res o".into(),
            format!("SUBSCRIBE {chan}"),
        ],
    );
    p.read_until(&pushed(&chan, "0"));
    // Whatever the look sent came in one go, before this sentinel.
    let n: i64 = redis::cmd("PUBLISH")
        .arg(&chan)
        .arg("sentinel")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1, "subscriber present");
    p.read_until(&pushed(&chan, "sentinel"));
    let text = p.text();
    assert_eq!(
        text.matches(&pushed(&chan, "0")).count(),
        1,
        "one message: {text:?}"
    );
    assert_eq!(
        held_back_and_late(&mut c),
        (1, 1),
        "held back once, sent once"
    );
}

/// In cluster mode a PUBLISH reaches every node's subscribers: `publish auto` cannot count
/// them on the node of the lock, and always publishes.
#[test]
fn in_cluster_mode_the_message_reaches_another_nodes_subscriber() {
    let cl = dlock_testutil::Cluster::start(2);
    let key = cl.key_on(0, "chan");
    let mut ps = subscriber(&cl.nodes[1], &channel(&key));
    let mut c = cl.nodes[0].connection();
    assert_eq!(acquire(&mut c, &key, "o", 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, &key, "o"), Reply::Int(1));
    let m = ps
        .get_message()
        .expect("the unlock message on the other node");
    assert_eq!(m.get_payload::<String>().unwrap(), "0");
    assert_eq!(held_back_and_late(&mut c), (0, 0), "never held back");
}
