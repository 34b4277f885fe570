//! Reading and writing lock keys, with every change propagated to replicas and the AOF as
//! plain commands (HSET/HDEL/DEL/PEXPIREAT/PERSIST/SET/PUBLISH), announced with the keyspace
//! events those commands send and signalled as modified (WATCH, client-side caching) only
//! when something changed. Redis wraps what one command (or one timer callback) propagates
//! in MULTI/EXEC.

use std::borrow::Cow;
use std::collections::BTreeMap;

use dlock_core::error::LockError;
use dlock_core::model::{Exclusive, LockValue, Stored};
use dlock_core::names;

use super::delay::LockDelay;
use crate::ffi::key::{Key, KeyKind};
use crate::ffi::notify::signal_modified;
use crate::ffi::replicate::{self, propagate, propagate_key_int, CoreWrite};
use crate::ffi::string::ArgStr;
use crate::ffi::{Ctx, RStr};

/// An open lock key: its value as loaded, the value commands change, and the handle that
/// writes the difference back.
pub struct LockKey<'k> {
    ctx: Ctx,
    name: RStr,
    handle: Key,
    pub key: &'k [u8],
    /// The requesting owner and its name as a Redis string (the command's own argument,
    /// shared), for reading and writing its field without making strings.
    owner: Option<(&'k [u8], RStr)>,
    /// The hash as stored when opened.
    loaded: Loaded<'k>,
    /// The key's expiry when opened (`None` also when it was not read: see `open`).
    loaded_expire: Option<i64>,
    /// The value as loaded, then as changed by the lock logic; `save` stores it.
    pub value: LockValue,
    /// Its LOCKDELAY companion (loaded by the unit of work, `engine::delay`).
    pub delay: LockDelay,
    /// The channel of the unlock message `save` publishes (`publish_unlock`).
    unlock_channel: Option<RStr>,
    saved: bool,
}

/// What `write_changes` wrote.
#[derive(PartialEq, Eq)]
enum Wrote {
    Nothing,
    Fields,
    /// The fields and the new expiry, propagated as one command.
    FieldsAndExpiry,
}

/// The requesting owner of a unit of work.
#[derive(Clone, Copy)]
pub struct Requester<'k> {
    pub owner: &'k [u8],
    /// The owner argument's own string, shared instead of copied.
    pub arg: Option<ArgStr>,
}

/// What the key holds in Redis when opened.
enum Loaded<'k> {
    /// No key, or not a lock (never written).
    Empty,
    /// An exclusive lock with one holder: `owner -> count` (the common case; the owner is
    /// the requester's own bytes when read through its field).
    Single(Cow<'k, [u8]>, i64),
    /// Any other lock hash, field by field.
    Fields(Vec<(Vec<u8>, Vec<u8>)>),
}

impl Loaded<'_> {
    fn is_empty(&self) -> bool {
        matches!(self, Loaded::Empty)
    }

    /// The stored fields, for the general diff.
    fn fields(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        match self {
            Loaded::Empty => vec![],
            Loaded::Single(owner, count) => vec![(owner.to_vec(), count.to_string().into_bytes())],
            Loaded::Fields(f) => f.clone(),
        }
    }
}

/// How a lock key is opened (`LockKey::open`). `name`: the key as the command's own
/// argument string, shared instead of copied.
pub enum Open<'k> {
    /// To read it (DLOCK.INFO, DLOCK.WAITERS, deadlock detection): the whole key, with its
    /// expiry.
    Read { name: Option<ArgStr> },
    /// For the unit of work. An expired key is deleted first (and Redis propagates that DEL
    /// before anything we write). `owner`: when the key is a one-field hash whose field is
    /// this owner (a holder renewing, re-entering or releasing), one HashGet reads it instead
    /// of a scan of the hash; and then, unless `need_expire`, the key's expiry is not read (a
    /// command on a one-holder lock with no queue never needs it: it sets a new one or leaves
    /// it alone).
    Write {
        name: Option<ArgStr>,
        owner: Option<Requester<'k>>,
        need_expire: bool,
    },
}

