//! `RReadWriteLock`'s scripts run natively (dispatched from `redisson`): the same reply, the
//! same hash fields, lock TTL and per-hold timeout keys (`{lock}:<owner>:rwlock_timeout:<n>`),
//! the same messages and keyspace events, in the Lua's order, and the writes propagated as
//! plain commands. The rules are `dlock_core::redisson_rwlock`; whatever they leave to the
//! script is decided before anything is written, so the Lua then runs on untouched keys.
//!
//! Where a script walks a hash's fields and writes per field (the read lock's renewals), the
//! keyspace events follow `HKEYS`'s order: asked of Redis (`HKEYS` through `RM_Call`) when
//! more than one field has holds, since the key API's scan may visit a large hash's fields
//! in another order.

use dlock_core::redisson::{Fallback, LockState, Publish};
use dlock_core::redisson_rwlock::{self as rw, BatchForm, ReadUnlockEnd, RwCall, TryLock, Unlock};

use crate::ffi::call::CallReply;
use crate::ffi::command::Args;
use crate::ffi::key::{Key, KeyKind};
use crate::ffi::notify::{self, Class};
use crate::ffi::replicate::{self, propagate_key_int, replicate, CoreWrite};
use crate::ffi::reply::Replier;
use crate::ffi::{Ctx, RStr, Reply};

use super::redisson_keys::{
    arg, changed, delete, latch_state, lock_state, pttl, read_field, read_string,
    set_field_and_lease, set_latch, Positions,
};

/// The hash field naming the lock's mode.
const MODE: &[u8] = b"mode";

/// Serves one read-write lock call (`now`: the call's clock, ms).
pub fn serve(ctx: Ctx, call: &RwCall, strs: Args, now: i64) -> Result<Reply, Fallback> {
    let shard = |p: Publish| p == Publish::SPublish;
    match *call {
        RwCall::ReadUnlock { publish, .. }
        | RwCall::WriteUnlock { publish, .. }
        | RwCall::ForceUnlock { publish, .. }
            if shard(publish) && !replicate::shard_publish_available() =>
        {
            Err(Fallback)
        }
        RwCall::ReadTryLock { lease_ms } => read_try_lock(ctx, strs, now, lease_ms),
        RwCall::WriteTryLock { lease_ms } => write_try_lock(ctx, strs, now, lease_ms),
        RwCall::ReadUnlock { publish, latch_ms } => {
            let u = Unlocking::open(
                ctx,
                strs,
                4,
                latch_ms.map(|ms| (4, now + ms)),
                shard(publish),
            );
            read_unlock(ctx, &u, now)
        }
        RwCall::WriteUnlock {
            lease_ms,
            publish,
            latch_ms,
        } => {
            let u = Unlocking::open(
                ctx,
                strs,
                2,
                latch_ms.map(|ms| (2, now + ms)),
                shard(publish),
            );
            write_unlock(ctx, &u, now + lease_ms)
        }
        RwCall::ForceUnlock { mode, publish } => {
            let lock = Lock::open(ctx, strs, &Positions { numkeys: 2 });
            if !rw::force_unlock(lock.state(), mode)? {
                return Ok(Reply::Int(0));
            }
            delete(ctx, &lock.k, &lock.name);
            free_message(ctx, strs, &Positions { numkeys: 2 }, shard(publish));
            Ok(Reply::Int(1))
        }
        RwCall::ReadRenew { lease_ms } => {
            let at = Positions { numkeys: 2 };
            let plan = renewal_plan(ctx, strs, at.key(0), at.arg(1), |_| Ok(at.key(1)))?;
            let held = plan.is_some();
            if let Some(plan) = plan {
                plan.run(ctx, strs, now + lease_ms);
            }
            Ok(Reply::Int(i64::from(held)))
        }
        RwCall::RenewBatch {
            form,
            lease_ms,
            ref groups,
        } => renew_batch(ctx, strs, now + lease_ms, form, groups),
    }
}

/// The lock key (`KEYS[1]`) opened for writing, with its `mode` field.
struct Lock {
    name: RStr,
    k: Key,
    mode: Option<RStr>,
}

