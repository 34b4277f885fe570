//! Redisson's own lock scripts served natively (`redisson native`, the default): the same
//! calls against a server without the module (the real Lua) and one with it give the same
//! replies, the same keyspace after every step, the same messages and keyspace events, and
//! `dlock_redisson_served` shows they were served natively. Also: a replica without the
//! module ends with the same data, a user whose ACL lets it script but not run
//! DLOCK.REDISSON still gets its locks (as Lua), `redisson lua` registers no filter, and other
//! scripts are untouched. The texts come from the capture of Redisson's jars (`make
//! redisson-scripts`); the project keeps only their SHA1s.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common;
use common::*;
use dlock_testutil::redisson::{captured_or_skip, CapturedScript};
use dlock_testutil::replication::{sync_replicas, ReplicaSet};

const TRY_LOCK: &str = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94";

/// The RLock scripts of one Redisson version, by role.
struct Version {
    name: String,
    try_lock: CapturedScript,
    unlock: CapturedScript,
    force_unlock: CapturedScript,
    renew: CapturedScript,
}

/// Every captured version that has the four RLock scripts.
fn versions(all: &[CapturedScript]) -> Vec<Version> {
    per_version(all, |v, role| {
        Some(Version {
            name: v.to_string(),
            try_lock: role("lock.tryLock")?,
            unlock: role("lock.unlock")?,
            force_unlock: role("lock.forceUnlock")?,
            renew: role("lock.renew").or_else(|| role("lock.renewBatch"))?,
        })
    })
}

/// `make(version, role)` for every captured version, oldest first (`role` finds that
/// version's script of a role); a version `make` answers `None` for is left out.
pub(crate) fn per_version<V>(
    all: &[CapturedScript],
    make: impl Fn(&str, &dyn Fn(&str) -> Option<CapturedScript>) -> Option<V>,
) -> Vec<V> {
    let mut names: Vec<&str> = all.iter().map(|s| s.redisson.as_str()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|v| {
            let role = |r: &str| all.iter().find(|s| s.redisson == v && s.role == r).cloned();
            make(v, &role)
        })
        .collect()
}

/// The newest captured version (`None` after a message when nothing was captured).
fn newest_version() -> Option<Version> {
    versions(&captured_or_skip("redisson_native")?).pop()
}

/// How the script is sent.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Send {
    Eval,
    EvalSha,
}

pub(crate) fn script(
    con: &mut Connection,
    how: Send,
    s: &CapturedScript,
    keys: &[&str],
    args: &[&str],
) -> Reply {
    let n = keys.len().to_string();
    let mut words: Vec<&str> = match how {
        Send::Eval => vec!["EVAL", &s.text],
        Send::EvalSha => vec!["EVALSHA", &s.sha1],
    };
    words.push(&n);
    words.extend(keys);
    words.extend(args);
    cmd(con, &words)
}

/// The forms of the unlock scripts, told apart by their keys and arguments.
fn unlock_call(v: &Version, key: &str, owner: &str, latch: &str) -> (Vec<String>, Vec<String>) {
    let channel = format!("redisson_lock__channel:{{{key}}}");
    let latch = format!("redisson_unlock_latch:{{{key}}}:{latch}");
    let s = |x: &str| x.to_string();
    match v.unlock.text.contains("KEYS[3]") {
        true => (
            vec![s(key), channel, latch],
            vec![s("0"), s("30000"), s(owner), s("PUBLISH"), s("13500")],
        ),
        false if v.unlock.text.contains("ARGV[4]") => (
            vec![s(key), channel],
            vec![s("0"), s("30000"), s(owner), s("PUBLISH")],
        ),
        false => (vec![s(key), channel], vec![s("0"), s("30000"), s(owner)]),
    }
}

