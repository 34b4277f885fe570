//! `RReadWriteLock`'s scripts served natively: every role of every captured Redisson version
//! (read and write tryLock, unlock, forceUnlock, the read lock's renewal, single or batched)
//! against a server without the module (the real Lua) and one with it: the same replies, the
//! same keyspace after every step (per-hold timeout keys and latches included), the same
//! messages and keyspace events, each call counted in `dlock_redisson_served`. A replica
//! without the module ends with the same data. And a Redisson reader is refused a key where
//! `DLOCK.RWLOCK` holds a lock (the Lua would join it).

use crate::common;
use crate::redisson_native::{load, per_version, replica_agrees, script, Send, Twins};
use common::*;
use dlock_testutil::redisson::{captured_or_skip, CapturedScript};
use dlock_testutil::replication::ReplicaSet;

const READ_TRY_LOCK: &str = "95553a6ff11176c18e71344e89d116b06fd6f753";

/// The read-write lock scripts of one Redisson version.
struct Version {
    name: String,
    read: CapturedScript,
    write: CapturedScript,
    read_unlock: CapturedScript,
    write_unlock: CapturedScript,
    read_force: CapturedScript,
    write_force: CapturedScript,
    /// `rwlock.read.renew` (3.2x) or `rwlock.renewBatch` (3.44+).
    renew: CapturedScript,
}

fn versions(all: &[CapturedScript]) -> Vec<Version> {
    per_version(all, |v, role| {
        Some(Version {
            name: v.to_string(),
            read: role("rwlock.read.tryLock")?,
            write: role("rwlock.write.tryLock")?,
            read_unlock: role("rwlock.read.unlock")?,
            write_unlock: role("rwlock.write.unlock")?,
            read_force: role("rwlock.read.forceUnlock")?,
            write_force: role("rwlock.write.forceUnlock")?,
            renew: role("rwlock.read.renew").or_else(|| role("rwlock.renewBatch"))?,
        })
    })
}

/// One script call: the script, its keys and arguments.
struct Call<'v>(&'v CapturedScript, Vec<String>, Vec<String>);

/// The calls Redisson makes for a read-write lock `k`, in each version's shapes.
struct Calls<'v> {
    v: &'v Version,
    k: String,
}

impl<'v> Calls<'v> {
    fn braced(&self) -> String {
        format!("{{{}}}", self.k)
    }
    fn channel(&self) -> String {
        format!("redisson_rwlock:{}", self.braced())
    }
    fn read(&self, owner: &str) -> Call<'v> {
        let timeout = format!("{}:{owner}:rwlock_timeout", self.braced());
        let args = [10_000.to_string(), owner.into(), format!("{owner}:write")];
        Call(&self.v.read, vec![self.k.clone(), timeout], args.into())
    }
    fn write(&self, owner: &str) -> Call<'v> {
        let args = vec!["10000".into(), format!("{owner}:write")];
        Call(&self.v.write, vec![self.k.clone()], args)
    }
    /// The publish command and the latch, as far as the text takes them.
    fn tail(
        &self,
        text: &str,
        publish_at: &str,
        keys: &mut Vec<String>,
        args: &mut Vec<String>,
        latch: &str,
    ) {
        if text.contains(publish_at) {
            args.push("PUBLISH".into());
        }
        if text.contains("redisson_unlock_latch") || text.contains("'px'") {
            keys.push(format!("redisson_unlock_latch:{}:{latch}", self.braced()));
            args.push("13500".into());
        }
    }
    fn read_unlock(&self, owner: &str, latch: &str) -> Call<'v> {
        let timeout = format!("{}:{owner}:rwlock_timeout", self.braced());
        let mut keys = vec![self.k.clone(), self.channel(), timeout, self.braced()];
        let mut args = vec!["0".into(), owner.into()];
        self.tail(
            &self.v.read_unlock.text,
            "ARGV[3]",
            &mut keys,
            &mut args,
            latch,
        );
        Call(&self.v.read_unlock, keys, args)
    }
    fn write_unlock(&self, owner: &str, latch: &str) -> Call<'v> {
        let mut keys = vec![self.k.clone(), self.channel()];
        let mut args = vec!["1".into(), "10000".into(), format!("{owner}:write")];
        self.tail(
            &self.v.write_unlock.text,
            "ARGV[4]",
            &mut keys,
            &mut args,
            latch,
        );
        Call(&self.v.write_unlock, keys, args)
    }
    fn force(&self, write: bool) -> Call<'v> {
        let s = if write {
            &self.v.write_force
        } else {
            &self.v.read_force
        };
        let mut args = vec![if write { "1" } else { "0" }.to_string()];
        if s.text.contains("ARGV[2]") {
            args.push("PUBLISH".into());
        }
        Call(s, vec![self.k.clone(), self.channel()], args)
    }
    fn renew(&self, owner: &str) -> Call<'v> {
        let mut args = vec!["10000".into()];
        if self.v.renew.text.contains("lockNamesCount") {
            args.push("1".into());
        }
        args.push(owner.into());
        Call(&self.v.renew, vec![self.k.clone(), self.braced()], args)
    }
}