impl Lock {
    fn open(ctx: Ctx, strs: Args, at: &Positions) -> Lock {
        let name = arg(ctx, strs, at.key(0));
        let k = Key::open(ctx, &name, true);
        let mode = read_field(ctx, &k, &RStr::new(ctx, MODE));
        Lock { name, k, mode }
    }

    fn state(&self) -> LockState<'_> {
        lock_state(&self.k, &self.mode)
    }

    fn field(&self, ctx: Ctx, field: &RStr) -> Option<RStr> {
        read_field(ctx, &self.k, field)
    }

    /// `HSET lock mode <mode> <owner> 1` (two `hset` events, as the script's two calls).
    fn first_hold(&self, ctx: Ctx, mode: &[u8], owner: &RStr) {
        let (field, mode, one) = (
            RStr::new(ctx, MODE),
            RStr::new(ctx, mode),
            RStr::number(ctx, 1),
        );
        self.k.hash_set(&field, Some(&mode));
        self.k.hash_set(owner, Some(&one));
        replicate(ctx, c"HSET", &[&self.name, &field, &mode, owner, &one]);
        notify::keyspace_event(ctx, Class::Hash, c"hset", &self.name);
        notify::keyspace_event(ctx, Class::Hash, c"hset", &self.name);
    }

    /// `PEXPIRE lock` to `at`.
    fn expire_at(&self, ctx: Ctx, at: i64) {
        expire_at(ctx, &self.k, &self.name, at);
    }
}

/// `PEXPIRE key` to `at` on an open key that exists.
fn expire_at(ctx: Ctx, k: &Key, name: &RStr, at: i64) {
    k.set_abs_expire(Some(at));
    propagate_key_int(ctx, CoreWrite::PexpireAt, name, at);
    changed(ctx, name, true);
}

/// The unlock latch (3.24+): its key, its value read, and when a value written expires.
struct Latch {
    key: Option<(RStr, Key, i64)>,
    value: Option<Result<Option<Vec<u8>>, ()>>,
}

impl Latch {
    fn open(ctx: Ctx, strs: Args, at: Option<(usize, i64)>) -> Latch {
        let key = at.map(|(i, expires)| {
            let name = arg(ctx, strs, i);
            let k = Key::open(ctx, &name, true);
            (name, k, expires)
        });
        let value = key.as_ref().map(|(_, k, _)| read_string(k));
        Latch { key, value }
    }

    /// `SET latch <value> PX ms` (nothing in a form without a latch).
    fn set(&self, ctx: Ctx, value: i64) {
        if let Some((name, k, at)) = &self.key {
            set_latch(ctx, k, name, value, *at);
        }
    }

    /// The reply of a call that found no lock: nil with a latch (after setting it), else 1.
    fn no_lock_reply(&self, ctx: Ctx) -> Reply {
        self.set(ctx, 1);
        if self.key.is_some() {
            Reply::Null
        } else {
            Reply::Int(1)
        }
    }
}

/// An unlock call: its words, the lock, the latch, how it publishes.
struct Unlocking<'s> {
    strs: Args<'s>,
    at: Positions,
    lock: Lock,
    latch: Latch,
    shard: bool,
}

impl<'s> Unlocking<'s> {
    /// `numkeys` without the latch; `latch`: the latch's index among the keys and when a
    /// value written to it expires (3.24+).
    fn open(
        ctx: Ctx,
        strs: Args<'s>,
        numkeys: usize,
        latch: Option<(usize, i64)>,
        shard: bool,
    ) -> Unlocking<'s> {
        let at = Positions {
            numkeys: numkeys + usize::from(latch.is_some()),
        };
        let latch = Latch::open(ctx, strs, latch.map(|(i, expires)| (at.key(i), expires)));
        let lock = Lock::open(ctx, strs, &at);
        Unlocking {
            strs,
            at,
            lock,
            latch,
            shard,
        }
    }

    /// The latch's answer to a retried call (`Err`), else the owner (`ARGV` index `i`) and
    /// its count.
    fn owner(&self, ctx: Ctx, i: usize) -> Result<Result<(RStr, Option<RStr>), Reply>, Fallback> {
        if let Some(n) = rw::latched(latch_state(&self.latch.value))? {
            return Ok(Err(Reply::Int(n)));
        }
        let owner = arg(ctx, self.strs, self.at.arg(i));
        let count = self.lock.field(ctx, &owner);
        Ok(Ok((owner, count)))
    }

    /// The message published (the lock freed).
    fn publish(&self, ctx: Ctx) {
        free_message(ctx, self.strs, &self.at, self.shard);
    }
}

