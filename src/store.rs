//! Reading and writing lock keys through Redis's low-level key API, with every change
//! propagated to replicas and the AOF as plain commands (HSET/HDEL/DEL/PEXPIREAT/SET/PUBLISH).
//!
//! The crate's safe key wrappers are not binary safe for hash fields and cannot read an
//! expiry, so this file owns the few raw calls needed. Redis wraps what one command (or one
//! timer callback) propagates in MULTI/EXEC.

// The raw pointers these helpers take are Redis's own handles (context, strings), valid for
// the duration of the module call that passes them: this file is the FFI boundary.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::collections::BTreeMap;
use std::ffi::{c_void, CStr, CString};
use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::raw;
use redis_module::Context;

use dlock_core::error::LockError;
use dlock_core::model::{Exclusive, LockValue, Stored};

/// A RedisModuleString this module created; freed on drop.
pub struct RStr {
    ctx: *mut raw::RedisModuleCtx,
    ptr: NonNull<raw::RedisModuleString>,
}

impl RStr {
    pub fn new(ctx: *mut raw::RedisModuleCtx, bytes: &[u8]) -> RStr {
        let ptr = unsafe {
            raw::RedisModule_CreateString.unwrap()(ctx, bytes.as_ptr().cast(), bytes.len())
        };
        RStr {
            ctx,
            ptr: NonNull::new(ptr).expect("RedisModule_CreateString"),
        }
    }
    /// Shares a string Redis handed the module (e.g. a command argument) instead of copying
    /// it: one more reference, dropped with this value.
    pub fn retained(ctx: *mut raw::RedisModuleCtx, ptr: NonNull<raw::RedisModuleString>) -> RStr {
        unsafe { raw::RedisModule_RetainString.unwrap()(ctx, ptr.as_ptr()) };
        RStr { ctx, ptr }
    }
    pub fn as_ptr(&self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }
}

impl Drop for RStr {
    fn drop(&mut self) {
        unsafe { raw::RedisModule_FreeString.unwrap()(self.ctx, self.ptr.as_ptr()) }
    }
}

/// The bytes of a RedisModuleString Redis handed us.
pub fn bytes_of<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    unsafe {
        let p = raw::RedisModule_StringPtrLen.unwrap()(s, &mut len);
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}

/// Current time in unix ms, the clock Redis expires keys by.
pub fn now_ms() -> i64 {
    unsafe { raw::RedisModule_Milliseconds.unwrap()() }
}

/// Propagates `cmd args...` to replicas and the AOF (format "v": an array of strings, so the
/// strings already made for the key API are reused).
pub fn replicate(ctx: *mut raw::RedisModuleCtx, cmd: &CStr, args: &[*mut raw::RedisModuleString]) {
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx,
            cmd.as_ptr(),
            c"v".as_ptr(),
            args.as_ptr(),
            args.len(),
        );
    }
}

/// An open lock key: its value as loaded, the value commands change, and the handle that
/// writes the difference back.
pub struct LockKey<'k> {
    ctx: *mut raw::RedisModuleCtx,
    name: RStr,
    handle: *mut raw::RedisModuleKey,
    pub key: &'k [u8],
    /// The hash as stored now.
    loaded: Loaded,
    loaded_expire: Option<i64>,
    /// The value as loaded, then as changed by the lock logic; `save` stores it.
    pub value: LockValue,
}

unsafe extern "C" fn collect_field(
    _key: *mut raw::RedisModuleKey,
    field: *mut raw::RedisModuleString,
    value: *mut raw::RedisModuleString,
    privdata: *mut c_void,
) {
    let out = &mut *(privdata as *mut Vec<(Vec<u8>, Vec<u8>)>);
    out.push((bytes_of(field).to_vec(), bytes_of(value).to_vec()));
}

/// What the key holds in Redis (as loaded, then as last written).
enum Loaded {
    /// No key, or not a lock (never written).
    Empty,
    /// An exclusive lock with one holder: `owner -> count` (the common case, kept without
    /// copies of the stored strings).
    Single(Vec<u8>, i64),
    /// Any other lock hash, field by field.
    Fields(Vec<(Vec<u8>, Vec<u8>)>),
}

impl Loaded {
    fn is_empty(&self) -> bool {
        matches!(self, Loaded::Empty)
    }

