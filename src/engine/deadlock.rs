//! Deadlock detection's snapshot: who waits for whom, read from the registry's queues and
//! the keys on the walked paths, for `dlock_core::serve::admit`'s search when a WAIT request
//! would queue (the search itself is `dlock_core::deadlock`'s).
//!
//! Cost: only requests that are about to queue pay, and only for the keys on the walked
//! paths (the registry indexes where each owner waits; holders are read from those keys):
//! nothing depends on how many locks are held on the server.

use dlock_core::deadlock::{Wait, WaitsFor};
use dlock_core::model::LockValue;
use dlock_core::rules;

use crate::ffi::Ctx;

use super::registry::Registry;
use super::store::{LockKey, Open};

/// The waits around a request for `key` in database `db` (the key already opened by the
/// command, the database selected), read as the search asks for them.
pub struct Snapshot<'r> {
    ctx: Ctx,
    reg: &'r Registry,
    db: i32,
    key: &'r [u8],
    now: i64,
}

impl<'r> Snapshot<'r> {
    pub fn new(ctx: Ctx, reg: &'r Registry, db: i32, key: &'r [u8], now: i64) -> Self {
        Snapshot {
            ctx,
            reg,
            db,
            key,
            now,
        }
    }

    /// The value of `key` in database `at`: `here` for the key asked, else read (the
    /// database selected again afterwards).
    fn value(&self, at: i32, key: &[u8], here: &LockValue) -> LockValue {
        if at == self.db && key == self.key {
            return here.clone();
        }
        let elsewhere = at != self.db;
        if elsewhere {
            self.ctx.select_db(at);
        }
        let value = LockKey::open(self.ctx, key, Open::Read { name: None }).value;
        if elsewhere {
            self.ctx.select_db(self.db);
        }
        value
    }
}

impl WaitsFor for Snapshot<'_> {
    /// Costs one read per waited key other than the one asked.
    fn waited_for(&mut self, owner: &[u8], here: &LockValue) -> bool {
        !self.reg.places_of_owner(owner).is_empty()
            || self.reg.all_keys().into_iter().any(|(at, key)| {
                if at == self.db && key == self.key {
                    return rules::holds(here, owner);
                }
                rules::holds(&self.value(at, &key, here), owner)
            })
    }

    fn waits_of(&mut self, owner: &[u8], here: &LockValue) -> Vec<Wait> {
        let mut waits = vec![];
        for place in self.reg.places_of_owner(owner) {
            let Some((w, ahead)) = self.reg.waiter_at(place) else {
                continue;
            };
            let value = self.value(place.db, &place.key, here);
            let ahead = ahead.map(|a| (a.terms.owner(), a.terms.want));
            waits.push(Wait::of(
                &place.key,
                &value,
                owner,
                w.terms.want,
                ahead,
                self.now,
            ));
        }
        waits
    }
}
