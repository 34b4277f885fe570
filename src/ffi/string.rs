//! Redis strings (`RedisModuleString`): the ones the module creates, and reading the bytes of
//! the ones Redis hands it.

use std::io::{self, Write};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::{api, Ctx};

/// A RedisModuleString the module uses during one callback: one it made (released on drop),
/// or one it borrows (a command argument, a module-lifetime number: nothing to release).
pub struct RStr {
    ctx: Ctx,
    ptr: NonNull<raw::RedisModuleString>,
    owned: bool,
}

/// "0" and "1" made once per load (the unlock message, a hold count of one): most writes need
/// no new string for their number. Null until `make_shared`, and again after `free_shared`.
static SHARED_NUMBERS: [AtomicPtr<raw::RedisModuleString>; 2] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];

/// At load: makes the shared numbers (no context: they outlive every callback).
pub fn make_shared() {
    for (n, slot) in SHARED_NUMBERS.iter().enumerate() {
        // SAFETY: a null context is allowed (no automatic memory); the string is freed by
        // `free_shared` only.
        let s =
            unsafe { api!(RedisModule_CreateStringFromLongLong)(std::ptr::null_mut(), n as i64) };
        slot.store(s, Ordering::Relaxed);
    }
}

/// MODULE UNLOAD: frees the shared numbers (no callback is running that could use them).
pub fn free_shared() {
    for slot in &SHARED_NUMBERS {
        let s = slot.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !s.is_null() {
            // SAFETY: made by `make_shared` with a null context, freed once (swapped out).
            unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), s) };
        }
    }
}

/// A string made on first use and kept until MODULE UNLOAD (`free`): a constant the module
/// passes to Redis on hot paths (the scripts `replicate` propagates) without making it each
/// time. Main thread only.
pub struct SharedStr {
    bytes: &'static [u8],
    ptr: AtomicPtr<raw::RedisModuleString>,
}

impl SharedStr {
    pub const fn new(bytes: &'static [u8]) -> SharedStr {
        SharedStr {
            bytes,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The string, borrowed for the running callback.
    pub fn get(&self, ctx: Ctx) -> RStr {
        let mut ptr = self.ptr.load(Ordering::Relaxed);
        if ptr.is_null() {
            // SAFETY: a null context is allowed (no automatic memory); Redis copies `len`
            // bytes from a static slice; the string is freed by `free` only.
            ptr = unsafe {
                api!(RedisModule_CreateString)(
                    std::ptr::null_mut(),
                    self.bytes.as_ptr().cast(),
                    self.bytes.len(),
                )
            };
            self.ptr.store(ptr, Ordering::Relaxed);
        }
        RStr {
            ctx,
            ptr: NonNull::new(ptr).expect("Redis returned a string"),
            owned: false,
        }
    }

    /// MODULE UNLOAD: frees the string if it was made (no callback is running that uses it).
    pub fn free(&self) {
        let s = self.ptr.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !s.is_null() {
            // SAFETY: made by `get` with a null context, freed once (swapped out).
            unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), s) };
        }
    }
}

impl RStr {
    pub fn new(ctx: Ctx, bytes: &[u8]) -> RStr {
        // SAFETY: a live context; Redis copies `len` bytes from a valid slice.
        let ptr = unsafe {
            api!(RedisModule_CreateString)(ctx.as_ptr(), bytes.as_ptr().cast(), bytes.len())
        };
        RStr::owned(ctx, ptr)
    }

    /// A number as a Redis string (0 and 1 shared; others formatted with `itoa`).
    pub fn number(ctx: Ctx, n: i64) -> RStr {
        let shared = usize::try_from(n)
            .ok()
            .and_then(|i| SHARED_NUMBERS.get(i))
            .and_then(|slot| NonNull::new(slot.load(Ordering::Relaxed)));
        if let Some(ptr) = shared {
            return RStr {
                ctx,
                ptr,
                owned: false,
            };
        }
        // Formatted here: Redis's CreateStringFromLongLong formats through ll2string, about 150
        // instructions more for a 13-digit unix time in ms.
        RStr::new(ctx, itoa::Buffer::new().format(n).as_bytes())
    }