/// `PUBLISH` (or `SPUBLISH`) of `ARGV[1]` on `KEYS[2]`.
fn free_message(ctx: Ctx, strs: Args, at: &Positions, shard: bool) {
    let (channel, message) = (arg(ctx, strs, at.key(1)), arg(ctx, strs, at.arg(0)));
    replicate::publish_as_command(ctx, shard, &channel, &message);
}

/// A read hold's timeout key, `<prefix>:<n>`.
fn timeout_key(ctx: Ctx, prefix: &[u8], n: i64) -> RStr {
    RStr::new(ctx, &[prefix, b":", n.to_string().as_bytes()].concat())
}

fn read_try_lock(ctx: Ctx, strs: Args, now: i64, lease_ms: i64) -> Result<Reply, Fallback> {
    let at = Positions { numkeys: 2 };
    let lock = Lock::open(ctx, strs, &at);
    let owner = arg(ctx, strs, at.arg(1));
    let count = lock.field(ctx, &owner);
    let own_write = lock.mode.as_ref().is_some_and(|m| m.bytes() == rw::WRITE)
        && lock.field(ctx, &arg(ctx, strs, at.arg(2))).is_some();
    let dlock = || {
        let mut fields = vec![];
        lock.k
            .hash_scan(|f, v| fields.push((f.to_vec(), v.to_vec())));
        rw::is_dlock_rwlock(&fields)
    };
    let step = rw::read_try_lock(
        lock.state(),
        own_write,
        count.as_ref().map(RStr::bytes),
        dlock,
    )?;
    let n = match step {
        TryLock::Busy => return Ok(Reply::Int(pttl(&lock.k, now))),
        TryLock::First => 1,
        TryLock::Count(n) => n,
    };
    // SET replaces a value of any type; anything but a string is left to the Lua.
    let prefix = arg(ctx, strs, at.key(1));
    let timeout = timeout_key(ctx, prefix.bytes(), n);
    let t = Key::open(ctx, &timeout, true);
    if !matches!(t.kind(), KeyKind::Empty | KeyKind::String) {
        return Err(Fallback);
    }
    let ttl = rw::read_lock_ttl(pttl(&lock.k, now), lease_ms);
    if step == TryLock::First {
        lock.first_hold(ctx, rw::READ, &owner);
    } else {
        let v = RStr::number(ctx, n);
        lock.k.hash_set(&owner, Some(&v));
        replicate(ctx, c"HSET", &[&lock.name, &owner, &v]);
        notify::keyspace_event(ctx, Class::Hash, c"hincrby", &lock.name);
    }
    set_latch(ctx, &t, &timeout, 1, now + lease_ms);
    lock.expire_at(
        ctx,
        now + if step == TryLock::First {
            lease_ms
        } else {
            ttl
        },
    );
    Ok(Reply::Null)
}

fn write_try_lock(ctx: Ctx, strs: Args, now: i64, lease_ms: i64) -> Result<Reply, Fallback> {
    let at = Positions { numkeys: 1 };
    let lock = Lock::open(ctx, strs, &at);
    let owner = arg(ctx, strs, at.arg(1));
    let count = lock.field(ctx, &owner);
    match rw::write_try_lock(lock.state(), count.as_ref().map(RStr::bytes))? {
        TryLock::Busy => Ok(Reply::Int(pttl(&lock.k, now))),
        TryLock::First => {
            lock.first_hold(ctx, rw::WRITE, &owner);
            lock.expire_at(ctx, now + lease_ms);
            Ok(Reply::Null)
        }
        TryLock::Count(n) => {
            let ttl = rw::write_reentry_ttl(pttl(&lock.k, now), lease_ms)?;
            let v = RStr::number(ctx, n);
            set_field_and_lease(ctx, &lock.k, &lock.name, &owner, &v, now + ttl);
            Ok(Reply::Null)
        }
    }
}

