//! Deadlock detection: before a WAIT request queues, the cycle it would close, if any. The
//! search is `dlock_core::deadlock`'s, over a snapshot this file supplies: the queues of the
//! registry and the values of the keys on the walked paths.
//!
//! Cost: only requests that are about to queue pay, and only for the keys on the walked
//! paths (the registry indexes where each owner waits; holders are read from those keys):
//! nothing depends on how many locks are held on the server.

use dlock_core::deadlock::{self, Wait};
use dlock_core::model::{LockValue, Want};
use dlock_core::rules;

use crate::ffi::Ctx;

use super::registry::Registry;
use super::store::{LockKey, Open};

/// The request about to queue, on its key already opened by the command.
pub struct AboutToQueue<'a> {
    pub db: i32,
    pub key: &'a [u8],
    pub value: &'a LockValue,
    pub owner: &'a [u8],
    pub want: Want,
}

/// The cycle `req` would close if it queued, as the text after `DEADLOCK `; `None` when
/// there is none.
pub fn find(ctx: Ctx, reg: &Registry, req: &AboutToQueue, now: i64) -> Option<String> {
    // Nobody can wait for an owner that neither waits nor holds a key with a queue: no
    // cycle (the common case, checked without walking anything).
    let waited_for =
        !reg.places_of_owner(req.owner).is_empty() || holds_a_waited_key(ctx, reg, req);
    ctx.select_db(req.db);
    if !waited_for {
        return None;
    }
    let ahead = reg
        .queued_on(req.db, req.key)
        .map(|w| (w.request.owner(), w.request.want));
    let first = Wait::of(req.key, req.value, req.owner, req.want, ahead, now);
    if first.is_empty() {
        return None;
    }
    let found = deadlock::cycle_through(req.owner, first, |owner| {
        let mut waits = vec![];
        for place in reg.places_of_owner(owner) {
            let Some((w, ahead)) = reg.waiter_at(place) else {
                continue;
            };
            let value = if place.db == req.db && place.key == req.key {
                req.value.clone()
            } else {
                ctx.select_db(place.db);
                LockKey::open(ctx, &place.key, Open::Read { name: None }).value
            };
            let ahead = ahead.map(|a| (a.request.owner(), a.request.want));
            waits.push(Wait::of(
                &place.key,
                &value,
                owner,
                w.request.want,
                ahead,
                now,
            ));
        }
        waits
    });
    ctx.select_db(req.db);
    found
}

/// Whether the requester holds a key that clients wait on (costs one read per such key).
fn holds_a_waited_key(ctx: Ctx, reg: &Registry, req: &AboutToQueue) -> bool {
    reg.all_keys().into_iter().any(|(db, key)| {
        if db == req.db && key == req.key {
            return rules::holds(req.value, req.owner);
        }
        ctx.select_db(db);
        rules::holds(
            &LockKey::open(ctx, &key, Open::Read { name: None }).value,
            req.owner,
        )
    })
}
