//! The limits on command arguments, in one place: the parser (`args`) checks them and the
//! error texts (`error`) name them, so that a limit and its message cannot disagree.

/// The longest lease or wait a command accepts: ten years in milliseconds.
pub const MAX_MS: i64 = 315_360_000_000;
/// The longest owner name in bytes.
pub const MAX_OWNER_LEN: usize = 512;
/// The most permits a semaphore may have (and so the largest `COUNT`).
pub const MAX_CAPACITY: i64 = 1_000_000;
/// The longest `LOCKDELAY ms` (Consul's limit too: one minute).
pub const MAX_LOCK_DELAY_MS: i64 = 60_000;
/// The grace of a bare `BIND` (no value): 2 s, or the lease when that is shorter. The
/// clients' default grace too, so that what they send by default carries no number to parse.
pub const DEFAULT_BIND_GRACE_MS: i64 = 2_000;