/// The owner's hold count lowered to `left` (`HINCRBY -1`), its field deleted at `delete`.
fn lower(ctx: Ctx, lock: &Lock, owner: &RStr, left: i64, delete: bool) {
    notify::keyspace_event(ctx, Class::Hash, c"hincrby", &lock.name);
    if delete {
        lock.k.hash_set(owner, None);
        replicate(ctx, c"HDEL", &[&lock.name, owner]);
        notify::keyspace_event(ctx, Class::Hash, c"hdel", &lock.name);
    } else {
        let v = RStr::number(ctx, left);
        lock.k.hash_set(owner, Some(&v));
        replicate(ctx, c"HSET", &[&lock.name, owner, &v]);
    }
}

fn write_unlock(ctx: Ctx, u: &Unlocking, lease_end: i64) -> Result<Reply, Fallback> {
    let (owner, count) = match u.owner(ctx, 2)? {
        Ok(found) => found,
        Err(latched) => return Ok(latched),
    };
    let (lock, latch) = (&u.lock, &u.latch);
    Ok(
        match rw::write_unlock(lock.state(), count.as_ref().map(RStr::bytes))? {
            Unlock::NoLock => {
                u.publish(ctx);
                latch.no_lock_reply(ctx)
            }
            Unlock::NotHeld => Reply::Null,
            Unlock::Count(left) if left > 0 => {
                let v = RStr::number(ctx, left);
                set_field_and_lease(ctx, &lock.k, &lock.name, &owner, &v, lease_end);
                latch.set(ctx, 0);
                Reply::Int(0)
            }
            Unlock::Count(_) => {
                // The writer's HDEL, then DEL (no field but `mode` left) or `mode` back to read.
                notify::keyspace_event(ctx, Class::Hash, c"hincrby", &lock.name);
                lock.k.hash_set(&owner, None);
                notify::keyspace_event(ctx, Class::Hash, c"hdel", &lock.name);
                if rw::write_unlock_last(lock.k.len()) {
                    delete(ctx, &lock.k, &lock.name);
                    u.publish(ctx);
                } else {
                    let (field, read) = (RStr::new(ctx, MODE), RStr::new(ctx, rw::READ));
                    lock.k.hash_set(&field, Some(&read));
                    replicate(ctx, c"HDEL", &[&lock.name, &owner]);
                    replicate(ctx, c"HSET", &[&lock.name, &field, &read]);
                    notify::keyspace_event(ctx, Class::Hash, c"hset", &lock.name);
                    changed(ctx, &lock.name, false);
                }
                latch.set(ctx, 1);
                Reply::Int(1)
            }
        },
    )
}

/// The fields of a hash, in the key API's scan order.
fn fields(k: &Key) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = vec![];
    k.hash_scan(|f, v| out.push((f.to_vec(), v.to_vec())));
    out
}

/// PTTL of `name` as the script's `PTTL` answers (-2: no key).
fn pttl_of(ctx: Ctx, name: &RStr, now: i64) -> i64 {
    let k = Key::open(ctx, name, false);
    if k.kind() == KeyKind::Empty {
        -2
    } else {
        pttl(&k, now)
    }
}

/// The timeout key of hold `n` of `field`: `<prefix>:<field>:rwlock_timeout:<n>`.
fn hold_key(ctx: Ctx, prefix: &[u8], field: &[u8], n: i64) -> RStr {
    let name = [
        prefix,
        b":",
        field,
        b":rwlock_timeout:",
        n.to_string().as_bytes(),
    ]
    .concat();
    RStr::new(ctx, &name)
}