    /// The stored fields, for the general diff.
    fn fields(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        match self {
            Loaded::Empty => vec![],
            Loaded::Single(owner, count) => vec![(owner.clone(), count.to_string().into_bytes())],
            Loaded::Fields(f) => f.clone(),
        }
    }
}

/// A number as a Redis string (no Rust formatting, one allocation inside Redis).
fn number(ctx: *mut raw::RedisModuleCtx, n: i64) -> RStr {
    let ptr = unsafe { raw::RedisModule_CreateStringFromLongLong.unwrap()(ctx, n) };
    RStr {
        ctx,
        ptr: NonNull::new(ptr).expect("RedisModule_CreateStringFromLongLong"),
    }
}

impl<'k> LockKey<'k> {
    /// Opens `key` in the context's selected database. Opening for writing deletes an expired
    /// key first (and Redis propagates that DEL before anything we write).
    ///
    /// `name`: the key as the command's own argument string, shared instead of copied.
    /// `owner`: when the key is a one-field hash whose field is this owner (a holder renewing,
    /// re-entering or releasing), one HashGet reads it instead of a scan of the hash.
    pub fn open(
        ctx: &Context,
        key: &'k [u8],
        name: Option<NonNull<raw::RedisModuleString>>,
        write: bool,
        owner: Option<&[u8]>,
    ) -> LockKey<'k> {
        let raw_ctx = ctx.get_raw();
        let name = match name {
            Some(arg) => RStr::retained(raw_ctx, arg),
            None => RStr::new(raw_ctx, key),
        };
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        let handle =
            unsafe { raw::RedisModule_OpenKey.unwrap()(raw_ctx, name.as_ptr(), mode as c_int) }
                .cast::<raw::RedisModuleKey>();
        let key_type = unsafe { raw::RedisModule_KeyType.unwrap()(handle) } as isize;
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        // The owner's own one-field lock, read with HashGet: its count, `Some(None)` when the
        // value is not a positive integer (then the hash is not a lock).
        let mut single: Option<Option<i64>> = None;
        let mut expire_at = None;
        let value = if handle.is_null() || key_type == raw::REDISMODULE_KEYTYPE_EMPTY {
            LockValue::decode(Stored::Absent)
        } else if key_type == raw::REDISMODULE_KEYTYPE_HASH {
            unsafe {
                if let Some(owner) =
                    owner.filter(|_| raw::RedisModule_ValueLength.unwrap()(handle) == 1)
                {
                    let field = RStr::new(raw_ctx, owner);
                    let mut got: *mut raw::RedisModuleString = std::ptr::null_mut();
                    raw::RedisModule_HashGet.unwrap()(
                        handle,
                        raw::REDISMODULE_HASH_NONE as c_int,
                        field.as_ptr(),
                        &mut got as *mut *mut raw::RedisModuleString,
                        std::ptr::null_mut::<c_void>(),
                    );
                    if let Some(got) = NonNull::new(got) {
                        let got = RStr {
                            ctx: raw_ctx,
                            ptr: got,
                        };
                        single = Some(dlock_core::model::positive(bytes_of(got.as_ptr())));
                    }
                }
                if single.is_none() {
                    let cursor = raw::RedisModule_ScanCursorCreate.unwrap()();
                    let out = (&mut fields as *mut Vec<(Vec<u8>, Vec<u8>)>).cast::<c_void>();
                    while raw::RedisModule_ScanKey.unwrap()(
                        handle,
                        cursor,
                        Some(collect_field),
                        out,
                    ) != 0
                    {}
                    raw::RedisModule_ScanCursorDestroy.unwrap()(cursor);
                }
                let at = raw::RedisModule_GetAbsExpire.unwrap()(handle);
                expire_at = (at >= 0).then_some(at);
            }
            match (single, owner) {
                (Some(Some(count)), Some(owner)) => {
                    let mut x = Exclusive {
                        expire_at,
                        ..Default::default()
                    };
                    x.holders.insert(owner.to_vec(), count);
                    LockValue::Exclusive(x)
                }
                (Some(None), _) => LockValue::NotALock,
                _ => LockValue::decode(Stored::Hash {
                    fields: &fields,
                    expire_at,
                }),
            }
        } else {
            LockValue::decode(Stored::Other)
        };
        let loaded = match &value {
            LockValue::NotALock | LockValue::Free => Loaded::Empty,
            LockValue::Exclusive(x) if x.holders.len() == 1 => {
                let (owner, count) = x.holders.iter().next().unwrap();
                Loaded::Single(owner.clone(), *count)
            }
            _ => Loaded::Fields(fields),
        };
        LockKey {
            ctx: raw_ctx,
            name,
            handle,
            key,
            loaded,
            loaded_expire: expire_at,
            value,
        }
    }

    fn hash_set(&self, field: &RStr, value: Option<&RStr>) {
        let vptr = value.map_or(raw::REDISMODULE_HASH_DELETE.cast_mut(), RStr::as_ptr);
        unsafe {
            raw::RedisModule_HashSet.unwrap()(
                self.handle,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.as_ptr(),
                vptr,
                std::ptr::null_mut::<c_void>(),
            );
        }
    }

    /// HSET of `changed` then HDEL of `removed` (sets first, so the hash never passes through
    /// empty, which would delete it), each written and propagated as one command.
    fn write_fields(&self, changed: &[(RStr, RStr)], removed: &[RStr]) {
        let key = self.name.as_ptr();
        if !changed.is_empty() {
            let mut args = Vec::with_capacity(1 + 2 * changed.len());
            args.push(key);
            for (f, v) in changed {
                self.hash_set(f, Some(v));
                args.extend([f.as_ptr(), v.as_ptr()]);
            }
            replicate(self.ctx, c"HSET", &args);
        }
        if !removed.is_empty() {
            let mut args = Vec::with_capacity(1 + removed.len());
            args.push(key);
            for f in removed {
                self.hash_set(f, None);
                args.push(f.as_ptr());
            }
            replicate(self.ctx, c"HDEL", &args);
        }
    }

    /// Writes what changed since `open` (or the last `save`) and propagates it.
    pub fn save(&mut self) {
        let expire_at = self.value.expire_at();
        let now_empty = match &self.value {
            LockValue::NotALock => return, // never touch a user's value
            LockValue::Free => true,
            _ => false,
        };
        let was_empty = self.loaded.is_empty();
        let key = self.name.as_ptr();
        if now_empty {
            if was_empty {
                return;
            }
            unsafe { raw::RedisModule_DeleteKey.unwrap()(self.handle) };
            replicate(self.ctx, c"DEL", &[key]);
            self.loaded = Loaded::Empty;
        } else {
            if !self.write_changes() && expire_at == self.loaded_expire {
                return;
            }
            if expire_at != self.loaded_expire || was_empty {
                match expire_at {
                    Some(at) => {
                        unsafe { raw::RedisModule_SetAbsExpire.unwrap()(self.handle, at) };
                        let at = number(self.ctx, at);
                        replicate(self.ctx, c"PEXPIREAT", &[key, at.as_ptr()]);
                    }
                    None => {
                        unsafe {
                            raw::RedisModule_SetExpire.unwrap()(
                                self.handle,
                                raw::REDISMODULE_NO_EXPIRE.into(),
                            )
                        };
                        replicate(self.ctx, c"PERSIST", &[key]);
                    }
                }
            }
        }
        if was_empty != now_empty {
            let db = unsafe { raw::RedisModule_GetSelectedDb.unwrap()(self.ctx) };
            crate::stats::track_held(db, self.key, !now_empty);
        }
        self.loaded_expire = expire_at;
    }

    /// Writes (and propagates) the field changes that turn the stored hash into `value`.
    /// Returns whether anything was written.
    fn write_changes(&mut self) -> bool {
        // The common case, an exclusive lock with one holder before and after: written
        // directly, without encoding the whole value.
        if let LockValue::Exclusive(x) = &self.value {
            if x.holders.len() == 1 && matches!(self.loaded, Loaded::Empty | Loaded::Single(..)) {
                let (owner, &count) = x.holders.iter().next().unwrap();
                let same_owner = match &self.loaded {
                    Loaded::Single(o, c) if o == owner => {
                        if *c == count {
                            return false;
                        }
                        true
                    }
                    _ => false,
                };
                let key = self.name.as_ptr();
                let (f, v) = (RStr::new(self.ctx, owner), number(self.ctx, count));
                self.hash_set(&f, Some(&v));
                replicate(self.ctx, c"HSET", &[key, f.as_ptr(), v.as_ptr()]);
                if same_owner {
                    if let Loaded::Single(_, c) = &mut self.loaded {
                        *c = count;
                    }
                } else {
                    if let Loaded::Single(old, _) = &self.loaded {
                        let old = RStr::new(self.ctx, old);
                        self.hash_set(&old, None);
                        replicate(self.ctx, c"HDEL", &[key, old.as_ptr()]);
                    }
                    self.loaded = Loaded::Single(owner.clone(), count);
                }
                return true;
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
            return false;
        }
        self.write_fields(&changed, &removed);
        self.loaded = Loaded::Fields(fields.into_iter().collect());
        true
    }
}

