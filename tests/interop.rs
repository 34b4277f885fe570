//! Interop with Redisson's RLock protocol (its Lua scripts, written here from the published
//! protocol): both exclude each other on the same key, dlock waiters are served when a
//! Redisson client unlocks, and a Redisson waiter is woken by dlock's unlock message.

use crate::common;
use common::*;

/// Redisson RLock tryLockInner: KEYS[1] lock, ARGV[1] lease ms, ARGV[2] owner.
/// nil = acquired, integer = PTTL of the lock held by someone else.
const LOCK: &str = "if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson RLock unlockInnerAsync: KEYS[1] lock, KEYS[2] channel, ARGV[1] unlock message,
/// ARGV[2] lease ms, ARGV[3] owner.
const UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; \
else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; \
return nil;";

fn lua_lock(c: &mut Connection, key: &str, owner: &str, lease: u64) -> Reply {
    cmd(c, &["EVAL", LOCK, "1", key, &lease.to_string(), owner])
}
fn lua_unlock(c: &mut Connection, key: &str, owner: &str, lease: u64) -> Reply {
    let chan = channel(key);
    cmd(
        c,
        &[
            "EVAL",
            UNLOCK,
            "2",
            key,
            &chan,
            "0",
            &lease.to_string(),
            owner,
        ],
    )
}

#[test]
fn redisson_holder_excludes_dlock() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(
        lua_lock(&mut c, "k", "r1", 30_000),
        Reply::Nil,
        "Redisson acquired"
    );
    assert_eq!(
        acquire(&mut c, "k", "d1", 10_000),
        Reply::Nil,
        "dlock refused"
    );
    let holders = dinfo_field(&mut c, "k", "holders").arr();
    assert_eq!(holders[0].arr()[0], Reply::Bulk("r1".into()));
    assert_eq!(
        lua_lock(&mut c, "k", "r1", 30_000),
        Reply::Nil,
        "Redisson reentrant"
    );
    assert_eq!(hgetall(&mut c, "k"), map(&[("r1", "2")]));
    assert_eq!(release(&mut c, "k", "d1"), Reply::Nil);
    assert_eq!(
        renew(&mut c, "k", "r1", 45_000),
        Reply::Int(1),
        "dlock renews a Redisson hold"
    );
    assert_pttl_about(&mut c, "k", 45_000);
    assert_eq!(
        acquire(&mut c, "k", "r1", 30_000),
        Reply::Int(3),
        "same owner string is reentrant across protocols"
    );
    assert_eq!(release(&mut c, "k", "r1"), Reply::Int(0));
    assert_eq!(lua_unlock(&mut c, "k", "r1", 30_000), Reply::Int(0));
    assert_eq!(lua_unlock(&mut c, "k", "r1", 30_000), Reply::Int(1));
    assert!(!exists(&mut c, "k"));
    assert_eq!(acquire(&mut c, "k", "d1", 10_000), Reply::Int(1));
}

#[test]
fn dlock_holder_excludes_redisson() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "d1", 30_000), Reply::Int(1));
    let r = lua_lock(&mut c, "k", "r1", 10_000);
    let t = r.int();
    assert!(t > 28_000 && t <= 30_000, "Redisson sees the PTTL: {t}");
    assert_eq!(hgetall(&mut c, "k"), map(&[("d1", "1")]));
    assert_eq!(lua_unlock(&mut c, "k", "r1", 10_000), Reply::Nil);
    assert_eq!(hgetall(&mut c, "k"), map(&[("d1", "1")]));
    assert_eq!(release(&mut c, "k", "d1"), Reply::Int(1));
    assert_eq!(lua_lock(&mut c, "k", "r1", 10_000), Reply::Nil);
}

#[test]
fn dlock_waiter_is_granted_when_redisson_unlocks() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(lua_lock(&mut c, "k", "r1", 30_000), Reply::Nil);
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "20000", "WAIT", "10000"],
        1,
    );
    assert_eq!(lua_unlock(&mut c, "k", "r1", 30_000), Reply::Int(1));
    assert_eq!(w.reply(), Reply::Int(1));
    assert_eq!(hgetall(&mut c, "k"), map(&[("w", "1")]));
    assert_pttl_about(&mut c, "k", 20_000);
}

#[test]
fn no_window_for_redisson_at_a_release_handoff() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 30_000), Reply::Int(1));
    let w = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "20000", "WAIT", "10000"],
        1,
    );
    let (rel, lua): (Value, Value) = redis::pipe()
        .cmd("DLOCK.RELEASE")
        .arg("k")
        .arg("h")
        .cmd("EVAL")
        .arg(LOCK)
        .arg(1)
        .arg("k")
        .arg(10_000)
        .arg("r1")
        .query(&mut c)
        .unwrap();
    assert_eq!(to_reply(rel), Reply::Int(1));
    assert!(
        matches!(to_reply(lua.clone()), Reply::Int(t) if t > 0),
        "the Redisson script right after the RELEASE must find the lock held by the waiter, got {lua:?}"
    );
    assert_eq!(w.reply(), Reply::Int(1));
    assert_eq!(hgetall(&mut c, "k"), map(&[("w", "1")]));
}

#[test]
fn redisson_waiter_is_woken_by_dlock_release() {
    let srv = Server::start();
    let mut c = srv.connection();
    let mut sub = subscriber(&srv, &channel("k"));
    assert_eq!(acquire(&mut c, "k", "d1", 30_000), Reply::Int(1));
    assert!(matches!(lua_lock(&mut c, "k", "r1", 10_000), Reply::Int(_)));
    assert_eq!(release(&mut c, "k", "d1"), Reply::Int(1));
    let m = sub
        .get_message()
        .expect("unlock message for the Redisson waiter");
    assert_eq!(m.get_payload::<String>().unwrap(), "0");
    assert_eq!(
        lua_lock(&mut c, "k", "r1", 10_000),
        Reply::Nil,
        "Redisson retry succeeds"
    );
}
