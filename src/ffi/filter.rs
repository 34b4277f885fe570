//! A command filter (`RedisModule_RegisterCommandFilter`) that may rename commands: the
//! filter sees every command's argv as sent, before Redis looks the command up, checks its
//! arity, its ACL, the cluster slot and queues it in MULTI (also every `redis.call` inside a
//! script and every `RM_Call` of other modules; never the module's own, `NOSELF`). It has no
//! context: no key access, no replies. The handler above decides; this file only reads the
//! arguments and replaces the command name.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::string::bytes_of;
use super::{api, Ctx};

/// What the filter does with each command.
pub trait CommandFilterHandler {
    /// Called for every command: must decide in a few instructions for unrelated ones.
    fn on_command(args: &mut FilterArgs);
}

/// The arguments of the command being filtered.
pub struct FilterArgs {
    fctx: *mut raw::RedisModuleCommandFilterCtx,
}

impl FilterArgs {
    /// The module's own context (a filter has none): start timers only. `None` once the
    /// module is unloading. Read only when needed: most commands never ask.
    pub fn module_ctx(&self) -> Option<Ctx> {
        let ctx = CTX.load(Ordering::Relaxed);
        // SAFETY: the module's detached context, live until unload (`free`).
        (!ctx.is_null()).then(|| unsafe { Ctx::from_raw(ctx) })
    }

    /// The number of words, the command name included.
    #[inline]
    pub fn len(&self) -> usize {
        // SAFETY: the live filter context of this call.
        unsafe { api!(RedisModule_CommandFilterArgsCount)(self.fctx) }.max(0) as usize
    }

    /// Word `i` (0: the command name); empty past the end. The bytes live for the filter
    /// call (borrowed from `self`, which the callback only lends).
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        // SAFETY: the live filter context; Redis returns null past the end, else a string
        // that lives until the argument is replaced or the call returns (neither while the
        // borrow of `self` lasts: `rename` takes `&mut self`).
        unsafe {
            let s = api!(RedisModule_CommandFilterArgGet)(self.fctx, i as c_int);
            if s.is_null() {
                &[]
            } else {
                bytes_of(s)
            }
        }
    }

    /// Replaces the command name with the one given to [`register`], tagged `tag` (below
    /// [`TAGS`]): the command reads the tag back with [`tag_of`].
    pub fn rename(&mut self, tag: usize) {
        let Some(name) = NAMES.get(tag).map(|n| n.load(Ordering::Relaxed)) else {
            return;
        };
        if name.is_null() {
            return;
        }
        // SAFETY: the live filter context; `name` is the module's string (made at
        // registration, freed only at unload). The filter takes over one reference, so
        // one is added first; Redis releases the name it replaces.
        unsafe {
            api!(RedisModule_RetainString)(std::ptr::null_mut(), name);
            api!(RedisModule_CommandFilterArgReplace)(self.fctx, 0, name);
        }
    }
}

/// How many tags [`FilterArgs::rename`] can give.
pub const TAGS: usize = 32;

/// The names [`FilterArgs::rename`] writes: the same bytes in `TAGS` distinct strings (made
/// once, no context: they outlive every call), so that the renamed command can tell from its
/// name's string which tag the filter gave it. A client sending the name itself has a string
/// of its own, which carries no tag.
static NAMES: [AtomicPtr<raw::RedisModuleString>; TAGS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; TAGS];

/// The tag the filter gave the running command (`name`: its name's string, argv[0]).
#[inline]
pub fn tag_of(name: *mut raw::RedisModuleString) -> Option<usize> {
    NAMES.iter().position(|n| n.load(Ordering::Relaxed) == name)
}
/// The module's detached context the handler starts timers with.
static CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Registers `H` as a command filter for the module's lifetime (Redis drops it at unload);
/// `rename_to`: the command name `FilterArgs::rename` writes. Call from `RedisModule_OnLoad`.
pub fn register<H: CommandFilterHandler>(ctx: Ctx, rename_to: &[u8]) -> Result<(), String> {
    unsafe extern "C" fn on_command<H: CommandFilterHandler>(
        fctx: *mut raw::RedisModuleCommandFilterCtx,
    ) {
        H::on_command(&mut FilterArgs { fctx });
    }
    for slot in &NAMES {
        // SAFETY: a null context is allowed (no automatic memory); Redis copies the bytes;
        // the string is freed by `free` only.
        let name = unsafe {
            api!(RedisModule_CreateString)(
                std::ptr::null_mut(),
                rename_to.as_ptr().cast(),
                rename_to.len(),
            )
        };
        slot.store(name, Ordering::Relaxed);
    }
    // SAFETY: a live context; the detached context is freed by `free` only.
    let detached = unsafe { api!(RedisModule_GetDetachedThreadSafeContext)(ctx.as_ptr()) };
    CTX.store(detached, Ordering::Relaxed);
    // SAFETY: a live (OnLoad) context; the callback has the signature Redis expects.
    let filter = unsafe {
        api!(RedisModule_RegisterCommandFilter)(
            ctx.as_ptr(),
            Some(on_command::<H>),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    if filter.is_null() {
        return Err("cannot register the command filter".into());
    }
    Ok(())
}

/// MODULE UNLOAD: frees the names and the context (Redis drops the filter right after, and
/// runs no command in between; a call meanwhile would rename nothing and start no timer).
pub fn free() {
    let ctx = CTX.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !ctx.is_null() {
        // SAFETY: the detached context made by `register`, freed once (swapped out).
        unsafe { api!(RedisModule_FreeThreadSafeContext)(ctx) };
    }
    for slot in &NAMES {
        let s = slot.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !s.is_null() {
            // SAFETY: made by `register` with a null context; the copies the filter handed
            // to Redis hold references of their own.
            unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), s) };
        }
    }
}
