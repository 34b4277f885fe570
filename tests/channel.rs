//! The Redisson unlock channel: `0` published on the last RELEASE when no waiter takes over;
//! prefix and `publish no` module arguments; channel naming with braces.

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
