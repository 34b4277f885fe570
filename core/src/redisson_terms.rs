//! What Redisson's lock scripts and its read-write lock scripts share (`redisson`,
//! `redisson_rwlock`): how an unlock publishes, the argument forms both parse (a millisecond
//! count, the publish command, Redis's integers) and the states of the keys both look at.

/// How an unlock script publishes its message, as its text says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publisher {
    /// `redis.call('publish', KEYS[2], ARGV[1])` (3.20-3.21).
    Literal,
    /// `redis.call(ARGV[n], KEYS[2], ARGV[1])`: `PUBLISH` or `SPUBLISH` as Redisson's
    /// subscription service says (3.22 on; `n` = 4 for unlock, 2 for forceUnlock).
    Argument,
    /// As `Argument`, and the unlock's result kept in a latch key `KEYS[3]` for `ARGV[5]` ms
    /// and returned to a retry (3.24 on).
    ArgumentLatch,
}

/// The publish command a script's argument names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    Publish,
    SPublish,
}

/// The largest expiry accepted natively: Redis's own PEXPIRE / SET PX overflow checks are
/// never reached (anything larger runs as Lua and gets Redis's own answer).
const MAX_NATIVE_MS: i64 = 1 << 48;

/// A millisecond count as Redis parses it (`string2ll`), in `1..=MAX_NATIVE_MS`.
pub(crate) fn ms(arg: &[u8]) -> Option<i64> {
    strict_integer(arg).filter(|n| (1..=MAX_NATIVE_MS).contains(n))
}

pub(crate) fn publish_command(arg: &[u8]) -> Option<Publish> {
    // What Redisson sends, compared as it is first.
    match arg {
        b"PUBLISH" => return Some(Publish::Publish),
        b"SPUBLISH" => return Some(Publish::SPublish),
        _ => {}
    }
    if arg.eq_ignore_ascii_case(b"publish") {
        Some(Publish::Publish)
    } else if arg.eq_ignore_ascii_case(b"spublish") {
        Some(Publish::SPublish)
    } else {
        None
    }
}

/// An integer exactly as Redis's `string2ll` accepts it (HINCRBY's hold counts, PEXPIRE's
/// argument): an optional `-`, digits, no leading zero (but `0` itself), no `-0`.
#[inline]
pub fn strict_integer(v: &[u8]) -> Option<i64> {
    let digits = v.strip_prefix(b"-").unwrap_or(v);
    match digits {
        [b'0'] if digits.len() == v.len() => Some(0),
        [b'1'..=b'9', ..] => crate::number::decimal(v),
        _ => None,
    }
}

/// What a lock key holds, as far as the scripts look: nothing, a hash (and the owner's
/// field in it, if any), or another type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockState<'v> {
    Absent,
    Hash { field: Option<&'v [u8]> },
    NotAHash,
}

/// The script's answer cannot be given natively: run the Lua (see the file doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fallback;

/// What the latch key holds (3.24+): nothing, a string, or another type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatchState<'v> {
    Absent,
    String(&'v [u8]),
    NotAString,
}
