//! The module's `INFO` section.

use std::os::raw::c_int;

use redis_module::raw;

use super::{api, Ctx};

/// Produces the fields of the module's INFO section.
pub trait InfoSection {
    /// `(name, value)` pairs; Redis prefixes each name with the module name.
    fn fields() -> Vec<(&'static str, u64)>;
}

/// Registers `S` as the module's INFO section (`INFO dlock`). `ctx` must be the
/// `RedisModule_OnLoad` context (Redis takes the callback from no other).
pub fn register<S: InfoSection>(ctx: Ctx) {
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
    // SAFETY: a live context; the callback has the signature Redis expects.
    unsafe { api!(RedisModule_RegisterInfoFunc)(ctx.as_ptr(), Some(info::<S>)) };
}
