//! Server commands the module runs itself (`RedisModule_Call`) with C-string arguments, and
//! their replies, freed when dropped.

use std::ffi::CStr;
use std::os::raw::c_char;

use redis_module::raw;

use super::{api, Ctx, RStr};

/// The reply of a command run by [`CallReply::run`].
pub struct CallReply {
    reply: *mut raw::RedisModuleCallReply,
}

impl CallReply {
    /// Runs `command` with one or two arguments; `None` when Redis refuses it (unknown,
    /// wrong arity, a cluster redirect...).
    pub fn run(ctx: Ctx, command: &CStr, args: &[&CStr]) -> Option<CallReply> {
        // SAFETY: a live context of the running callback; the command name and the format
        // are NUL-terminated, and each "c" takes one NUL-terminated string, given (valid for
        // the call).
        let reply = unsafe {
            let call = api!(RedisModule_Call);
            match args {
                [a] => call(ctx.as_ptr(), command.as_ptr(), c"c".as_ptr(), a.as_ptr()),
                [a, b] => call(
                    ctx.as_ptr(),
                    command.as_ptr(),
                    c"cc".as_ptr(),
                    a.as_ptr(),
                    b.as_ptr(),
                ),
                _ => unreachable!("commands are run with one or two arguments"),
            }
        };
        (!reply.is_null()).then_some(CallReply { reply })
    }

    /// Runs `command` with `args` (Redis strings); `replicate`: its writes are propagated
    /// like the running command's own (`!`). `None` when Redis refuses it.
    pub fn run_strs(
        ctx: Ctx,
        command: &CStr,
        args: &[&RStr],
        replicate: bool,
    ) -> Option<CallReply> {
        let ptrs: Vec<*mut raw::RedisModuleString> = args.iter().map(|a| a.as_ptr()).collect();
        let format = if replicate { c"!v" } else { c"v" };
        // SAFETY: a live context of the running callback; the command name and the format
        // are NUL-terminated; "v" takes an array of live strings and its length (`args`
        // keeps them alive for the call).
        let reply = unsafe {
            api!(RedisModule_Call)(
                ctx.as_ptr(),
                command.as_ptr(),
                format.as_ptr(),
                ptrs.as_ptr(),
                ptrs.len(),
            )
        };
        (!reply.is_null()).then_some(CallReply { reply })
    }

    /// Sends this reply, as it is, as the running command's reply.
    pub fn forward(&self, ctx: Ctx) {
        // SAFETY: a live command context and a live reply (Redis copies it).
        unsafe { api!(RedisModule_ReplyWithCallReply)(ctx.as_ptr(), self.reply) };
    }

    /// The elements of an array reply that are strings (others are skipped).
    pub fn strings(&self) -> Vec<Vec<u8>> {
        let n = self.array_len().unwrap_or(0);
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let mut len: usize = 0;
            // SAFETY: a live array reply and an index below its length; the element belongs
            // to the reply (not freed here) and its bytes are copied before it is freed.
            unsafe {
                let e = api!(RedisModule_CallReplyArrayElement)(self.reply, i);
                let ptr: *const c_char = api!(RedisModule_CallReplyStringPtr)(e, &mut len);
                if !ptr.is_null() {
                    out.push(std::slice::from_raw_parts(ptr.cast::<u8>(), len).to_vec());
                }
            }
        }
        out
    }

    /// An integer reply's value.
    pub fn integer(&self) -> Option<i64> {
        // SAFETY: a live reply (freed only on drop).
        unsafe {
            (api!(RedisModule_CallReplyType)(self.reply) as isize == raw::REDISMODULE_REPLY_INTEGER)
                .then(|| api!(RedisModule_CallReplyInteger)(self.reply))
        }
    }

    /// An array reply's length.
    pub fn array_len(&self) -> Option<usize> {
        // SAFETY: a live reply (freed only on drop).
        unsafe {
            (api!(RedisModule_CallReplyType)(self.reply) as isize == raw::REDISMODULE_REPLY_ARRAY)
                .then(|| api!(RedisModule_CallReplyLength)(self.reply))
        }
    }

    /// A string reply as text (`None` when the reply has no string).
    pub fn text(&self) -> Option<String> {
        let mut len: usize = 0;
        // SAFETY: a live reply; the pointer it returns is valid for `len` bytes while the
        // reply is, and the bytes are copied before it is freed.
        unsafe {
            let ptr: *const c_char = api!(RedisModule_CallReplyStringPtr)(self.reply, &mut len);
            (!ptr.is_null()).then(|| {
                String::from_utf8_lossy(std::slice::from_raw_parts(ptr.cast::<u8>(), len))
                    .into_owned()
            })
        }
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        // SAFETY: the non-null reply of `run`, freed once.
        unsafe { api!(RedisModule_FreeCallReply)(self.reply) };
    }
}
