//! Commands: the entry point Redis calls, and their registration.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::raw;

use super::string::{bytes_of, ArgStr};
use super::{api, Ctx, Reply};

/// A command of this module.
pub trait Command {
    /// Runs the command. `args`: the argument bytes without the command name; `strs`: the
    /// same arguments as Redis strings (to share with the key API instead of copying).
    fn run(ctx: Ctx, args: &[&[u8]], strs: Args) -> Reply;
}

/// The arguments of the running command as Redis strings, without the command name.
#[derive(Clone, Copy)]
pub struct Args<'a>(&'a [*mut raw::RedisModuleString]);

impl Args<'_> {
    /// Argument `i` (0: the first after the command name).
    pub fn get(&self, i: usize) -> Option<ArgStr> {
        self.0.get(i).and_then(|s| NonNull::new(*s)).map(ArgStr)
    }
}

/// Registers `C` as command `name` with `flags`, keys at argument positions (1, 1, 1):
/// Redis derives the key spec, so COMMAND GETKEYS, ACL key patterns and cluster routing work.
///
/// # Safety
/// `ctx` is the context passed to `RedisModule_OnLoad`.
pub unsafe fn create<C: Command>(
    ctx: *mut raw::RedisModuleCtx,
    name: &CStr,
    flags: &CStr,
) -> Result<(), String> {
    // SAFETY: the OnLoad context (caller); NUL-terminated name and flags; the handler has the
    // signature Redis expects.
    let status = unsafe {
        api!(RedisModule_CreateCommand)(
            ctx,
            name.as_ptr(),
            Some(entry::<C>),
            flags.as_ptr(),
            1,
            1,
            1,
        )
    };
    if status == raw::REDISMODULE_ERR as c_int {
        return Err(format!("cannot create command {name:?}"));
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
    // Valid commands have at most 7 words: keep them on the stack.
    let mut small: [&[u8]; 8] = [&[]; 8];
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
    let strs = Args(raw_args.get(1..).unwrap_or(&[]));
    C::run(ctx, words.get(1..).unwrap_or(&[]), strs).send(ctx);
    raw::REDISMODULE_OK as c_int
}