impl<'k> LockKey<'k> {
    /// Opens `key` in the context's selected database, as `how` says.
    pub fn open(ctx: Ctx, key: &'k [u8], how: Open<'k>) -> LockKey<'k> {
        let (name, write, owner, need_expire) = match how {
            Open::Read { name } => (name, false, None, true),
            Open::Write {
                name,
                owner,
                need_expire,
            } => (name, true, owner, need_expire),
        };
        let name = match name {
            Some(arg) => RStr::borrowed(ctx, arg),
            None => RStr::new(ctx, key),
        };
        let owner = owner.map(|r| {
            let s = match r.arg {
                Some(arg) => RStr::borrowed(ctx, arg),
                None => RStr::new(ctx, r.owner),
            };
            (r.owner, s)
        });
        let handle = Key::open(ctx, &name, write);
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut expire_at = None;
        let value = match handle.kind() {
            KeyKind::Empty => LockValue::decode(Stored::Absent),
            KeyKind::Hash => {
                // The owner's own one-field lock, read with HashGet: its count, `Some(None)`
                // when the value is not a positive integer (then the hash is not a lock).
                let single = owner
                    .as_ref()
                    .filter(|_| handle.len() == 1)
                    .and_then(|(_, field)| {
                        let got = handle.hash_get(ctx, field)?;
                        Some(dlock_core::number::positive(got.bytes()))
                    });
                if single.is_none() {
                    handle.hash_scan(|f, v| fields.push((f.to_vec(), v.to_vec())));
                }
                if single.is_none() || need_expire {
                    expire_at = handle.abs_expire();
                }
                match (single, &owner) {
                    (Some(Some(count)), Some((owner, _))) => {
                        let mut x = Exclusive {
                            expire_at,
                            ..Default::default()
                        };
                        x.holders.insert(owner, count);
                        LockValue::Exclusive(x)
                    }
                    (Some(None), _) => LockValue::NotALock,
                    _ => LockValue::decode(Stored::Hash {
                        fields: &fields,
                        expire_at,
                    }),
                }
            }
            KeyKind::String | KeyKind::Other => LockValue::decode(Stored::Other),
        };
        let loaded = match &value {
            LockValue::NotALock | LockValue::Free => Loaded::Empty,
            LockValue::Exclusive(x) if x.holders.len() == 1 && x.fence.is_none() => {
                let (holder, count) = x.holders.iter().next().unwrap();
                match &owner {
                    Some((o, _)) if *o == holder => Loaded::Single(Cow::Borrowed(*o), *count),
                    _ => Loaded::Single(Cow::Owned(holder.to_vec()), *count),
                }
            }
            _ => Loaded::Fields(fields),
        };
        LockKey {
            ctx,
            name,
            handle,
            key,
            owner,
            loaded,
            loaded_expire: expire_at,
            value,
            delay: LockDelay::default(),
            unlock_channel: None,
            saved: false,
        }
    }

    /// HSET of `changed` then HDEL of `removed` (sets first, so the hash never passes through
    /// empty, which would delete it), each written and propagated as one command.
    fn write_fields(&self, changed: &[(RStr, RStr)], removed: &[RStr]) {
        let key = &self.name;
        if !changed.is_empty() {
            let mut args = Vec::with_capacity(1 + 2 * changed.len());
            args.push(key);
            for (f, v) in changed {
                self.handle.hash_set(f, Some(v));
                args.extend([f, v]);
            }
            propagate(self.ctx, CoreWrite::Hset, &args);
        }
        if !removed.is_empty() {
            let mut args = Vec::with_capacity(1 + removed.len());
            args.push(key);
            for f in removed {
                self.handle.hash_set(f, None);
                args.push(f);
            }
            propagate(self.ctx, CoreWrite::Hdel, &args);
        }
    }

    /// Writes what changed since `open`, propagates and announces it (keyspace events,
    /// modified-key signal); writes and announces nothing when nothing changed. Once per unit
    /// of work.
    pub fn save(&mut self) {
        assert!(!self.saved, "a lock key is saved once");
        self.saved = true;
        let expire_at = self.value.expire_at();
        let now_empty = match &self.value {
            LockValue::NotALock => return, // never touch a user's value
            LockValue::Free => true,
            _ => false,
        };
        let was_empty = self.loaded.is_empty();
        let key = &self.name;
        let expire_changes = expire_at != self.loaded_expire || was_empty;
        if now_empty {
            if was_empty {
                return;
            }
            self.handle.delete();
            match self.unlock_channel.take() {
                Some(channel) => replicate::propagate_del_and_publish(self.ctx, key, &channel),
                None => propagate(self.ctx, CoreWrite::Del, &[key]),
            }
        } else {
            let wrote = self.write_changes(expire_changes.then_some(expire_at).flatten());
            if wrote == Wrote::Nothing && expire_at == self.loaded_expire {
                return;
            }
            if expire_changes && wrote != Wrote::FieldsAndExpiry {
                self.handle.set_abs_expire(expire_at);
                match expire_at {
                    Some(at) => propagate_key_int(self.ctx, CoreWrite::PexpireAt, &self.name, at),
                    None => propagate(self.ctx, CoreWrite::Persist, &[&self.name]),
                }
            }
        }
        // Something was written (the early returns above wrote nothing): WATCH and
        // client-side caching see one change, as after a core command.
        signal_modified(self.ctx, &self.name);
        if was_empty != now_empty {
            super::held::track(self.ctx.selected_db(), self.key, !now_empty);
        }
    }

    /// Writes (and propagates) the field changes that turn the stored hash into `value`;
    /// `new_expiry`: the key's new expiry, written with them when that makes one command (a
    /// first hold). Returns what was written.
    fn write_changes(&self, new_expiry: Option<i64>) -> Wrote {
        // The common case, an exclusive lock with one holder before and after: written
        // directly, without encoding the whole value.
        if let LockValue::Exclusive(x) = &self.value {
            if x.holders.len() == 1
                && x.fence.is_none()
                && matches!(self.loaded, Loaded::Empty | Loaded::Single(..))
            {
                let (owner, &count) = x.holders.iter().next().unwrap();
                let same_owner = match &self.loaded {
                    Loaded::Single(o, c) if o.as_ref() == owner => {
                        if *c == count {
                            return Wrote::Nothing;
                        }
                        true
                    }
                    _ => false,
                };
                let key = &self.name;
                // The requester's own field string when it is the holder written.
                let made;
                let f = match &self.owner {
                    Some((o, s)) if *o == owner => s,
                    _ => {
                        made = RStr::new(self.ctx, owner);
                        &made
                    }
                };
                let v = RStr::number(self.ctx, count);
                self.handle.hash_set(f, Some(&v));
                let replaces = !same_owner && matches!(self.loaded, Loaded::Single(..));
                if let (Some(at), false) = (new_expiry, replaces) {
                    self.handle.set_abs_expire(Some(at));
                    replicate::propagate_hset_pexpireat(self.ctx, key, f, &v, at);
                    return Wrote::FieldsAndExpiry;
                }
                propagate(self.ctx, CoreWrite::Hset, &[key, f, &v]);
                if replaces {
                    if let Loaded::Single(old, _) = &self.loaded {
                        let old = RStr::new(self.ctx, old);
                        self.handle.hash_set(&old, None);
                        propagate(self.ctx, CoreWrite::Hdel, &[key, &old]);
                    }
                }
                return Wrote::Fields;
            }
        }
        let fields = self.value.encode();
        let stored = self.loaded.fields();
        let loaded: BTreeMap<&[u8], &[u8]> = stored
            .iter()
            .map(|(f, v)| (f.as_slice(), v.as_slice()))
            .collect();
        let changed: Vec<(RStr, RStr)> = fields
            .iter()
            .filter(|(f, v)| loaded.get(f.as_slice()) != Some(&v.as_slice()))
            .map(|(f, v)| (RStr::new(self.ctx, f), RStr::new(self.ctx, v)))
            .collect();
        let removed: Vec<RStr> = loaded
            .keys()
            .filter(|f| !fields.contains_key(**f))
            .map(|f| RStr::new(self.ctx, f))
            .collect();
        if changed.is_empty() && removed.is_empty() {
            return Wrote::Nothing;
        }
        self.write_fields(&changed, &removed);
        Wrote::Fields
    }

    /// Publishes Redisson's unlock message (`0`) on the unlock channel of this lock, here and
    /// on replicas (as Redisson's unlock script does), when `save` deletes the key: with the
    /// `DEL`, as one propagated command where it can (`replicate::propagate_del_and_publish`).
    pub fn publish_unlock(&mut self, channel_prefix: &str) {
        let key = self.key;
        self.unlock_channel = Some(RStr::written(self.ctx, |out| {
            names::write_unlock_channel(channel_prefix, key, out)
        }));
    }
}

