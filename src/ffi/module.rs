//! Loading: the module's registration with Redis and its load-time arguments.

use std::os::raw::c_int;

use redis_module::raw;

use super::string::bytes_of;

/// `RedisModule_Init`: fills in the API and registers the module as `dlock` version 1.
///
/// # Safety
/// `ctx` is the context passed to `RedisModule_OnLoad`.
pub unsafe fn init(ctx: *mut raw::RedisModuleCtx) -> Result<(), ()> {
    // SAFETY: the OnLoad context (caller); this is the first API call, as Redis requires.
    let status = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            c"dlock".as_ptr(),
            1,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if status == raw::REDISMODULE_ERR as c_int {
        return Err(());
    }
    Ok(())
}

/// The module arguments (`loadmodule libdlock.so name value ...`) as text.
///
/// # Safety
/// `argv` holds `argc` live strings (as passed to `RedisModule_OnLoad`).
pub unsafe fn args(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Vec<String> {
    // SAFETY: `argc` live strings (caller).
    let argv = unsafe { std::slice::from_raw_parts(argv, argc.max(0) as usize) };
    argv.iter()
        // SAFETY: each string lives for the load call (caller).
        .map(|a| String::from_utf8_lossy(unsafe { bytes_of(*a) }).into_owned())
        .collect()
}