/// One step of the sequence: a script call (keys, args) or a plain command.
enum Step {
    Script(&'static str, Vec<String>, Vec<String>),
    Plain(Vec<String>),
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The sequence on keys prefixed `p`: free, reentrant, busy (PTTL), renewals, unlocks by a
/// stranger and by the holder (decrement, latch, last), forceUnlock of nothing and of a hold,
/// and two calls the native path leaves to the Lua (a string at the key, a count that is not
/// an integer).
fn sequence(v: &Version, p: &str) -> Vec<Step> {
    let k = format!("{p}lock");
    let k2 = format!("{p}other");
    let renew = |owner: &str| {
        if v.renew.role == "lock.renewBatch" {
            Step::Script("renew", strs(&[&k, &k2]), strs(&["30000", owner, owner]))
        } else {
            Step::Script("renew", strs(&[&k]), strs(&["30000", owner]))
        }
    };
    let unlock = |key: &str, owner: &str, latch: &str| {
        let (keys, args) = unlock_call(v, key, owner, latch);
        Step::Script("unlock", keys, args)
    };
    let channel = format!("redisson_lock__channel:{{{k}}}");
    let force = |extra: bool| {
        let mut args = strs(&["0"]);
        if extra {
            args.push("PUBLISH".into());
        }
        Step::Script("force", vec![k.clone(), channel.clone()], args)
    };
    let force_arg = v.force_unlock.text.contains("ARGV[2]");
    vec![
        Step::Script("try", strs(&[&k]), strs(&["30000", "o:1"])),
        Step::Script("try", strs(&[&k]), strs(&["30000", "o:1"])),
        Step::Script("try", strs(&[&k]), strs(&["30000", "o:2"])),
        renew("o:1"),
        renew("o:2"),
        unlock(&k, "o:2", "a"),
        unlock(&k, "o:1", "b"),
        unlock(&k, "o:1", "b"),
        unlock(&k, "o:1", "c"),
        force(force_arg),
        Step::Script("try", strs(&[&k]), strs(&["30000", "o:1"])),
        force(force_arg),
        Step::Plain(strs(&["SET", &format!("{p}string"), "x"])),
        Step::Script(
            "try",
            strs(&[&format!("{p}string")]),
            strs(&["30000", "o:1"]),
        ),
        Step::Plain(strs(&["HSET", &format!("{p}odd"), "o:1", "abc"])),
        unlock(&format!("{p}odd"), "o:1", "d"),
    ]
}

/// Every key with its type, value and PTTL.
fn keyspace(con: &mut Connection) -> BTreeMap<String, (String, String, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.into_iter()
        .map(|k| {
            let t: String = redis::cmd("TYPE").arg(&k).query(con).unwrap();
            let value = match t.as_str() {
                "hash" => format!("{:?}", hgetall(con, &k)),
                "string" => redis::cmd("GET").arg(&k).query::<String>(con).unwrap(),
                _ => String::new(),
            };
            let ttl = pttl(con, &k);
            (k, (t, value, ttl))
        })
        .collect()
}

/// Two keyspaces alike: the same keys, types and values, and TTLs within a second of each
/// other (the two servers' clocks run on while the test reads them).
#[track_caller]
fn assert_same_keyspace(
    a: &BTreeMap<String, (String, String, i64)>,
    b: &BTreeMap<String, (String, String, i64)>,
    what: &str,
) {
    let shape = |m: &BTreeMap<String, (String, String, i64)>| {
        m.iter()
            .map(|(k, (t, v, ttl))| (k.clone(), t.clone(), v.clone(), (*ttl).min(0)))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(a), shape(b), "{what}");
    for (k, (_, _, ttl)) in a {
        assert!(
            (ttl - b[k].2).abs() < 1000,
            "{what}: PTTL of {k}: {ttl} vs {}",
            b[k].2
        );
    }
}

/// Replies compared as the scripts give them: PTTLs within a second, errors by their code.
fn same_reply(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        (Reply::Int(x), Reply::Int(y)) if *x > 100 && *y > 100 => (x - y).abs() < 1000,
        (Reply::Err(x), Reply::Err(y)) => x.split(' ').next() == y.split(' ').next(),
        _ => a == b,
    }
}

/// Everything a `PSUBSCRIBE *` connection received, until it has been quiet for 300 ms.
fn drain(ps: &mut redis::PubSub<'static>) -> Vec<(String, String)> {
    let mut out = vec![];
    while let Ok(m) = ps.get_message() {
        out.push((
            m.get_channel_name().to_string(),
            m.get_payload::<String>().unwrap_or_default(),
        ));
    }
    out
}

fn listener(srv: &Server) -> redis::PubSub<'static> {
    let mut c = srv.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEA")
        .query(&mut c)
        .unwrap();
    let con: &'static mut Connection = Box::leak(Box::new(srv.connection()));
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut ps = con.as_pubsub();
    ps.psubscribe("*").unwrap();
    ps
}

