//! The module's `INFO` section.

use std::os::raw::c_int;

use redis_module::raw;

use super::api;

/// Produces the fields of the module's INFO section.
pub trait InfoSection {
    /// `(name, value)` pairs; Redis prefixes each name with the module name.
    fn fields() -> Vec<(&'static str, u64)>;
}

/// Registers `S` as the module's INFO section (`INFO dlock`).
///
/// # Safety
/// `ctx` is the context passed to `RedisModule_OnLoad`.
pub unsafe fn register<S: InfoSection>(ctx: *mut raw::RedisModuleCtx) {
    unsafe extern "C" fn info<S: InfoSection>(
        ctx: *mut raw::RedisModuleInfoCtx,
        _for_crash_report: c_int,
    ) {
        // SAFETY: Redis passes a live INFO context; names are NUL-terminated and live for
        // each call.
        unsafe {
            api!(RedisModule_InfoAddSection)(ctx, std::ptr::null_mut());
            for (name, value) in S::fields() {
                let name = std::ffi::CString::new(name).expect("field names have no NUL");
                api!(RedisModule_InfoAddFieldLongLong)(ctx, name.as_ptr(), value as i64);
            }
        }
    }
    // SAFETY: the OnLoad context (caller); the callback has the signature Redis expects.
    unsafe { api!(RedisModule_RegisterInfoFunc)(ctx, Some(info::<S>)) };
}