fn read_unlock(ctx: Ctx, u: &Unlocking, now: i64) -> Result<Reply, Fallback> {
    let (owner, count) = match u.owner(ctx, 1)? {
        Ok(found) => found,
        Err(latched) => return Ok(latched),
    };
    let (lock, latch, strs, at) = (&u.lock, &u.latch, u.strs, &u.at);
    let left = match rw::read_unlock(lock.state(), count.as_ref().map(RStr::bytes))? {
        Unlock::NoLock => {
            u.publish(ctx);
            return Ok(latch.no_lock_reply(ctx));
        }
        Unlock::NotHeld => return Ok(Reply::Null),
        Unlock::Count(left) => left,
    };
    // The hash as it will be after the owner's hold goes, checked before any write (its
    // fields are looked at only when others remain: the script's loop).
    let fields_left = lock.k.len() - usize::from(left == 0);
    let mut after = vec![];
    let mut holds = vec![];
    if fields_left > 1 {
        after = fields(&lock.k);
        match after.iter().position(|(f, _)| f == owner.bytes()) {
            Some(i) if left == 0 => drop(after.remove(i)),
            Some(i) => after[i].1 = left.to_string().into_bytes(),
            None => return Err(Fallback),
        }
        holds = rw::hold_counts(after.iter().map(|(_, v)| v.as_slice()))?;
    }
    let mode = lock
        .mode
        .as_ref()
        .map(|m| m.bytes().to_vec())
        .unwrap_or_default();
    lower(ctx, lock, &owner, left, left == 0);
    let gone = timeout_key(ctx, arg(ctx, strs, at.key(2)).bytes(), left + 1);
    let g = Key::open(ctx, &gone, true);
    if g.kind() != KeyKind::Empty {
        delete(ctx, &g, &gone);
    }
    drop(g);
    changed(ctx, &lock.name, false);
    let prefix = arg(ctx, strs, at.key(3));
    let mut longest = -3;
    for &(i, n) in &holds {
        for hold in (1..=n).rev() {
            let t = hold_key(ctx, prefix.bytes(), &after[i].0, hold);
            longest = longest.max(pttl_of(ctx, &t, now));
        }
    }
    Ok(match rw::read_unlock_end(fields_left, longest, &mode) {
        ReadUnlockEnd::Held(ttl) => {
            if let Some(ms) = ttl {
                lock.expire_at(ctx, now + ms);
            }
            latch.set(ctx, 0);
            Reply::Int(0)
        }
        ReadUnlockEnd::Free => {
            delete(ctx, &lock.k, &lock.name);
            u.publish(ctx);
            latch.set(ctx, 1);
            Reply::Int(1)
        }
    })
}

/// What a renewal will do to one held lock, decided before anything is written: its key,
/// then each timeout key to renew (key index of its prefix, field, hold), in the Lua's order.
struct Renewal {
    lock: (RStr, Key),
    holds: Vec<(usize, Vec<u8>, i64)>,
}

impl Renewal {
    /// `PEXPIRE` of the lock, then of each hold's timeout key that exists.
    fn run(self, ctx: Ctx, strs: Args, at: i64) {
        expire_at(ctx, &self.lock.1, &self.lock.0, at);
        renew_holds(ctx, strs, &self.holds, at);
    }
}

/// `PEXPIRE` of each hold's timeout key that exists (a `PEXPIRE` of no key does nothing).
fn renew_holds(ctx: Ctx, strs: Args, holds: &[(usize, Vec<u8>, i64)], at: i64) {
    for (prefix, field, n) in holds {
        let name = hold_key(ctx, arg(ctx, strs, *prefix).bytes(), field, *n);
        let k = Key::open(ctx, &name, true);
        if k.kind() != KeyKind::Empty {
            expire_at(ctx, &k, &name, at);
        }
    }
}