impl Drop for LockKey<'_> {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            unsafe { raw::RedisModule_CloseKey.unwrap()(self.handle) };
        }
    }
}

/// The fencing counter of a lock (see `names::fence_key`).
pub struct FenceKey {
    name: Vec<u8>,
}

impl FenceKey {
    pub fn of(lock_key: &[u8]) -> FenceKey {
        FenceKey {
            name: dlock_core::names::fence_key(lock_key),
        }
    }

    fn corrupt(&self) -> LockError {
        LockError::FenceNotInteger(self.name.clone())
    }

    /// The counter, `None` when it does not exist.
    pub fn get(&self, ctx: &Context) -> Result<Option<i64>, LockError> {
        let raw_ctx = ctx.get_raw();
        let name = RStr::new(raw_ctx, &self.name);
        unsafe {
            let k = raw::RedisModule_OpenKey.unwrap()(
                raw_ctx,
                name.as_ptr(),
                raw::REDISMODULE_READ as c_int,
            )
            .cast::<raw::RedisModuleKey>();
            let t = raw::RedisModule_KeyType.unwrap()(k) as isize;
            let result = if k.is_null() || t == raw::REDISMODULE_KEYTYPE_EMPTY {
                Ok(None)
            } else if t != raw::REDISMODULE_KEYTYPE_STRING {
                Err(self.corrupt())
            } else {
                let mut len = 0usize;
                let p = raw::RedisModule_StringDMA.unwrap()(
                    k,
                    &mut len,
                    raw::REDISMODULE_READ as c_int,
                );
                let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len);
                std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .map(Some)
                    .ok_or_else(|| self.corrupt())
            };
            if !k.is_null() {
                raw::RedisModule_CloseKey.unwrap()(k);
            }
            result
        }
    }

    /// Sets the counter (replicated as `SET name value`).
    pub fn set(&self, ctx: &Context, value: i64) {
        let raw_ctx = ctx.get_raw();
        let name = RStr::new(raw_ctx, &self.name);
        let text = value.to_string();
        let v = RStr::new(raw_ctx, text.as_bytes());
        unsafe {
            let k = raw::RedisModule_OpenKey.unwrap()(
                raw_ctx,
                name.as_ptr(),
                (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int,
            )
            .cast::<raw::RedisModuleKey>();
            raw::RedisModule_StringSet.unwrap()(k, v.as_ptr());
            raw::RedisModule_CloseKey.unwrap()(k);
        }
        replicate(raw_ctx, c"SET", &[name.as_ptr(), v.as_ptr()]);
    }
}

/// Publishes `message` on `channel` here and on replicas (as Redisson's unlock script does).
pub fn publish(ctx: &Context, channel: &[u8], message: &[u8]) {
    let raw_ctx = ctx.get_raw();
    let c = RStr::new(raw_ctx, channel);
    let m = RStr::new(raw_ctx, message);
    unsafe { raw::RedisModule_PublishMessage.unwrap()(raw_ctx, c.as_ptr(), m.as_ptr()) };
    replicate(raw_ctx, c"PUBLISH", &[c.as_ptr(), m.as_ptr()]);
}

/// Selects database `db` for this context (timer and event contexts start in db 0).
pub fn select_db(ctx: &Context, db: i32) {
    unsafe { raw::RedisModule_SelectDb.unwrap()(ctx.get_raw(), db) };
}

pub fn selected_db(ctx: &Context) -> i32 {
    unsafe { raw::RedisModule_GetSelectedDb.unwrap()(ctx.get_raw()) }
}

/// A C string for log lines.
pub fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap()
}
