//! Keys opened through Redis's low-level key API (`RedisModuleKey`): type, hash fields,
//! expiry, string values. The crate's own key wrappers are not binary safe for hash fields
//! and cannot read an expiry, hence these.

use std::ffi::c_void;
use std::os::raw::c_int;

use redis_module::raw;

use super::string::bytes_of;
use super::{api, Ctx, RStr};

/// What a key holds, as far as dlock cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    Hash,
    String,
    Other,
}

/// An open key; closed on drop.
pub struct Key {
    /// Null when Redis could not open the key for reading (it does not exist).
    handle: *mut raw::RedisModuleKey,
}

impl Key {
    /// Opens `name` in the context's selected database. Opening for writing deletes an
    /// expired key first (and Redis propagates that DEL before anything the module writes).
    pub fn open(ctx: Ctx, name: &RStr, write: bool) -> Key {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: a live context and string; the handle is closed on drop, before the
        // callback returns.
        let handle =
            unsafe { api!(RedisModule_OpenKey)(ctx.as_ptr(), name.as_ptr(), mode as c_int) };
        Key {
            handle: handle.cast::<raw::RedisModuleKey>(),
        }
    }

    /// Whether `name` exists in the context's database, without opening it (no key handle,
    /// no access-time update, no notification).
    pub fn exists(ctx: Ctx, name: &RStr) -> bool {
        // SAFETY: a live context and string.
        unsafe { api!(RedisModule_KeyExists)(ctx.as_ptr(), name.as_ptr()) != 0 }
    }

    pub fn kind(&self) -> KeyKind {
        if self.handle.is_null() {
            return KeyKind::Empty;
        }
        // SAFETY: an open key.
        let t = unsafe { api!(RedisModule_KeyType)(self.handle) } as isize;
        match t {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_HASH => KeyKind::Hash,
            raw::REDISMODULE_KEYTYPE_STRING => KeyKind::String,
            _ => KeyKind::Other,
        }
    }

    /// Number of fields of a hash (0 for an empty key).
    pub fn len(&self) -> usize {
        if self.handle.is_null() {
            return 0;
        }
        // SAFETY: an open key.
        unsafe { api!(RedisModule_ValueLength)(self.handle) }
    }

    /// HGET of one field of a hash.
    pub fn hash_get(&self, ctx: Ctx, field: &RStr) -> Option<RStr> {
        let mut got: *mut raw::RedisModuleString = std::ptr::null_mut();
        // SAFETY: an open hash key; the NULL-terminated variadic list is one (field, out)
        // pair; Redis gives the caller one reference to the value, which `RStr` releases.
        unsafe {
            api!(RedisModule_HashGet)(
                self.handle,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.as_ptr(),
                &mut got as *mut *mut raw::RedisModuleString,
                std::ptr::null_mut::<c_void>(),
            );
        }
        (!got.is_null()).then(|| RStr::owned(ctx, got))
    }

    /// Calls `each(field, value)` for every field of a hash.
    pub fn hash_scan<F: FnMut(&[u8], &[u8])>(&self, mut each: F) {
        unsafe extern "C" fn visit<G: FnMut(&[u8], &[u8])>(
            _key: *mut raw::RedisModuleKey,
            field: *mut raw::RedisModuleString,
            value: *mut raw::RedisModuleString,
            privdata: *mut c_void,
        ) {
            // SAFETY: `privdata` is the `F` passed below, alive for the whole scan; Redis
            // passes live strings for the duration of this call.
            unsafe {
                let each = &mut *privdata.cast::<G>();
                each(bytes_of(field), bytes_of(value));
            }
        }
        // SAFETY: an open hash key; the cursor is destroyed below; the closure outlives the
        // scan loop.
        unsafe {
            let cursor = api!(RedisModule_ScanCursorCreate)();
            let data = (&mut each as *mut F).cast::<c_void>();
            while api!(RedisModule_ScanKey)(self.handle, cursor, Some(visit::<F>), data) != 0 {}
            api!(RedisModule_ScanCursorDestroy)(cursor);
        }
    }