fn run_step(con: &mut Connection, v: &Version, how: Send, step: &Step) -> Reply {
    match step {
        Step::Plain(words) => {
            let w: Vec<&str> = words.iter().map(String::as_str).collect();
            cmd(con, &w)
        }
        Step::Script(which, keys, args) => {
            let s = match *which {
                "try" => &v.try_lock,
                "unlock" => &v.unlock,
                "force" => &v.force_unlock,
                _ => &v.renew,
            };
            let k: Vec<&str> = keys.iter().map(String::as_str).collect();
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            script(con, how, s, &k, &a)
        }
    }
}

fn load_all(con: &mut Connection, v: &Version) {
    load(con, &[&v.try_lock, &v.unlock, &v.force_unlock, &v.renew]);
}

/// `SCRIPT LOAD` of each script (its SHA1 checked against the capture's).
pub(crate) fn load(con: &mut Connection, scripts: &[&CapturedScript]) {
    for s in scripts {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&s.text)
            .query(con)
            .unwrap();
        assert_eq!(sha, s.sha1, "{}: the capture's SHA1", s.role);
    }
}

/// A server without the module (the real Lua) and one with it, each heard by a `PSUBSCRIBE *`.
pub(crate) struct Twins {
    _servers: (Server, Server),
    pub l: Connection,
    pub n: Connection,
    lps: redis::PubSub<'static>,
    nps: redis::PubSub<'static>,
}

impl Twins {
    pub fn start() -> Twins {
        let (lua, native) = (Server::builder().without_module().start(), Server::start());
        Twins {
            l: lua.connection(),
            n: native.connection(),
            lps: listener(&lua),
            nps: listener(&native),
            _servers: (lua, native),
        }
    }

    /// The twins and the captured versions `versions` picks, for test `test` (`None`: no
    /// capture, the test skipped); `what` names the scripts a version must have.
    pub fn for_captured<V>(
        test: &str,
        what: &str,
        versions: impl Fn(&[CapturedScript]) -> Vec<V>,
    ) -> Option<(Twins, Vec<V>)> {
        let versions = versions(&captured_or_skip(test)?);
        assert!(!versions.is_empty(), "no captured version has the {what}");
        Some((Twins::start(), versions))
    }

    /// One step on both: the same reply (as [`same_reply`]), then the same keyspace.
    #[track_caller]
    pub fn step(&mut self, what: &str, run: impl Fn(&mut Connection) -> Reply) {
        let (a, b) = (run(&mut self.l), run(&mut self.n));
        assert!(same_reply(&a, &b), "{what}: Lua {a:?}, native {b:?}");
        let after = format!("{what}: keyspace after it");
        assert_same_keyspace(&keyspace(&mut self.l), &keyspace(&mut self.n), &after);
    }

    /// `body(twins, version, how, key prefix)` for every version, sent both ways, after
    /// loading the version's scripts on both servers.
    pub fn each<V>(
        &mut self,
        versions: &[V],
        load: impl Fn(&mut Connection, &V),
        name: impl Fn(&V) -> &str,
        mut body: impl FnMut(&mut Twins, &V, Send, &str),
    ) {
        for v in versions {
            load(&mut self.l, v);
            load(&mut self.n, v);
            for how in [Send::EvalSha, Send::Eval] {
                let way = if how == Send::Eval { "eval" } else { "sha" };
                body(self, v, how, &format!("{}:{way}:", name(v)));
            }
        }
    }

    /// The same messages and keyspace events on both since the last look.
    #[track_caller]
    pub fn same_messages(&mut self, what: &str) {
        let heard = (drain(&mut self.lps), drain(&mut self.nps));
        assert_eq!(heard.0, heard.1, "{what}: messages and keyspace events");
    }
}

#[test]
fn every_rlock_script_is_served_as_the_lua_answers() {
    let Some((mut t, versions)) = Twins::for_captured("redisson_native", "RLock scripts", versions)
    else {
        return;
    };
    t.each(
        &versions,
        load_all,
        |v| &v.name,
        |t, v, how, p| {
            let served_before = info_dlock(&mut t.n)["dlock_redisson_served"];
            let steps = sequence(v, p);
            let mut scripts = 0;
            for (i, step) in steps.iter().enumerate() {
                t.step(&format!("{p} step {i}"), |c| run_step(c, v, how, step));
                scripts += matches!(step, Step::Script(..)) as i64;
            }
            // The two calls left to the Lua (a string at the key, a count not an integer).
            let served = info_dlock(&mut t.n)["dlock_redisson_served"] - served_before;
            assert_eq!(served, scripts - 2, "{p}: served natively");
            t.same_messages(p);
        },
    );
    let counters = info_dlock(&mut t.n);
    assert!(counters["dlock_redisson_lua"] >= 2 * versions.len() as i64 * 2);
}

