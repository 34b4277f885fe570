//! Redis strings (`RedisModuleString`): the ones the module creates, and reading the bytes of
//! the ones Redis hands it.

use std::ptr::NonNull;

use redis_module::raw;

use super::{api, Ctx};

/// A RedisModuleString this module owns a reference to; released on drop.
pub struct RStr {
    ctx: Ctx,
    ptr: NonNull<raw::RedisModuleString>,
}

impl RStr {
    pub fn new(ctx: Ctx, bytes: &[u8]) -> RStr {
        // SAFETY: a live context; Redis copies `len` bytes from a valid slice.
        let ptr = unsafe {
            api!(RedisModule_CreateString)(ctx.as_ptr(), bytes.as_ptr().cast(), bytes.len())
        };
        RStr::owned(ctx, ptr)
    }

    /// A number as a Redis string (no Rust formatting, one allocation inside Redis).
    pub fn number(ctx: Ctx, n: i64) -> RStr {
        // SAFETY: a live context.
        let ptr = unsafe { api!(RedisModule_CreateStringFromLongLong)(ctx.as_ptr(), n) };
        RStr::owned(ctx, ptr)
    }

    /// Shares a string Redis handed the module (a command argument) instead of copying it:
    /// one more reference, dropped with this value.
    pub fn retained(ctx: Ctx, arg: ArgStr) -> RStr {
        // SAFETY: `arg` is a live argument of the running command (see `ArgStr`).
        unsafe { api!(RedisModule_RetainString)(ctx.as_ptr(), arg.0.as_ptr()) };
        RStr { ctx, ptr: arg.0 }
    }

    /// Takes ownership of a string Redis returned with one reference for the caller.
    pub(super) fn owned(ctx: Ctx, ptr: *mut raw::RedisModuleString) -> RStr {
        RStr {
            ctx,
            ptr: NonNull::new(ptr).expect("Redis returned a string"),
        }
    }

    pub fn as_ptr(&self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: this value holds a reference, so the string lives as long as `self`.
        unsafe { bytes_of(self.ptr.as_ptr()) }
    }
}

impl Drop for RStr {
    fn drop(&mut self) {
        // SAFETY: releases the one reference this value owns, in the context it was made in
        // (still running: an RStr never outlives its callback).
        unsafe { api!(RedisModule_FreeString)(self.ctx.as_ptr(), self.ptr.as_ptr()) }
    }
}

/// A command argument as Redis passed it (borrowed for the duration of the command).
#[derive(Clone, Copy)]
pub struct ArgStr(pub(super) NonNull<raw::RedisModuleString>);

/// The bytes of a RedisModuleString.
///
/// # Safety
/// `s` is a live string, and it outlives `'a` unchanged.
pub unsafe fn bytes_of<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: `s` is live (caller); Redis returns its buffer and length, valid while `s` is.
    unsafe {
        let p = api!(RedisModule_StringPtrLen)(s, &mut len);
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}
