//! Reading and writing lock keys through Redis's low-level key API, with every change
//! propagated to replicas and the AOF as plain commands (HSET/HDEL/DEL/PEXPIREAT/SET/PUBLISH).
//!
//! The crate's safe key wrappers are not binary safe for hash fields and cannot read an
//! expiry, so this file owns the few raw calls needed. Redis wraps what one command (or one
//! timer callback) propagates in MULTI/EXEC.

use std::collections::BTreeMap;
use std::ffi::{c_void, CStr, CString};
use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::raw;
use redis_module::Context;

use crate::error::LockError;
use crate::model::{LockValue, Stored};

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
pub struct LockKey {
    ctx: *mut raw::RedisModuleCtx,
    name: RStr,
    handle: *mut raw::RedisModuleKey,
    pub key: Vec<u8>,
    loaded: BTreeMap<Vec<u8>, Vec<u8>>,
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

impl LockKey {
    /// Opens `key` in the context's selected database. Opening for writing deletes an expired
    /// key first (and Redis propagates that DEL before anything we write).
    pub fn open(ctx: &Context, key: &[u8], write: bool) -> LockKey {
        let raw_ctx = ctx.get_raw();
        let name = RStr::new(raw_ctx, key);
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
        let mut expire_at = None;
        let value = if handle.is_null() || key_type == raw::REDISMODULE_KEYTYPE_EMPTY {
            LockValue::decode(Stored::Absent)
        } else if key_type == raw::REDISMODULE_KEYTYPE_HASH {
            unsafe {
                let cursor = raw::RedisModule_ScanCursorCreate.unwrap()();
                let out = (&mut fields as *mut Vec<(Vec<u8>, Vec<u8>)>).cast::<c_void>();
                while raw::RedisModule_ScanKey.unwrap()(handle, cursor, Some(collect_field), out)
                    != 0
                {}
                raw::RedisModule_ScanCursorDestroy.unwrap()(cursor);
                let at = raw::RedisModule_GetAbsExpire.unwrap()(handle);
                expire_at = (at >= 0).then_some(at);
            }
            LockValue::decode(Stored::Hash {
                fields: &fields,
                expire_at,
            })
        } else {
            LockValue::decode(Stored::Other)
        };
        let loaded = match value {
            LockValue::NotALock => BTreeMap::new(),
            _ => fields.into_iter().collect(),
        };
        LockKey {
            ctx: raw_ctx,
            name,
            handle,
            key: key.to_vec(),
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

    /// Writes what changed since `open` (or the last `save`) and propagates it.
    pub fn save(&mut self) {
        if self.value == LockValue::NotALock {
            return; // never touch a user's value
        }
        let fields = self.value.encode();
        let expire_at = self.value.expire_at();
        if fields == self.loaded && (fields.is_empty() || expire_at == self.loaded_expire) {
            return;
        }
        let key = self.name.as_ptr();
        if fields.is_empty() {
            unsafe { raw::RedisModule_DeleteKey.unwrap()(self.handle) };
            replicate(self.ctx, c"DEL", &[key]);
        } else {
            // Sets before deletes, so the hash never passes through empty (deleted).
            let changed: Vec<(RStr, RStr)> = fields
                .iter()
                .filter(|(f, v)| self.loaded.get(*f) != Some(*v))
                .map(|(f, v)| (RStr::new(self.ctx, f), RStr::new(self.ctx, v)))
                .collect();
            if !changed.is_empty() {
                let mut args = Vec::with_capacity(1 + 2 * changed.len());
                args.push(key);
                for (f, v) in &changed {
                    self.hash_set(f, Some(v));
                    args.extend([f.as_ptr(), v.as_ptr()]);
                }
                replicate(self.ctx, c"HSET", &args);
            }
            let removed: Vec<RStr> = self
                .loaded
                .keys()
                .filter(|f| !fields.contains_key(*f))
                .map(|f| RStr::new(self.ctx, f))
                .collect();
            if !removed.is_empty() {
                let mut args = Vec::with_capacity(1 + removed.len());
                args.push(key);
                for f in &removed {
                    self.hash_set(f, None);
                    args.push(f.as_ptr());
                }
                replicate(self.ctx, c"HDEL", &args);
            }
            let recreated = self.loaded.is_empty();
            if expire_at != self.loaded_expire || recreated {
                match expire_at {
                    Some(at) => {
                        unsafe { raw::RedisModule_SetAbsExpire.unwrap()(self.handle, at) };
                        let at = RStr::new(self.ctx, at.to_string().as_bytes());
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
        if self.loaded.is_empty() != fields.is_empty() {
            let db = unsafe { raw::RedisModule_GetSelectedDb.unwrap()(self.ctx) };
            crate::stats::track_held(db, &self.key, !fields.is_empty());
        }
        self.loaded = fields;
        self.loaded_expire = expire_at;
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            unsafe { raw::RedisModule_CloseKey.unwrap()(self.handle) };
        }
        let _ = &self.name;
    }
}

/// The fencing counter of a lock (see `names::fence_key`).
pub struct FenceKey {
    name: Vec<u8>,
}

impl FenceKey {
    pub fn of(lock_key: &[u8]) -> FenceKey {
        FenceKey {
            name: crate::names::fence_key(lock_key),
        }
    }

    fn corrupt(&self) -> LockError {
        LockError::Msg(format!(
            "ERR fencing counter '{}' is not an integer",
            String::from_utf8_lossy(&self.name)
        ))
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