#[test]
fn a_replica_without_the_module_ends_with_the_same_data() {
    let Some(v) = newest_version() else {
        return;
    };
    let set = ReplicaSet::plain_replicas(1);
    let (mut p, mut r) = set.connections();
    load_all(&mut p, &v);
    for how in [Send::EvalSha, Send::Eval] {
        for step in sequence(&v, if how == Send::Eval { "e:" } else { "s:" }) {
            run_step(&mut p, &v, how, &step);
        }
    }
    replica_agrees(&mut p, &mut r);
}

/// After calls served natively on `p`: its replica without the module, `r`, holds the same
/// keyspace.
pub(crate) fn replica_agrees(p: &mut Connection, r: &mut Connection) {
    assert!(info_dlock(p)["dlock_redisson_served"] > 0);
    sync_replicas(p);
    assert_same_keyspace(&keyspace(r), &keyspace(p), "the replica's keyspace");
}

#[test]
fn an_aof_replayed_without_the_module_ends_with_the_same_data() {
    let Some(v) = newest_version() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut srv = Server::builder().dir(dir.path()).aof().start();
    let mut c = srv.connection();
    load_all(&mut c, &v);
    for how in [Send::EvalSha, Send::Eval] {
        for step in sequence(&v, if how == Send::Eval { "e:" } else { "s:" }) {
            run_step(&mut c, &v, how, &step);
        }
    }
    assert!(info_dlock(&mut c)["dlock_redisson_served"] > 0);
    let before = keyspace(&mut c);
    srv.shutdown();
    let plain = Server::builder()
        .without_module()
        .dir(dir.path())
        .aof()
        .start();
    let after = keyspace(&mut plain.connection());
    assert_same_keyspace(&after, &before, "the keyspace replayed from the AOF");
}

/// Redis 7.0 gives module commands no ACL category: a user allowed to script (and the
/// commands inside the scripts) but not DLOCK.REDISSON must not get NOPERM. Its scripts run
/// as Lua (counted in `dlock_redisson_lua`) until it may run DLOCK.REDISSON too.
#[test]
fn a_user_who_may_script_but_not_the_module_command_gets_the_lua() {
    let Some(v) = newest_version() else {
        return;
    };
    let srv = Server::start();
    let mut admin = srv.connection();
    load_all(&mut admin, &v);
    let setuser = |c: &mut Connection, rules: &[&str]| {
        let mut w = vec!["ACL", "SETUSER", "app"];
        w.extend(rules);
        assert_eq!(cmd(c, &w), Reply::Status("OK".into()));
    };
    setuser(
        &mut admin,
        &[
            "on",
            ">pw",
            "~*",
            "&*",
            "+@scripting",
            "+@hash",
            "+@keyspace",
            "+@string",
            "+@pubsub",
        ],
    );
    let mut app = srv.connection();
    assert_eq!(
        cmd(&mut app, &["AUTH", "app", "pw"]),
        Reply::Status("OK".into())
    );
    let served = |c: &mut Connection| info_dlock(c)["dlock_redisson_served"];
    let before = served(&mut admin);
    let key = "acl:lock";
    // The same reentrant tryLock each time: the owner's count grows, the reply stays nil.
    let try_lock =
        |app: &mut Connection| script(app, Send::EvalSha, &v.try_lock, &[key], &["30000", "o:1"]);
    assert_eq!(try_lock(&mut app), Reply::Nil, "the lock, never NOPERM");
    // Where module commands have ACL categories (Redis 7.2+, Valkey), `+@scripting` covers
    // DLOCK.REDISSON and the script is served natively; on 7.0 it runs as Lua for everyone.
    let dryrun = cmd(
        &mut admin,
        &["ACL", "DRYRUN", "app", "dlock.redisson", "x", "0"],
    );
    if dryrun == Reply::Status("OK".into()) {
        assert_eq!(served(&mut admin), before + 1, "served natively");
        return;
    }
    assert_eq!(served(&mut admin), before, "not served natively for anyone");
    assert!(info_dlock(&mut admin)["dlock_redisson_lua"] > 0);
    // Allowed the module command too: served natively again once the module has looked.
    setuser(&mut admin, &["+dlock.redisson"]);
    wait_for(Duration::from_secs(5), "native serving back", || {
        assert_eq!(try_lock(&mut app), Reply::Nil);
        (served(&mut admin) > before).then_some(())
    });
    assert!(hgetall(&mut admin, key)["o:1"].parse::<i64>().unwrap() >= 2);
}

