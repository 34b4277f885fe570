//! Whether anyone on this server subscribes where a message could reach them, asked through
//! `PUBSUB` (Redis has no module API for it). `INFO stats` counts channels and patterns too,
//! but renders the whole section (~250k instructions on 7.0): two `PUBSUB` calls cost a few
//! thousand, the channel listing growing only with the number of channels.

use std::ffi::CString;

use super::call::CallReply;
use super::Ctx;

/// Some client subscribes to a pattern (any pattern might match), or to a channel whose name
/// starts with `prefix`. True also when `PUBSUB` cannot be called (the safe answer).
pub fn subscribed_under(ctx: Ctx, prefix: &str) -> bool {
    let patterns = CallReply::run(ctx, c"PUBSUB", &[c"NUMPAT"]).and_then(|r| r.integer());
    if patterns != Some(0) {
        return true;
    }
    let Ok(pattern) = CString::new(format!("{}*", glob_escaped(prefix))) else {
        return true;
    };
    let channels =
        CallReply::run(ctx, c"PUBSUB", &[c"CHANNELS", &pattern]).and_then(|r| r.array_len());
    channels != Some(0)
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
