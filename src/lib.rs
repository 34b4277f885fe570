//! dlock: distributed locks done natively inside Redis.
//!
//! This file only registers; see `docs/DESIGN.md` for how the parts fit. The rules without
//! Redis (arguments, error texts, lock model, grant rules, names) are in the `dlock-core`
//! crate; here: `commands` (handlers) with `store` (key I/O + replication), `waiters` (queues
//! and the one grant path), `blocking` (raw blocking/timer layer), `events` (wake sources),
//! `config`, `stats`.

pub mod blocking;
pub mod command_docs;
pub mod commands;
pub mod config;
pub mod events;
pub mod stats;
pub mod store;
pub mod waiters;

// Unit tests run without Redis, so they must not install Redis's allocator.
//
// Registration is written out instead of using `redis_module!`: the macro also creates a
// detached thread-safe context on every load that nothing frees on MODULE UNLOAD (~16 KB lost
// per reload), and subscribes to server events (cron, config, ...) that dlock does not use.
#[cfg(not(test))]
mod registration {
    use std::ffi::{CStr, CString};
    use std::os::raw::c_int;

    use redis_module::{raw, Context, RedisString, Status};

    use crate::stats::{Stats, STATS};
    use crate::{command_docs, commands, config, events, store, waiters};

    #[global_allocator]
    static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;

    fn init(ctx: &Context, args: &[RedisString]) -> Status {
        let words: Vec<String> = args.iter().map(|a| a.to_string_lossy()).collect();
        match config::Config::parse(&words) {
            Ok(c) => config::set(c),
            Err(line) => {
                log_warning(ctx, &line);
                return Status::Err;
            }
        }
        if let Err(line) = events::subscribe(ctx) {
            log_warning(ctx, &line);
            return Status::Err;
        }
        unsafe { raw::RedisModule_RegisterInfoFunc.unwrap()(ctx.get_raw(), Some(info)) };
        Status::Ok
    }

    /// Logs through this load's own context (the crate's logger keeps the context of the first
    /// load, so after MODULE UNLOAD + LOAD its lines were lost).
    fn log_warning(ctx: &Context, line: &str) {
        let level = CString::new("warning").unwrap();
        let fmt = CString::new("%s").unwrap();
        let text = store::cstring(line);
        unsafe {
            raw::RedisModule_Log.unwrap()(
                ctx.get_raw(),
                level.as_ptr(),
                fmt.as_ptr(),
                text.as_ptr(),
            )
        };
    }

    /// The `INFO dlock` section; Redis prefixes each field with the module name (`dlock_grants`).
    unsafe extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
        raw::RedisModule_InfoAddSection.unwrap()(ctx, std::ptr::null_mut());
        let (p50, p99, p999, max) = crate::stats::wait_percentiles();
        let fields = [
            ("grants", Stats::get(&STATS.grants)),
            ("reentrant_grants", Stats::get(&STATS.reentrant_grants)),
            ("releases", Stats::get(&STATS.releases)),
            ("renewals", Stats::get(&STATS.renewals)),
            ("handoffs", Stats::get(&STATS.handoffs)),
            ("waiters", waiters::waiting() as u64),
            ("wait_timeouts", Stats::get(&STATS.wait_timeouts)),
            ("leases_expired", Stats::get(&STATS.leases_expired)),
            ("errors", Stats::get(&STATS.errors)),
            ("wait_p50_us", p50),
            ("wait_p99_us", p99),
            ("wait_p999_us", p999),
            ("wait_max_us", max),
        ];
        for (name, value) in fields {
            let name = CString::new(name).unwrap();
            raw::RedisModule_InfoAddFieldLongLong.unwrap()(ctx, name.as_ptr(), value as i64);
        }
    }

    /// Called by Redis on `MODULE UNLOAD` (refused while clients wait). Frees what lives in
    /// statics and would otherwise outlive the unloaded library.
    ///
    /// # Safety
    /// Called by Redis only, on its main thread.
    #[no_mangle]
    pub unsafe extern "C" fn RedisModule_OnUnload(_ctx: *mut raw::RedisModuleCtx) -> c_int {
        crate::stats::free_wait_times();
        raw::Status::Ok as c_int
    }

    /// Called by Redis on `loadmodule` / `MODULE LOAD`.
    ///
    /// # Safety
    /// Redis passes a valid context and `argc` module arguments.
    #[no_mangle]
    pub unsafe extern "C" fn RedisModule_OnLoad(
        ctx: *mut raw::RedisModuleCtx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> c_int {
        let err = raw::Status::Err as c_int;
        if raw::Export_RedisModule_Init(
            ctx,
            c"dlock".as_ptr(),
            1,
            raw::REDISMODULE_APIVER_1 as c_int,
        ) == err
        {
            return err;
        }
        let args = redis_module::decode_args(ctx, argv, argc);
        if init(&Context::new(ctx), &args) == Status::Err {
            return err;
        }
        // Legacy key positions (first 1, last 1, step 1); `command_docs` then replaces the
        // derived key spec with one carrying the right access flags (COMMAND GETKEYS, ACL key
        // patterns and cluster routing work either way).
        let table: [(&CStr, raw::RedisModuleCmdFunc, &CStr); 5] = [
            (
                c"dlock.acquire",
                Some(commands::entry::acquire),
                c"write deny-oom",
            ),
            (
                c"dlock.rwlock",
                Some(commands::entry::rwlock),
                c"write deny-oom",
            ),
            (
                c"dlock.release",
                Some(commands::entry::release),
                c"write fast",
            ),
            (c"dlock.renew", Some(commands::entry::renew), c"write fast"),
            (c"dlock.info", Some(commands::entry::info), c"readonly fast"),
        ];
        for (name, handler, flags) in table {
            if raw::RedisModule_CreateCommand.unwrap()(
                ctx,
                name.as_ptr(),
                handler,
                flags.as_ptr(),
                1,
                1,
                1,
            ) == err
            {
                log_warning(
                    &Context::new(ctx),
                    &format!("cannot create command {name:?}"),
                );
                return err;
            }
        }
        // COMMAND DOCS / COMMAND INFO, arity, key-spec flags and (7.2+) ACL categories.
        if let Err(line) = unsafe { command_docs::describe(ctx) } {
            log_warning(&Context::new(ctx), &line);
            return err;
        }
        raw::Status::Ok as c_int
    }
}