#[test]
fn with_redisson_lua_no_filter_runs_and_other_scripts_are_untouched() {
    let srv = Server::builder().module_args(["redisson", "lua"]).start();
    let mut c = srv.connection();
    // Not loaded, not served: Redis's own NOSCRIPT.
    let r = cmd(&mut c, &["EVALSHA", TRY_LOCK, "1", "k", "30000", "o:1"]);
    assert_err(&r, "NOSCRIPT");
    let counters = info_dlock(&mut c);
    assert_eq!(
        (
            counters["dlock_redisson_served"],
            counters["dlock_redisson_lua"]
        ),
        (0, 0)
    );
    let native = Server::start();
    let mut n = native.connection();
    // Served natively even when not loaded (the digest names the script).
    assert_eq!(
        cmd(&mut n, &["EVALSHA", TRY_LOCK, "1", "k", "30000", "o:1"]),
        Reply::Nil
    );
    assert_eq!(info_dlock(&mut n)["dlock_redisson_served"], 1);
    // Another script, a script-like command and the filter's other names run untouched.
    assert_eq!(cmd(&mut n, &["EVAL", "return 7", "0"]), Reply::Int(7));
    assert_err(&cmd(&mut n, &["EVALSHA", &"0".repeat(40), "0"]), "NOSCRIPT");
    assert_eq!(cmd(&mut n, &["EXISTS", "k"]), Reply::Int(1));
    assert_eq!(info_dlock(&mut n)["dlock_redisson_served"], 1);
    // Inside MULTI, queued as the module command and served at EXEC.
    assert_eq!(cmd(&mut n, &["MULTI"]), Reply::Status("OK".into()));
    cmd(&mut n, &["EVALSHA", TRY_LOCK, "1", "k", "30000", "o:2"]);
    let exec = cmd(&mut n, &["EXEC"]).arr();
    assert!(matches!(exec[0], Reply::Int(t) if t > 29_000), "{exec:?}");
    assert_eq!(info_dlock(&mut n)["dlock_redisson_served"], 2);
    // COMMAND GETKEYS sees EVALSHA's keys in the module command.
    let keys = cmd(
        &mut n,
        &[
            "COMMAND",
            "GETKEYS",
            "dlock.redisson",
            TRY_LOCK,
            "2",
            "a",
            "b",
            "x",
        ],
    );
    assert_eq!(
        keys,
        Reply::Arr(vec![Reply::Bulk("a".into()), Reply::Bulk("b".into())])
    );
}

/// In a cluster the renamed call is routed as the EVALSHA it was: MOVED to the slot's owner,
/// CROSSSLOT for keys of several slots, served on the owner (the key positions are the same;
/// Redis 8.2 and Valkey 9 compute the slot before the filter runs).
#[test]
fn a_cluster_routes_the_script_as_its_evalsha() {
    const RENEW_BATCH: &str = "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635";
    let cl = dlock_testutil::Cluster::start(3);
    let key = cl.key_on(1, "r");
    let mut c0 = cl.primaries()[0].connection();
    let moved = cmd(&mut c0, &["EVALSHA", TRY_LOCK, "1", &key, "30000", "o:1"]);
    let want = format!(
        "MOVED {} 127.0.0.1:{}",
        key_slot(key.as_bytes()),
        cl.primaries()[1].port()
    );
    assert_eq!(moved, Reply::Err(want));
    let other = cl.key_on(2, "s");
    let mut c1 = cl.primaries()[1].connection();
    let cross = cmd(
        &mut c1,
        &[
            "EVALSHA",
            RENEW_BATCH,
            "2",
            &key,
            &other,
            "30000",
            "o:1",
            "o:1",
        ],
    );
    assert_err(&cross, "CROSSSLOT");
    assert_eq!(
        cmd(&mut c1, &["EVALSHA", TRY_LOCK, "1", &key, "30000", "o:1"]),
        Reply::Nil
    );
    let renewed = cmd(
        &mut c1,
        &["EVALSHA", RENEW_BATCH, "1", &key, "30000", "o:1"],
    );
    assert_eq!(renewed, Reply::Arr(vec![Reply::Int(1)]));
    assert_eq!(info_dlock(&mut c1)["dlock_redisson_served"], 2);
    assert_eq!(info_dlock(&mut c0)["dlock_redisson_served"], 0);
}
