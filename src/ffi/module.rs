//! Loading: the module's registration with Redis and its load-time arguments.

use std::os::raw::c_int;

use redis_module::raw;

use super::string::bytes_of;
use super::{api, cluster, Ctx};

/// The crate version as Redis modules number theirs (RedisJSON, RediSearch): major * 10000 +
/// minor * 100 + patch, so `MODULE LIST` shows 0.1.0 as `ver 100` and 1.2.3 as 10203.
pub const VERSION: c_int = version_number(env!("CARGO_PKG_VERSION"));

const fn version_number(v: &str) -> c_int {
    let (mut parts, mut part, mut i) = ([0; 3], 0, 0);
    let b = v.as_bytes();
    // Stops at a pre-release or build suffix (`-rc.1`, `+x`).
    while i < b.len() && part < 3 && (b[i].is_ascii_digit() || b[i] == b'.') {
        if b[i] == b'.' {
            part += 1;
        } else {
            parts[part] = parts[part] * 10 + (b[i] - b'0') as c_int;
        }
        i += 1;
    }
    parts[0] * 10000 + parts[1] * 100 + parts[2]
}

/// `RedisModule_Init`: fills in the API and registers the module as `dlock`, [`VERSION`].
///
/// # Safety
/// `ctx` is the context passed to `RedisModule_OnLoad`.
pub unsafe fn init(ctx: *mut raw::RedisModuleCtx) -> Result<(), ()> {
    // SAFETY: the OnLoad context (caller); this is the first API call, as Redis requires.
    let status = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            c"dlock".as_ptr(),
            VERSION,
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

/// Declares the module options (`RedisModule_SetModuleOptions`, Redis 7.0+): what dlock
/// handles itself, so that the server does not fall back to something slower.
///
/// - `HANDLE_REPL_ASYNC_LOAD`: a replica with `repl-diskless-load swapdb` may load the
///   master's data from the socket into a temporary database while it keeps serving reads
///   from the old one. dlock is correct meanwhile: an instance that is a replica or loading
///   (sync or async) never writes on its own (`Ctx::may_write`), DLOCK.INFO reads the old data
///   as HGETALL would, writes are refused as on any read-only replica, and when the loaded data
///   set replaces the old one (`events`) the module forgets what it knew of the old keys.
///   Without it the server logs "Skipping diskless-load because there are modules that are not
///   aware of async replication" and loads from disk.
/// - `NO_IMPLICIT_SIGNAL_MODIFIED`: Redis does not signal every key opened for writing as
///   modified when it is closed; the module signals real changes itself (`notify`), so a
///   refused acquire, a release by a non-holder or an error does not abort WATCH.
///
/// - `HANDLE_ATOMIC_SLOT_MIGRATION` (Valkey 9+ only: the bit means nothing, or something else,
///   elsewhere): `CLUSTER MIGRATESLOTS` is allowed. Locks are plain hashes with an absolute
///   expiry and the module's writes are plain commands, so they reach the target through the
///   migration stream as they are; keys loaded on the target before it owns the slot have no
///   queue there; on the source, waiters of keys that left get the redirect and nothing is
///   re-created in a slot this node no longer serves (`engine::wake`, `cluster::route`).
///
/// # Safety
/// `ctx` is the context passed to `RedisModule_OnLoad`.
pub unsafe fn declare_options(ctx: *mut raw::RedisModuleCtx) {
    // SAFETY: the OnLoad context (caller).
    let slot_migration = cluster::server_has_atomic_slot_migration(unsafe { Ctx::from_raw(ctx) });
    let options = (raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED) as c_int
        | if slot_migration {
            cluster::HANDLE_ATOMIC_SLOT_MIGRATION
        } else {
            0
        };
    // SAFETY: the OnLoad context (caller); the call only stores the flags.
    unsafe { api!(RedisModule_SetModuleOptions)(ctx, options) };
}