/// Free, shared and reentrant reads, a writer kept out, renewals (two readers: the timeout
/// keys renewed in the hash's order), unlocks down to the last (latches), a write lock taken,
/// reentered, read by its own writer, downgraded to that read hold by its last write unlock,
/// and both forceUnlocks.
fn sequence<'v>(v: &'v Version, p: &str) -> Vec<Call<'v>> {
    let c = Calls {
        v,
        k: format!("{p}rw"),
    };
    vec![
        c.read("u:1"),
        c.read("u:1"),
        c.read("u:2"),
        c.write("u:3"),
        c.read_unlock("u:1", "a"),
        c.renew("u:1"),
        c.renew("u:3"),
        c.read_unlock("u:2", "b"),
        c.read_unlock("u:2", "b"),
        c.read_unlock("u:9", "c"),
        c.read_unlock("u:1", "d"),
        c.read_unlock("u:1", "e"),
        c.write_unlock("u:3", "f"),
        c.write("u:3"),
        c.write("u:3"),
        c.read("u:3"),
        c.read("u:1"),
        c.write("u:1"),
        c.write_unlock("u:3", "g"),
        c.write_unlock("u:3", "h"),
        c.force(true),
        c.read_unlock("u:3", "i"),
        c.force(false),
        c.write("u:3"),
        c.force(false),
        c.force(true),
        c.read("u:1"),
        c.force(true),
        c.force(false),
    ]
}

fn call(con: &mut Connection, how: Send, Call(s, keys, args): &Call) -> Reply {
    let k: Vec<&str> = keys.iter().map(String::as_str).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    script(con, how, s, &k, &a)
}

fn load_all(con: &mut Connection, v: &Version) {
    let (r, w) = (&v.read, &v.write);
    load(
        con,
        &[
            r,
            w,
            &v.read_unlock,
            &v.write_unlock,
            &v.read_force,
            &v.write_force,
            &v.renew,
        ],
    );
}

#[test]
fn every_rwlock_script_is_served_as_the_lua_answers() {
    let Some((mut t, versions)) =
        Twins::for_captured("redisson_rwlock", "rwlock scripts", versions)
    else {
        return;
    };
    t.each(
        &versions,
        load_all,
        |v| &v.name,
        |t, v, how, p| {
            let before = info_dlock(&mut t.n);
            let steps = sequence(v, p);
            for (i, step) in steps.iter().enumerate() {
                t.step(&format!("{p} step {i} ({})", step.0.role), |c| {
                    call(c, how, step)
                });
            }
            let after = info_dlock(&mut t.n);
            let served = after["dlock_redisson_served"] - before["dlock_redisson_served"];
            let as_lua = after["dlock_redisson_lua"] - before["dlock_redisson_lua"];
            assert_eq!(
                (served, as_lua),
                (steps.len() as i64, 0),
                "{p}: served natively"
            );
            t.same_messages(p);
        },
    );
}