/// The read renewal of one lock (`KEYS` index `key`, owner at argv `owner`), as the 3.2x text
/// and the 3.4x batch do it: `None` the owner holds nothing. `prefix(n)`: where hold `n`'s
/// timeout-key prefix is in argv.
fn renewal_plan(
    ctx: Ctx,
    strs: Args,
    key: usize,
    owner: usize,
    prefix: impl Fn(usize) -> Result<usize, Fallback>,
) -> Result<Option<Renewal>, Fallback> {
    let name = arg(ctx, strs, key);
    let k = Key::open(ctx, &name, true);
    let held = read_field(ctx, &k, &arg(ctx, strs, owner));
    if !dlock_core::redisson::renew(lock_state(&k, &held))? {
        return Ok(None);
    }
    let mut holds = vec![];
    if k.len() > 1 {
        let mut all = fields(&k);
        let mut counts = rw::hold_counts(all.iter().map(|(_, v)| v.as_slice()))?;
        if counts.iter().filter(|(_, n)| *n > 0).count() > 1 {
            all = hkeys_order(ctx, &name, all);
            counts = rw::hold_counts(all.iter().map(|(_, v)| v.as_slice()))?;
        }
        for (i, n) in counts {
            for hold in (1..=n).rev() {
                let at = prefix(usize::try_from(hold).map_err(|_| Fallback)?)?;
                holds.push((at, all[i].0.clone(), hold));
            }
        }
    }
    Ok(Some(Renewal {
        lock: (name, k),
        holds,
    }))
}

/// `fields` reordered as `HKEYS` lists them.
fn hkeys_order(
    ctx: Ctx,
    name: &RStr,
    mut fields: Vec<(Vec<u8>, Vec<u8>)>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let Some(reply) = CallReply::run_strs(ctx, c"HKEYS", &[name], false) else {
        return fields;
    };
    let order = reply.strings();
    fields.sort_by_key(|(f, _)| order.iter().position(|o| o == f));
    fields
}

fn renew_batch(
    ctx: Ctx,
    strs: Args,
    at: i64,
    form: BatchForm,
    groups: &[std::ops::Range<usize>],
) -> Result<Reply, Fallback> {
    let pos = Positions {
        numkeys: 2 * groups.len(),
    };
    // Every lock is looked at before any is written: a call the Lua would stop in is its.
    let mut plans = Vec::with_capacity(groups.len());
    for (p, names) in groups.iter().enumerate() {
        let plan = match form {
            BatchForm::Shadowed => {
                renewal_plan(ctx, strs, pos.key(2 * p), pos.arg(names.start), |n| {
                    rw::shadowed_prefix(i64::try_from(n).unwrap_or(i64::MAX), pos.numkeys)
                        .map(|i| pos.key(i))
                })?
                .map(Ok)
            }
            BatchForm::Named => named_plan(ctx, strs, &pos, p, names)?.map(Err),
        };
        plans.push(plan);
    }
    let reply = Replier(ctx);
    reply.array(plans.len());
    for plan in plans {
        reply.int(i64::from(plan.is_some()));
        match plan {
            Some(Ok(renewal)) => renewal.run(ctx, strs, at),
            // 4.x: the timeout keys first, then the lock.
            Some(Err(renewal)) => {
                renew_holds(ctx, strs, &renewal.holds, at);
                expire_at(ctx, &renewal.lock.1, &renewal.lock.0, at);
            }
            None => {}
        }
    }
    Ok(Reply::None)
}

/// 4.x: the holds of pair `p`'s named owners; `None` when none of them holds the lock.
fn named_plan(
    ctx: Ctx,
    strs: Args,
    pos: &Positions,
    p: usize,
    names: &std::ops::Range<usize>,
) -> Result<Option<Renewal>, Fallback> {
    let name = arg(ctx, strs, pos.key(2 * p));
    let k = Key::open(ctx, &name, true);
    if k.kind() != KeyKind::Empty && k.kind() != KeyKind::Hash {
        return Err(Fallback);
    }
    let mut alive = false;
    let mut holds = vec![];
    for i in names.clone() {
        let owner = arg(ctx, strs, pos.arg(i));
        let Some(v) = read_field(ctx, &k, &owner) else {
            continue;
        };
        alive = true;
        for hold in (1..=rw::named_count(v.bytes())?).rev() {
            holds.push((pos.key(2 * p + 1), owner.bytes().to_vec(), hold));
        }
    }
    Ok(alive.then_some(Renewal {
        lock: (name, k),
        holds,
    }))
}
