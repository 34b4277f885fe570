//! dlock: distributed locks done natively inside Redis.
//!
//! This file only loads and unloads; see `docs/DESIGN.md` for how the parts fit.
//!
//! # Layers
//!
//! Dependencies run one way. Each module below uses only the modules listed before it, and
//! each file of a nested list only the files listed before it in that list (a module without
//! a nested list is one layer inside). This list is the one statement of the rule:
//! `tests/layering.rs` reads it and every `crate::` / `super::` path under `src/`, and fails
//! on an import against the order or on a module or engine file the list does not place.
//!
//! 1. `dlock_core` (its own crate, no Redis): arguments, error texts, lock model, grant
//!    rules, the queue policy, the deadlock search, names;
//! 2. `ffi`: the only code that calls `RedisModule_*` (commands are registered there, in one
//!    loop over `commands::ALL`);
//! 3. `config`: the configuration in force;
//! 4. `stats`: INFO counters, which the layers above report to;
//! 5. `engine`: everything between a command's parsed request and Redis's key API:
//!    1. `job`: why each engine timer was armed (plain data; `fire` runs them);
//!    2. `queue`: one key's waiter queue and its waiters, each with the terms it asked
//!       (plain data);
//!    3. `registry`: the module's one registry of the queues, with its client and owner
//!       indexes (plain data, unit-tested without a server), behind its lock;
//!    4. `wake`: the keys that have a queue, those marked by events, the poll (when it is
//!       due, and what it looks at: it only reads and marks);
//!    5. `delay_keys`: where LOCKDELAY's companion keys may exist at all;
//!    6. `delay`: LOCKDELAY's companion key, loaded and saved with the lock;
//!    7. `held`: the lock keys granted here and not yet gone (an expiry of one counts);
//!    8. `store`: lock keys and fencing counters as Redis holds them, written and propagated;
//!    9. `unlock`: whether a freed lock's unlock message goes out now (`publish auto`), and
//!       the messages held back while nobody subscribed;
//!    10. `bind`: holds bound to a connection (BIND), and the lease cuts due when one closes;
//!    11. `listen`: what the module subscribes to on each server version and when, and the
//!        handlers of those events (they only mark keys or arm timers);
//!    12. `blocked`: a waiter's life: blocking a client (limits, timer, watch) and every
//!        answer (grant, time-out, redirect, the client leaving); the only file that blocks
//!        or unblocks a client;
//!    13. `deadlock`: the cycle a WAIT request would close, found before it queues;
//!    14. `work`: the unit of work every writing command and every wake-up goes through, and
//!        the one grant step;
//!    15. `fire`: what each timer does when it fires, through the unit of work;
//!    16. `acquire`: the wait policy of a request for a hold (granted now, queued, or not);
//!    17. `scripts`: which calls are Redisson's lock scripts, the command filter that hands
//!        them to DLOCK.REDISSON, and the ACL guard on serving them natively;
//!    18. `redisson_keys`: what Redisson's scripts served natively do to keys (reads, writes
//!        with their events and propagation);
//!    19. `redisson_rwlock`: `RReadWriteLock`'s scripts run natively;
//!    20. `redisson`: Redisson's lock scripts run natively (or, where they must, as Lua);
//! 6. `commands`: one file per command, each with its declaration;
//! 7. `lib` (this file): load and unload.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
// Unit tests build without the registration below, which is what uses the handlers.
#![cfg_attr(test, allow(dead_code, unused_imports))]

mod commands;
mod config;
mod engine;
mod ffi;
mod stats;

// Unit tests run without Redis, so they must not install Redis's allocator.
//
// Registration is written out instead of using `redis_module!`: the macro also creates a
// detached thread-safe context on every load that nothing frees on MODULE UNLOAD (~16 KB lost
// per reload), and subscribes to server events (cron, config, ...) that dlock does not use.
#[cfg(not(test))]
mod registration {
    use std::os::raw::c_int;

    use redis_module::raw;

    use crate::ffi::{command, filter, info, module, string, Ctx};
    use crate::{commands, config, engine, stats};

    #[global_allocator]
    static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;

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
        // SAFETY: Redis's OnLoad arguments (see above) are what these calls need.
        match unsafe { load(ctx, argv, argc) } {
            Ok(()) => raw::REDISMODULE_OK as c_int,
            Err(()) => raw::REDISMODULE_ERR as c_int,
        }
    }

    /// # Safety
    /// As `RedisModule_OnLoad`.
    unsafe fn load(
        ctx: *mut raw::RedisModuleCtx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> Result<(), ()> {
        // SAFETY: the OnLoad context, first call.
        unsafe { module::init(ctx)? };
        // SAFETY: the OnLoad context.
        unsafe { module::declare_options(ctx) };
        // SAFETY: the OnLoad context, initialised.
        let c = unsafe { Ctx::from_raw(ctx) };
        // SAFETY: the OnLoad arguments.
        let words = unsafe { module::args(argv, argc) };
        let fail = |line: String| c.log_warning(&line);
        config::set(config::Config::parse(&words).map_err(fail)?);
        // Every event the module hears, also those that tell `targets` whether anything
        // receives propagation (skipped while nothing would: no AOF, no replication).
        engine::listen::subscribe(c).map_err(fail)?;
        // The INFO section, and every command with its COMMAND DOCS / INFO as each declares
        // itself.
        info::register::<stats::Info>(c);
        command::register(c, commands::ALL).map_err(fail)?;
        // Redisson's lock scripts: with `redisson lua`, no filter at all.
        if config::get().redisson == config::Redisson::Native {
            filter::register::<engine::scripts::Recognise>(c, engine::scripts::COMMAND)
                .map_err(fail)?;
            engine::scripts::arm_check(c);
        }
        // Last: a failed load is not unloaded (no OnUnload), so nothing to free by then.
        string::make_shared();
        Ok(())
    }

    /// Called by Redis on `MODULE UNLOAD` (which it refuses while a client is blocked or a
    /// timer is armed): frees everything the module allocated, so that reloading does not leak.
    ///
    /// # Safety
    /// Called by Redis only.
    #[no_mangle]
    pub unsafe extern "C" fn RedisModule_OnUnload(_ctx: *mut raw::RedisModuleCtx) -> c_int {
        engine::free_all();
        stats::free_all();
        config::free();
        string::free_shared();
        crate::ffi::replicate::free_scripts();
        crate::ffi::filter::free();
        raw::REDISMODULE_OK as c_int
    }
}