#[test]
fn a_replica_without_the_module_ends_with_the_same_data() {
    let Some(all) = captured_or_skip("redisson_rwlock") else {
        return;
    };
    let Some(v) = versions(&all).pop() else {
        panic!("no captured version has the rwlock scripts");
    };
    let set = ReplicaSet::plain_replicas(1);
    let (mut p, mut r) = set.connections();
    load_all(&mut p, &v);
    for how in [Send::EvalSha, Send::Eval] {
        let prefix = if how == Send::Eval { "e:" } else { "s:" };
        for step in sequence(&v, prefix) {
            call(&mut p, how, &step);
        }
        // And a lock left held: two readers, one reentrant, with their timeout keys.
        for step in &sequence(&v, &format!("{prefix}held:"))[..3] {
            call(&mut p, how, step);
        }
    }
    replica_agrees(&mut p, &mut r);
}

/// `RReadWriteLock`'s read tryLock on a key where `DLOCK.RWLOCK` holds READ: its Lua takes
/// `mode=read` for its own and joins, leaving a hash in neither layout (Redisson's read unlock
/// and renewal then loop over dlock's `lease:` deadline as a hold count: BUSY). Served
/// natively it answers as for a lock held by others (the key's PTTL) and changes nothing.
/// With `redisson lua` the hazard remains: the grant.
#[test]
fn a_redisson_reader_is_refused_a_dlock_read_lock() {
    let Some(all) = captured_or_skip("redisson_rwlock") else {
        return;
    };
    let read = all
        .iter()
        .find(|s| s.sha1 == READ_TRY_LOCK)
        .expect("the capture has the read tryLock")
        .clone();
    let owner = "e130475f-3508-479e-a9f3-849ca061336a:1";
    let write = format!("{owner}:write");
    let read_lock = |c: &mut Connection, how: Send, key: &str| {
        let timeout = format!("{{{key}}}:{owner}:rwlock_timeout");
        script(c, how, &read, &[key, &timeout], &["10000", owner, &write])
    };
    let native = Server::start();
    let mut n = native.connection();
    assert_eq!(rwlock(&mut n, "rw", "d1", "READ", 10_000), Reply::Int(1));
    let held = hgetall(&mut n, "rw");
    for how in [Send::EvalSha, Send::Eval] {
        let before = info_dlock(&mut n);
        let ttl = pttl(&mut n, "rw");
        match read_lock(&mut n, how, "rw") {
            Reply::Int(t) => assert!(t <= ttl && t > ttl - 1000, "PTTL {t}, key's {ttl}"),
            r => panic!("expected the PTTL, got {r:?}"),
        }
        assert_eq!(hgetall(&mut n, "rw"), held, "the dlock hold unchanged");
        assert_eq!(cmd(&mut n, &["KEYS", "{rw}:*"]), Reply::Arr(vec![]));
        let after = info_dlock(&mut n);
        let delta = |c: &str| after[c] - before[c];
        let counts = (delta("dlock_redisson_served"), delta("dlock_redisson_lua"));
        assert_eq!(counts, (1, 0), "served natively");
    }
    // Elsewhere it is Redisson's: a free key is granted, and so is a second Redisson reader.
    assert_eq!(read_lock(&mut n, Send::Eval, "free"), Reply::Nil);
    assert_eq!(read_lock(&mut n, Send::Eval, "free"), Reply::Nil);
    assert_eq!(hgetall(&mut n, "free")[owner], "2");
    assert_eq!(info_dlock(&mut n)["dlock_redisson_served"], 4);
    // The dlock reader still releases its lock.
    assert_eq!(release(&mut n, "rw", "d1"), Reply::Int(1));
    assert_eq!(cmd(&mut n, &["EXISTS", "rw"]), Reply::Int(0));

    let lua = Server::builder().module_args(["redisson", "lua"]).start();
    let mut l = lua.connection();
    assert_eq!(rwlock(&mut l, "rw", "d1", "READ", 10_000), Reply::Int(1));
    assert_eq!(read_lock(&mut l, Send::Eval, "rw"), Reply::Nil, "granted");
    assert_eq!(hgetall(&mut l, "rw")[owner], "1");
    assert_err(&rwlock(&mut l, "rw", "d1", "READ", 10_000), "WRONGTYPE");
}