    /// The key's absolute expiry (unix ms), `None` without one (or without the key:
    /// Redis 8.2's `RM_GetAbsExpire` reads the value without checking it exists, so an
    /// empty key is never asked).
    pub fn abs_expire(&self) -> Option<i64> {
        if self.kind() == KeyKind::Empty {
            return None;
        }
        // SAFETY: an open key that exists.
        let at = unsafe { api!(RedisModule_GetAbsExpire)(self.handle) };
        (at >= 0).then_some(at)
    }

    /// HSET `field` `value`, or HDEL `field` with `None`.
    pub fn hash_set(&self, field: &RStr, value: Option<&RStr>) {
        let value = value.map_or(raw::REDISMODULE_HASH_DELETE.cast_mut(), RStr::as_ptr);
        // SAFETY: a key open for writing; one (field, value) pair, NULL-terminated.
        unsafe {
            api!(RedisModule_HashSet)(
                self.handle,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.as_ptr(),
                value,
                std::ptr::null_mut::<c_void>(),
            );
        }
    }

    pub fn delete(&self) {
        // SAFETY: a key open for writing.
        unsafe { api!(RedisModule_DeleteKey)(self.handle) };
    }

    /// PEXPIREAT `at`, or PERSIST with `None`.
    pub fn set_abs_expire(&self, at: Option<i64>) {
        // SAFETY: a key open for writing that exists.
        unsafe {
            match at {
                Some(at) => api!(RedisModule_SetAbsExpire)(self.handle, at),
                None => api!(RedisModule_SetExpire)(self.handle, raw::REDISMODULE_NO_EXPIRE.into()),
            }
        };
    }

    /// Reads the value of a string key in place.
    pub fn with_string_value<R>(&self, read: impl FnOnce(&[u8]) -> R) -> R {
        let mut len = 0usize;
        // SAFETY: an open string key; the buffer is valid for `len` bytes until the key is
        // closed or written, and `read` cannot do either (it has no access to the key).
        let bytes = unsafe {
            let p =
                api!(RedisModule_StringDMA)(self.handle, &mut len, raw::REDISMODULE_READ as c_int);
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        };
        read(bytes)
    }

    /// SET the key to `value` (keeps no TTL, like SET).
    pub fn string_set(&self, value: &RStr) {
        // SAFETY: a key open for writing.
        unsafe { api!(RedisModule_StringSet)(self.handle, value.as_ptr()) };
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: the key was opened by `open` and is closed once.
            unsafe { api!(RedisModule_CloseKey)(self.handle) };
        }
    }
}

/// A cursor over the keys of a database (`RedisModule_Scan`), kept between calls so that a
/// long walk can be spread over timer ticks; destroyed on drop.
pub struct KeyCursor(*mut raw::RedisModuleScanCursor);

// SAFETY: Redis calls the module from its main thread only (see `ffi`): the cursor is created,
// used and destroyed there; `Send` only lets it sit in a static behind a mutex.
unsafe impl Send for KeyCursor {}

impl KeyCursor {
    pub fn new() -> KeyCursor {
        // SAFETY: no precondition; the cursor is destroyed on drop.
        KeyCursor(unsafe { api!(RedisModule_ScanCursorCreate)() })
    }

    /// One step of the walk over the context's selected database: `each(name)` for the few
    /// keys of the step. `false` once the walk is complete. Keys present for the whole walk
    /// are each seen at least once.
    pub fn step<F: FnMut(&[u8])>(&self, ctx: Ctx, mut each: F) -> bool {
        unsafe extern "C" fn visit<G: FnMut(&[u8])>(
            _ctx: *mut raw::RedisModuleCtx,
            name: *mut raw::RedisModuleString,
            _key: *mut raw::RedisModuleKey,
            privdata: *mut c_void,
        ) {
            // SAFETY: `privdata` is the `F` passed below, alive for the call; Redis passes a
            // live string for the duration of this call.
            unsafe { (*privdata.cast::<G>())(bytes_of(name)) }
        }
        let data = (&mut each as *mut F).cast::<c_void>();
        // SAFETY: a live context and cursor; the closure outlives the call.
        unsafe { api!(RedisModule_Scan)(ctx.as_ptr(), self.0, Some(visit::<F>), data) != 0 }
    }
}

impl Default for KeyCursor {
    fn default() -> Self {
        KeyCursor::new()
    }
}

impl Drop for KeyCursor {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once.
        unsafe { api!(RedisModule_ScanCursorDestroy)(self.0) };
    }
}
