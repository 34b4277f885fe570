//! Whether anyone on this server subscribes where a message could reach them, asked through
//! `PUBSUB` (Redis has no module API for it). `INFO stats` counts channels and patterns too,
//! but renders the whole section (~250k instructions on 7.0): two `PUBSUB` calls cost a few
//! thousand, the channel listing growing only with the number of channels.

use std::ffi::CString;
use std::os::raw::c_char;

use redis_module::raw;

use super::{api, Ctx};

/// Some client subscribes to a pattern (any pattern might match), or to a channel whose name
/// starts with `prefix`. True also when `PUBSUB` cannot be called (the safe answer).
pub fn subscribed_under(ctx: Ctx, prefix: &str) -> bool {
    match call(ctx, &[c"NUMPAT".to_owned()]) {
        Some(Answer::Integer(0)) => {}
        _ => return true,
    }
    let Ok(pattern) = CString::new(format!("{}*", glob_escaped(prefix))) else {
        return true;
    };
    !matches!(
        call(ctx, &[c"CHANNELS".to_owned(), pattern]),
        Some(Answer::Array(0))
    )
}

/// `prefix` as a glob pattern matching itself (`*?[]\` escaped).
fn glob_escaped(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for ch in prefix.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

enum Answer {
    Integer(i64),
    /// An array of this many elements.
    Array(usize),
    Other,
}

/// `PUBSUB args...` (one or two arguments), its reply's shape; `None` when the call fails.
fn call(ctx: Ctx, args: &[CString]) -> Option<Answer> {
    // SAFETY: a live context of the running callback; the command name and the format are
    // NUL-terminated, and each "c" takes one NUL-terminated string, given (valid for the call).
    let reply = unsafe {
        match args {
            [a] => api!(RedisModule_Call)(
                ctx.as_ptr(),
                c"PUBSUB".as_ptr(),
                c"c".as_ptr(),
                a.as_ptr().cast::<c_char>(),
            ),
            [a, b] => api!(RedisModule_Call)(
                ctx.as_ptr(),
                c"PUBSUB".as_ptr(),
                c"cc".as_ptr(),
                a.as_ptr().cast::<c_char>(),
                b.as_ptr().cast::<c_char>(),
            ),
            _ => unreachable!("PUBSUB is called with one or two arguments"),
        }
    };
    if reply.is_null() {
        return None;
    }
    // SAFETY: the non-null reply of the call above, read, then freed once.
    unsafe {
        let answer = match api!(RedisModule_CallReplyType)(reply) as isize {
            raw::REDISMODULE_REPLY_INTEGER => {
                Answer::Integer(api!(RedisModule_CallReplyInteger)(reply))
            }
            raw::REDISMODULE_REPLY_ARRAY => Answer::Array(api!(RedisModule_CallReplyLength)(reply)),
            _ => Answer::Other,
        };
        api!(RedisModule_FreeCallReply)(reply);
        Some(answer)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefix_is_escaped_for_glob() {
        assert_eq!(
            super::glob_escaped("redisson_lock__channel"),
            "redisson_lock__channel"
        );
        assert_eq!(super::glob_escaped(r"a*b?[c]\d"), r"a\*b\?\[c\]\\d");
    }
}
