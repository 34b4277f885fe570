//! Deadlock detection: before a WAIT request queues, the cycle it would close, if any. The
//! search is `dlock_core::deadlock`'s, over a snapshot this file supplies: the queues of the
//! registry and the values of the keys on the walked paths.
//!
//! Cost: only requests that are about to queue pay, and only for the keys on the walked
//! paths (the registry indexes where each owner waits; holders are read from those keys):
//! nothing depends on how many locks are held on the server.

use dlock_core::deadlock::{self, Wait};
use dlock_core::rules;
use dlock_core::terms::Terms;

use crate::ffi::Ctx;

use super::registry::Registry;
use super::store::{LockKey, Open};

/// The cycle `req` would close if it queued on `lk` (in database `db`, the key already
/// opened by the command), as the text after `DEADLOCK `; `None` when there is none.
pub fn find(
    ctx: Ctx,
    reg: &Registry,
    db: i32,
    lk: &LockKey,
    req: &Terms<&[u8]>,
    now: i64,
) -> Option<String> {
    let (key, value, requester) = (lk.key, &lk.value, req.owner);
    // Nobody can wait for an owner that neither waits nor holds a key with a queue: no
    // cycle (the common case, checked without walking anything).
    let waited_for = !reg.places_of_owner(requester).is_empty()
        || holds_a_waited_key(ctx, reg, db, lk, requester);
    ctx.select_db(db);
    if !waited_for {
        return None;
    }
    let ahead = reg
        .queued_on(db, key)
        .map(|w| (w.terms.owner(), w.terms.want));
    let first = Wait::of(key, value, requester, req.want, ahead, now);
    if first.is_empty() {
        return None;
    }
    let found = deadlock::cycle_through(requester, first, |owner| {
        let mut waits = vec![];
        for place in reg.places_of_owner(owner) {
            let Some((w, ahead)) = reg.waiter_at(place) else {
                continue;
            };
            let value = if place.db == db && place.key == key {
                value.clone()
            } else {
                ctx.select_db(place.db);
                LockKey::open(ctx, &place.key, Open::Read { name: None }).value
            };
            let ahead = ahead.map(|a| (a.terms.owner(), a.terms.want));
            waits.push(Wait::of(
                &place.key,
                &value,
                owner,
                w.terms.want,
                ahead,
                now,
            ));
        }
        waits
    });
    ctx.select_db(db);
    found
}

/// Whether `owner` holds a key that clients wait on (costs one read per such key other than
/// `lk`, the key of database `db` already open).
fn holds_a_waited_key(ctx: Ctx, reg: &Registry, db: i32, lk: &LockKey, owner: &[u8]) -> bool {
    reg.all_keys().into_iter().any(|(at, key)| {
        if at == db && key == lk.key {
            return rules::holds(&lk.value, owner);
        }
        ctx.select_db(at);
        rules::holds(
            &LockKey::open(ctx, &key, Open::Read { name: None }).value,
            owner,
        )
    })
}