/// The fencing counter of a lock's cluster slot (`names::slot_fence_key`): one sequence that
/// every lock of the slot draws its tokens from, so the state stays one key per slot however
/// many names are fenced. A per-lock counter left by an earlier version
/// (`names::legacy_fence_key`) is absorbed (the slot counter is raised to it, and it is
/// deleted) the first time the lock draws or reads a token.
pub struct FenceCounter<'a> {
    lock_key: &'a [u8],
}

impl<'a> FenceCounter<'a> {
    pub fn of(lock_key: &'a [u8]) -> FenceCounter<'a> {
        FenceCounter { lock_key }
    }

    /// A token for the lock: `advance` takes the next value of the slot's sequence (a fresh
    /// or first fenced exclusive hold), otherwise the current one (READ, nothing written
    /// unless an old counter is absorbed). Changes are replicated as `SET`/`DEL`.
    pub fn token(&self, ctx: Ctx, advance: bool) -> Result<i64, LockError> {
        let slot = RStr::written(ctx, |out| names::write_slot_fence_key(self.lock_key, out));
        let legacy = RStr::written(ctx, |out| names::write_legacy_fence_key(self.lock_key, out));
        let current = read_counter(ctx, &slot)?;
        let old = read_counter(ctx, &legacy)?;
        // While the slot migrates, the counter may already have moved to the other node (or not
        // yet have come here): a counter made now would hand out tokens issued before. Like
        // Redis's multi-key commands in a migrating slot, ask the client to try again.
        if current.is_none()
            && old.is_none()
            && crate::ffi::cluster::slot_in_migration(ctx, names::key_slot(self.lock_key))
        {
            return Err(LockError::FenceMigrating);
        }
        let base = current.unwrap_or(0).max(old.unwrap_or(0));
        let token = if advance {
            base.checked_add(1).ok_or(LockError::FenceOverflow)?
        } else {
            base
        };
        if current != Some(token) && (advance || old.is_some()) {
            let v = RStr::number(ctx, token);
            Key::open(ctx, &slot, true).string_set(&v);
            propagate(ctx, CoreWrite::Set, &[&slot, &v]);
            signal_modified(ctx, &slot);
        }
        if old.is_some() {
            Key::open(ctx, &legacy, true).delete();
            propagate(ctx, CoreWrite::Del, &[&legacy]);
            signal_modified(ctx, &legacy);
        }
        Ok(token)
    }
}

/// A counter key's integer, `None` when it does not exist.
fn read_counter(ctx: Ctx, name: &RStr) -> Result<Option<i64>, LockError> {
    // Most locks of an upgraded server have no old counter: a look-up without opening the key.
    if !Key::exists(ctx, name) {
        return Ok(None);
    }
    let key = Key::open(ctx, name, false);
    let corrupt = || LockError::FenceNotInteger(name.bytes().to_vec());
    match key.kind() {
        KeyKind::Empty => Ok(None),
        KeyKind::String => key
            .with_string_value(dlock_core::number::decimal)
            .map(Some)
            .ok_or_else(corrupt),
        KeyKind::Hash | KeyKind::Other => Err(corrupt()),
    }
}