    /// The bytes `write` produces as a Redis string (names of keys and channels), put
    /// together in a [`NameWriter`] on the stack.
    pub fn written(ctx: Ctx, write: impl FnOnce(&mut NameWriter) -> io::Result<()>) -> RStr {
        let mut out = NameWriter {
            buf: [0; NAME_BUF],
            len: 0,
            spill: None,
        };
        write(&mut out).expect("a NameWriter takes every byte");
        RStr::new(ctx, out.bytes())
    }

    /// A string Redis handed the running command (an argument), used in place: Redis keeps
    /// it alive until the command returns, and an `RStr` never outlives its callback. (The
    /// key API, `RM_Replicate` and `RM_HashSet` take their own reference or copy.)
    pub fn borrowed(ctx: Ctx, arg: ArgStr) -> RStr {
        RStr {
            ctx,
            ptr: arg.0,
            owned: false,
        }
    }

    /// Takes ownership of a string Redis returned with one reference for the caller.
    pub(super) fn owned(ctx: Ctx, ptr: *mut raw::RedisModuleString) -> RStr {
        RStr {
            ctx,
            ptr: NonNull::new(ptr).expect("Redis returned a string"),
            owned: true,
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
        if self.owned {
            // SAFETY: releases the one reference this value owns, in the context it was made
            // in (still running: an RStr never outlives its callback).
            unsafe { api!(RedisModule_FreeString)(self.ctx.as_ptr(), self.ptr.as_ptr()) }
        }
    }
}

/// Room on the stack for a derived name (zeroed on each use, so not larger than names usually
/// are); longer ones (keys of over ~100 bytes) spill to the heap.
const NAME_BUF: usize = 128;

/// The writer behind [`RStr::written`]: a concrete type (not `dyn Write`), so the core's name
/// rules compile down to plain copies into a stack buffer; no heap unless the name is long.
pub struct NameWriter {
    buf: [u8; NAME_BUF],
    len: usize,
    /// Everything written so far, once it no longer fits in `buf`.
    spill: Option<Vec<u8>>,
}

impl NameWriter {
    fn bytes(&self) -> &[u8] {
        match &self.spill {
            Some(v) => v,
            None => &self.buf[..self.len],
        }
    }
}

impl Write for NameWriter {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.write_all(bytes)?;
        Ok(bytes.len())
    }

    #[inline(always)]
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Some(v) = &mut self.spill {
            v.extend_from_slice(bytes);
            return Ok(());
        }
        let end = self.len + bytes.len();
        match self.buf.get_mut(self.len..end) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len = end;
            }
            None => {
                let mut v = Vec::with_capacity(2 * end);
                v.extend_from_slice(&self.buf[..self.len]);
                v.extend_from_slice(bytes);
                self.spill = Some(v);
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::{NameWriter, NAME_BUF};

    fn written(parts: &[&[u8]]) -> Vec<u8> {
        let mut w = NameWriter {
            buf: [0; NAME_BUF],
            len: 0,
            spill: None,
        };
        for p in parts {
            w.write_all(p).unwrap();
        }
        w.bytes().to_vec()
    }

    #[test]
    fn names_are_the_parts_in_order_on_either_side_of_the_stack_buffer() {
        // The spill to the heap at every position around the buffer's end, and after it.
        for len in [
            0,
            1,
            NAME_BUF - 14,
            NAME_BUF - 13,
            NAME_BUF - 12,
            NAME_BUF,
            300,
        ] {
            let key = vec![b'k'; len];
            let parts: [&[u8]; 4] = [b"dlock:fence:", b"{", &key, b"}"];
            assert_eq!(written(&parts), parts.concat(), "key of {len} bytes");
        }
    }
}
