//! Commands: the entry point Redis calls, and their registration from the declarations
//! (`Command::SPEC`) in one loop.

use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::raw;

use super::command_info::{self, KeyUse, Spec};
use super::string::{bytes_of, ArgStr};
use super::{api, Ctx, Reply};

/// A command of this module.
pub trait Command {
    /// Its name, flags, key, arity, ACL categories and docs.
    const SPEC: Spec;

    /// Runs the command. `args`: the argument bytes without the command name; `strs`: the
    /// same arguments as Redis strings (to share with the key API instead of copying).
    fn run(ctx: Ctx, args: &[&[u8]], strs: Args) -> Reply;

    /// Declared `getkeys-api` (keys Redis cannot find from legacy positions: Redis 7.0
    /// routes cluster calls by those or by the module's answer): Redis may call the command
    /// to ask for [`Command::key_positions`].
    const KEYS_BY_API: bool = false;

    /// The positions of the command's keys in `argv` (the command name at 0), for a command
    /// with `KEYS_BY_API`.
    fn key_positions(_argv: &[&[u8]]) -> Vec<i32> {
        Vec::new()
    }
}

/// The arguments of the running command as Redis strings (the command name apart).
#[derive(Clone, Copy)]
pub struct Args<'a>(&'a [*mut raw::RedisModuleString]);

impl Args<'_> {
    /// Argument `i` (0: the first after the command name).
    pub fn get(&self, i: usize) -> Option<ArgStr> {
        self.0.get(i + 1).and_then(|s| NonNull::new(*s)).map(ArgStr)
    }

    /// The tag a command filter gave this command when it renamed it (`filter::tag_of`).
    pub fn filter_tag(&self) -> Option<usize> {
        super::filter::tag_of(*self.0.first()?)
    }
}

/// What Redis calls for one command: the entry point with Redis's signature.
type Entry = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// A command ready to register: its declaration and its entry point.
pub struct Declared {
    pub spec: Spec,
    entry: Entry,
}

/// `C` ready to register (for the module's list of commands).
pub const fn declare<C: Command>() -> Declared {
    Declared {
        spec: C::SPEC,
        entry: entry::<C>,
    }
}

/// Creates every command of `all`, then tells Redis what COMMAND DOCS / COMMAND INFO say
/// about it. `ctx` must be the `RedisModule_OnLoad` context: Redis refuses new commands
/// from any other (an error here).
pub fn register(ctx: Ctx, all: &[Declared]) -> Result<(), String> {
    for c in all {
        let s = &c.spec;
        // A script's keys (numkeys-based) have no legacy positions: the key spec and the
        // key-position answer (`Command::key_positions`) alone.
        let (first, step) = match s.key_use {
            KeyUse::Script => (0, 0),
            _ => (s.key_at, 1),
        };
        // SAFETY: a live context; NUL-terminated name and flags that Redis copies; the entry
        // point has the signature Redis expects. The legacy key positions (first = last, step
        // 1) let Redis derive a key spec, which `describe` then replaces with one carrying
        // the access flags.
        let status = unsafe {
            api!(RedisModule_CreateCommand)(
                ctx.as_ptr(),
                s.name.as_ptr(),
                Some(c.entry),
                s.flags.as_ptr(),
                first,
                first,
                step,
            )
        };
        if status == raw::REDISMODULE_ERR as c_int {
            return Err(format!("cannot create command {:?}", s.name));
        }
        // SAFETY: the command was just created from `s` in this (OnLoad) context.
        unsafe { command_info::describe(ctx.as_ptr(), s)? };
    }
    Ok(())
}

/// What Redis calls: reads the arguments in place (no per-argument wrapper objects) and sends
/// the reply.
unsafe extern "C" fn entry<C: Command>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes a live context and `argc` (>= 1) live argument strings that stay
    // valid until the command returns.
    let (ctx, raw_args) = unsafe {
        (
            Ctx::from_raw(ctx),
            std::slice::from_raw_parts(argv, argc.max(0) as usize),
        )
    };
    // Valid commands have at most 7 words (Redisson's unlock 11): keep them on the stack.
    let mut small: [&[u8]; 12] = [&[]; 12];
    let heap: Vec<&[u8]>;
    let words: &[&[u8]] = if raw_args.len() <= small.len() {
        for (slot, arg) in small.iter_mut().zip(raw_args) {
            // SAFETY: the arguments live for the whole command (above).
            *slot = unsafe { bytes_of(*arg) };
        }
        &small[..raw_args.len()]
    } else {
        heap = raw_args
            .iter()
            // SAFETY: as above.
            .map(|a| unsafe { bytes_of(*a) })
            .collect();
        &heap
    };
    let strs = Args(raw_args);
    // SAFETY: a live command context.
    if C::KEYS_BY_API && unsafe { api!(RedisModule_IsKeysPositionRequest)(ctx.as_ptr()) } != 0 {
        for pos in C::key_positions(words) {
            // SAFETY: a key-position request's context; `pos` is an argument's index.
            unsafe { api!(RedisModule_KeyAtPos)(ctx.as_ptr(), pos) };
        }
        return raw::REDISMODULE_OK as c_int;
    }
    C::run(ctx, words.get(1..).unwrap_or(&[]), strs).send(ctx);
    raw::REDISMODULE_OK as c_int
}
