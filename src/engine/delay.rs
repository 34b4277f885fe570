//! LOCKDELAY's companion key (`dlock_core::delay`): loaded with the lock by the unit of work,
//! consulted before a grant, and written back (replicated as plain HSET/PEXPIREAT/DEL) when
//! the rules change it. While no companion can exist (`delay_keys`) nothing is looked up;
//! otherwise a lock that never had LOCKDELAY costs one existence check.

use dlock_core::delay::{self, Delay};
use dlock_core::model::LockValue;
use dlock_core::names;
use dlock_core::number::{decimal, positive};

use crate::ffi::key::{Key, KeyKind};
use crate::ffi::notify::signal_modified;
use crate::ffi::replicate::{propagate, propagate_key_int, CoreWrite};
use crate::ffi::{Ctx, RStr};
use crate::stats::{Stats, STATS};

use super::delay_keys::{self, MayExist};

/// The lock-delay of one lock during a unit of work.
#[derive(Default)]
pub struct LockDelay {
    /// As stored when the unit began (`None`: no companion key, or not a valid one).
    stored: Option<Delay>,
    /// A grant of this unit asked for `LOCKDELAY ms`: the owner and `ms`.
    asked: Option<(Vec<u8>, i64)>,
}

fn name(ctx: Ctx, lock_key: &[u8]) -> RStr {
    RStr::written(ctx, |out| names::write_delay_key(lock_key, out))
}

impl LockDelay {
    /// Reads the companion of `lock_key` (in the context's selected database).
    pub fn load(ctx: Ctx, lock_key: &[u8]) -> LockDelay {
        let db = ctx.selected_db();
        // Most servers have none at all: then nothing is looked up (`delay_keys`).
        let maybe = delay_keys::may_exist(ctx, db, || {
            let mut out = vec![];
            names::write_delay_key(lock_key, &mut out).expect("a Vec takes every byte");
            out
        });
        if maybe == MayExist::No {
            return LockDelay::default();
        }
        let name = name(ctx, lock_key);
        // Most locks never have one: a look-up without opening the key says so.
        if !Key::exists(ctx, &name) {
            delay_keys::gone(db, name.bytes());
            return LockDelay::default();
        }
        delay_keys::exists(db, name.bytes());
        let key = Key::open(ctx, &name, false);
        if key.kind() != KeyKind::Hash {
            return LockDelay::default();
        }
        let (mut owner, mut until, mut delay_ms, mut begun) = (None, None, None, false);
        key.hash_scan(|f, v| match f {
            delay::OWNER_FIELD => owner = Some(v.to_vec()),
            delay::UNTIL_FIELD => until = positive(v),
            delay::DELAY_FIELD => delay_ms = decimal(v),
            delay::BEGUN_FIELD => begun = true,
            _ => {}
        });
        let stored = match (owner, until, delay_ms) {
            (Some(owner), Some(until), Some(delay_ms)) => Some(Delay {
                owner,
                until,
                delay_ms,
                begun,
            }),
            _ => None,
        };
        LockDelay {
            stored,
            asked: None,
        }
    }

    /// The delay as stored when the unit began (the grant rules consult it).
    pub fn stored(&self) -> Option<&Delay> {
        self.stored.as_ref()
    }

    /// When a running delay ends (unix ms): nobody may be granted the lock before.
    pub fn running_until(&self, value: &LockValue, now: i64) -> Option<i64> {
        delay::running_until(self.stored.as_ref(), value, now)
    }

    /// A grant asked for `LOCKDELAY ms`.
    pub fn ask(&mut self, owner: &[u8], ms: i64) {
        self.asked = Some((owner.to_vec(), ms));
    }

    /// Writes what the unit of work changed, as plain commands.
    pub fn save(&self, ctx: Ctx, lock_key: &[u8], value: &LockValue, now: i64) {
        if self.stored.is_none() && self.asked.is_none() {
            return;
        }
        let asked = self.asked.as_ref().map(|(o, ms)| (o.as_slice(), *ms));
        let next = delay::next(self.stored.as_ref(), asked, value, now);
        if next == self.stored {
            return;
        }
        let name = name(ctx, lock_key);
        let key = Key::open(ctx, &name, true);
        match next {
            None => {
                key.delete();
                propagate(ctx, CoreWrite::Del, &[&name]);
                delay_keys::gone(ctx.selected_db(), name.bytes());
            }
            Some(d) => {
                delay_keys::exists(ctx.selected_db(), name.bytes());
                if d.begun && !self.stored.as_ref().is_some_and(|s| s.begun) {
                    Stats::add(&STATS.lock_delays, 1);
                }
                // Written whole (a new delay replaces every field of an old one).
                key.delete();
                propagate(ctx, CoreWrite::Del, &[&name]);
                let mut fields = vec![
                    (RStr::new(ctx, delay::OWNER_FIELD), RStr::new(ctx, &d.owner)),
                    (
                        RStr::new(ctx, delay::UNTIL_FIELD),
                        RStr::number(ctx, d.until),
                    ),
                    (
                        RStr::new(ctx, delay::DELAY_FIELD),
                        RStr::number(ctx, d.delay_ms),
                    ),
                ];
                if d.begun {
                    fields.push((RStr::new(ctx, delay::BEGUN_FIELD), RStr::number(ctx, 1)));
                }
                let mut args = vec![&name];
                for (f, v) in &fields {
                    key.hash_set(f, Some(v));
                    args.extend([f, v]);
                }
                propagate(ctx, CoreWrite::Hset, &args);
                key.set_abs_expire(Some(d.expire_at()));
                propagate_key_int(ctx, CoreWrite::PexpireAt, &name, d.expire_at());
            }
        }
        signal_modified(ctx, &name);
    }
}
