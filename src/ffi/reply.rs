//! Replies to a client.

use super::context::cstring;
use super::{api, Ctx};

/// A reply to a command, or to a blocked client when it is unblocked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    /// Two integers (a hold count and a fencing token).
    IntPair(i64, i64),
    Null,
    /// An error text, prefix included (`ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// Redis's own arity error, naming the command as the client typed it.
    WrongArity,
    /// Nothing: the command blocked its client, or already replied through [`Replier`].
    None,
}

impl Reply {
    pub fn send(&self, ctx: Ctx) {
        let r = Replier(ctx);
        match self {
            Reply::Int(n) => r.int(*n),
            Reply::IntPair(a, b) => {
                r.array(2);
                r.int(*a);
                r.int(*b);
            }
            Reply::Null => r.null(),
            Reply::Error(text) => {
                let text = cstring(text);
                // SAFETY: a live context; a NUL-terminated text copied by Redis.
                unsafe { api!(RedisModule_ReplyWithError)(ctx.as_ptr(), text.as_ptr()) };
            }
            Reply::WrongArity => {
                // SAFETY: a live command context.
                unsafe { api!(RedisModule_WrongArity)(ctx.as_ptr()) };
            }
            Reply::None => {}
        }
    }
}

/// Writes a reply piece by piece (aggregates whose length is known up front).
#[derive(Clone, Copy)]
pub struct Replier(pub Ctx);

impl Replier {
    pub fn int(self, n: i64) {
        // SAFETY: a live context (every method below likewise).
        unsafe { api!(RedisModule_ReplyWithLongLong)(self.0.as_ptr(), n) };
    }
    pub fn null(self) {
        // SAFETY: see `int`.
        unsafe { api!(RedisModule_ReplyWithNull)(self.0.as_ptr()) };
    }
    pub fn bytes(self, s: &[u8]) {
        // SAFETY: see `int`; Redis copies `len` bytes of a valid slice.
        unsafe {
            api!(RedisModule_ReplyWithStringBuffer)(self.0.as_ptr(), s.as_ptr().cast(), s.len())
        };
    }
    /// An array of `len` elements (the next `len` replies).
    pub fn array(self, len: usize) {
        // SAFETY: see `int`.
        unsafe { api!(RedisModule_ReplyWithArray)(self.0.as_ptr(), len as _) };
    }
    /// A map of `len` pairs (a flat array of 2 * `len` on RESP2).
    pub fn map(self, len: usize) {
        // SAFETY: see `int`.
        unsafe { api!(RedisModule_ReplyWithMap)(self.0.as_ptr(), len as _) };
    }
}
