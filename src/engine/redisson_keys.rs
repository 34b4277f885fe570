//! What Redisson's scripts served natively (`redisson`, `redisson_rwlock`) do to keys, as the
//! Lua's own calls would: reading a lock hash's field, a latch, a PTTL; `HINCRBY` + `PEXPIRE`,
//! `DEL`, `SET ... PX`, each with its keyspace events, propagation and modified-key signal.

use dlock_core::redisson::{LatchState, LockState};

use crate::ffi::command::Args;
use crate::ffi::events::KeyspaceHandler;
use crate::ffi::key::{Key, KeyKind};
use crate::ffi::notify::signal_modified;
use crate::ffi::replicate::{self, propagate, CoreWrite};
use crate::ffi::{Ctx, RStr};

use super::listen::Keys;

/// The argument `i` (of the command, after its name) as a Redis string, shared.
pub fn arg(ctx: Ctx, strs: Args, i: usize) -> RStr {
    RStr::borrowed(ctx, strs.get(i).expect("parsed arguments exist"))
}

/// Where in argv (after the command name) each parsed piece is: keys from 2, then args.
pub struct Positions {
    pub numkeys: usize,
}

impl Positions {
    pub fn key(&self, i: usize) -> usize {
        2 + i
    }
    pub fn arg(&self, i: usize) -> usize {
        2 + self.numkeys + i
    }
}

/// The owner's field of the hash at `k`, if it is a hash and has one.
pub fn read_field(ctx: Ctx, k: &Key, owner: &RStr) -> Option<RStr> {
    (k.kind() == KeyKind::Hash)
        .then(|| k.hash_get(ctx, owner))
        .flatten()
}

pub fn lock_state<'v>(k: &Key, field: &'v Option<RStr>) -> LockState<'v> {
    match k.kind() {
        KeyKind::Empty => LockState::Absent,
        KeyKind::Hash => LockState::Hash {
            field: field.as_ref().map(RStr::bytes),
        },
        KeyKind::String | KeyKind::Other => LockState::NotAHash,
    }
}

/// A string key's value (`Ok(None)`: no key; `Err`: another type).
pub fn read_string(k: &Key) -> Result<Option<Vec<u8>>, ()> {
    match k.kind() {
        KeyKind::Empty => Ok(None),
        KeyKind::String => Ok(Some(k.with_string_value(<[u8]>::to_vec))),
        KeyKind::Hash | KeyKind::Other => Err(()),
    }
}

/// PTTL of an existing key: ms left (at least 0), -1 without an expiry.
pub fn pttl(k: &Key, now: i64) -> i64 {
    k.abs_expire().map_or(-1, |at| (at - now).max(0))
}

/// `HINCRBY key owner ±1` to `value`, then `PEXPIRE key lease` (to `at`).
pub fn set_field_and_lease(ctx: Ctx, k: &Key, key: &RStr, owner: &RStr, value: &RStr, at: i64) {
    k.hash_set(owner, Some(value));
    k.set_abs_expire(Some(at));
    replicate::propagate_field_and_expiry(ctx, c"hincrby", key, owner, value, at);
    changed(ctx, key, true);
}

/// `DEL key` of an existing key.
pub fn delete(ctx: Ctx, k: &Key, key: &RStr) {
    k.delete();
    propagate(ctx, CoreWrite::Del, &[key]);
    changed(ctx, key, true);
}

/// `SET name value PX ms` (to `at`): the unlock latch, a read hold's timeout key.
pub fn set_latch(ctx: Ctx, k: &Key, name: &RStr, value: i64, at: i64) {
    let v = RStr::number(ctx, value);
    k.string_set(&v);
    k.set_abs_expire(Some(at));
    replicate::propagate_set_pxat(ctx, name, &v, at);
    changed(ctx, name, false);
}

/// After a write: WATCH and client caches see it, and, for the generic events a script's
/// command sends (`expire`, `del`), the engine hears what it would hear of the Lua's.
pub fn changed(ctx: Ctx, key: &RStr, generic: bool) {
    signal_modified(ctx, key);
    if generic && Keys::wants_generic() {
        Keys::on_generic(ctx, key.bytes());
    }
}

/// The latch key's state, from [`read_string`] of it (`None`: a form without a latch).
pub fn latch_state(value: &Option<Result<Option<Vec<u8>>, ()>>) -> LatchState<'_> {
    match value {
        None | Some(Ok(None)) => LatchState::Absent,
        Some(Ok(Some(v))) => LatchState::String(v),
        Some(Err(())) => LatchState::NotAString,
    }
}
