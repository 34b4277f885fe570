//! The one place where command arguments become typed requests.
//!
//! Everything here is checked before the key is looked at, so an argument error wins over
//! WRONGTYPE (docs/COMMANDS.md: arguments are checked before the key is looked at).

use crate::error::LockError;
use crate::model::MODE_FIELD;
pub use crate::model::{Mode, Want};
use crate::terms::Terms;

use crate::limits::MAX_LOCK_DELAY_MS;
pub use crate::limits::{DEFAULT_BIND_GRACE_MS, MAX_CAPACITY, MAX_MS, MAX_OWNER_LEN};

/// DLOCK.ACQUIRE / DLOCK.RWLOCK / DLOCK.SEMAPHORE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub key: &'a [u8],
    /// `WAIT timeout-ms`: `Some(0)` waits without limit.
    pub wait_ms: Option<i64>,
    /// The hold asked for.
    pub terms: Terms<&'a [u8]>,
}

/// DLOCK.RELEASE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseArgs<'a> {
    pub key: &'a [u8],
    pub owner: &'a [u8],
    pub mode: Option<Mode>,
    /// `COUNT n` (semaphores only): permits to give back.
    pub count: Option<i64>,
}

/// DLOCK.RENEW.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenewArgs<'a> {
    pub key: &'a [u8],
    pub owner: &'a [u8],
    pub lease_ms: i64,
    /// `BIND grace-ms`: (re)binds the hold to the sending connection.
    pub bind: Option<i64>,
}

#[inline]
fn owner(arg: &[u8]) -> Result<&[u8], LockError> {
    if arg.is_empty() || arg.len() > MAX_OWNER_LEN {
        return Err(LockError::OwnerLength);
    }
    if arg == MODE_FIELD {
        return Err(LockError::OwnerReserved);
    }
    Ok(arg)
}

#[inline]
fn parse_i64(arg: &[u8]) -> Option<i64> {
    // Redis integers: optional '-', digits, no '+', no spaces, no leading zeros are fine.
    crate::number::decimal(arg)
}

/// A numeric argument as written: a value, digits beyond `i64` (too large, not malformed),
/// or not an integer.
enum Number {
    Value(i64),
    Huge,
    Bad,
}

#[inline]
fn number(arg: &[u8]) -> Number {
    match parse_i64(arg) {
        Some(v) => Number::Value(v),
        None if !arg.is_empty() && arg.iter().all(u8::is_ascii_digit) => Number::Huge,
        None => Number::Bad,
    }
}

#[inline]
fn lease(arg: &[u8]) -> Result<i64, LockError> {
    match number(arg) {
        Number::Value(v) if v > MAX_MS => Err(LockError::LeaseTooLong),
        Number::Huge => Err(LockError::LeaseTooLong),
        Number::Value(v) if v > 0 => Ok(v),
        _ => Err(LockError::LeaseNotPositive),
    }
}

#[inline]
fn timeout(arg: &[u8]) -> Result<i64, LockError> {
    match number(arg) {
        Number::Value(v) if v > MAX_MS => Err(LockError::TimeoutTooLong),
        Number::Huge => Err(LockError::TimeoutTooLong),
        Number::Value(v) if v >= 0 => Ok(v),
        _ => Err(LockError::TimeoutNegative),
    }
}

// The words that start an option (matched without regard to case).
const WAIT: &[u8] = b"WAIT";
const BIND: &[u8] = b"BIND";
const FENCE: &[u8] = b"FENCE";
const LOCKDELAY: &[u8] = b"LOCKDELAY";
const COUNT: &[u8] = b"COUNT";
/// After a bare `BIND`, one of these is the next option; any other word is the grace.
const OPTION_WORDS: [&[u8]; 5] = [WAIT, BIND, FENCE, LOCKDELAY, COUNT];

/// `BIND [grace-ms]`: the grace given after `BIND` (`next`, unless it is the next option's
/// word or absent), else [`DEFAULT_BIND_GRACE_MS`] capped at the lease. With the words it
/// consumed (1 or 2).
#[inline]
fn bind_option(next: Option<&[u8]>, lease_ms: i64) -> Result<(i64, usize), LockError> {
    match next {
        Some(v) if !OPTION_WORDS.iter().any(|w| v.eq_ignore_ascii_case(w)) => {
            Ok((grace(v, lease_ms)?, 2))
        }
        _ => Ok((DEFAULT_BIND_GRACE_MS.min(lease_ms), 1)),
    }
}

/// `BIND grace-ms`: from 0 to the lease.
fn grace(arg: &[u8], lease_ms: i64) -> Result<i64, LockError> {
    match number(arg) {
        Number::Value(v) if v > lease_ms => Err(LockError::GraceOverLease(lease_ms)),
        Number::Huge => Err(LockError::GraceOverLease(lease_ms)),
        Number::Value(v) if v >= 0 => Ok(v),
        _ => Err(LockError::GraceNegative),
    }
}

/// `LOCKDELAY ms`: from 0 to [`MAX_LOCK_DELAY_MS`].
fn lock_delay(arg: &[u8]) -> Result<i64, LockError> {
    match number(arg) {
        Number::Value(v) if v > MAX_LOCK_DELAY_MS => Err(LockError::LockDelayTooLong),
        Number::Huge => Err(LockError::LockDelayTooLong),
        Number::Value(v) if v >= 0 => Ok(v),
        _ => Err(LockError::LockDelayNegative),
    }
}

/// The options after the fixed arguments that are not terms of the hold (those are written
/// into it as they are parsed).
#[derive(Default)]
struct Options {
    wait: Option<i64>,
    count: Option<i64>,
}

/// Which options a command takes besides `WAIT` and `BIND`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// DLOCK.ACQUIRE and DLOCK.RWLOCK: `FENCE`, `LOCKDELAY ms`.
    FenceAndDelay,
    /// DLOCK.SEMAPHORE: `COUNT n`.
    Count,
}

/// Parses the options, in any order, each at most once, into `terms` and the rest; an
/// unknown, repeated or misplaced one is `ERR syntax error`.
#[inline]
fn options(rest: &[&[u8]], terms: &mut Terms<&[u8]>, takes: Takes) -> Result<Options, LockError> {
    let mut o = Options::default();
    let mut i = 0;
    while i < rest.len() {
        let word = rest[i];
        let value = || rest.get(i + 1).copied().ok_or(LockError::Syntax);
        let lock = takes == Takes::FenceAndDelay;
        if word.eq_ignore_ascii_case(WAIT) && o.wait.is_none() {
            o.wait = Some(timeout(value()?)?);
        } else if word.eq_ignore_ascii_case(BIND) && terms.bind.is_none() {
            let (grace, words) = bind_option(rest.get(i + 1).copied(), terms.lease_ms)?;
            terms.bind = Some(grace);
            i += words;
            continue;
        } else if lock && word.eq_ignore_ascii_case(FENCE) && !terms.fence {
            terms.fence = true;
            i += 1;
            continue;
        } else if lock && word.eq_ignore_ascii_case(LOCKDELAY) && terms.lock_delay.is_none() {
            terms.lock_delay = Some(lock_delay(value()?)?);
        } else if !lock && word.eq_ignore_ascii_case(COUNT) && o.count.is_none() {
            o.count = Some(permits(value()?, "COUNT")?);
        } else {
            return Err(LockError::Syntax);
        }
        i += 2;
    }
    Ok(o)
}

/// `DLOCK.ACQUIRE key owner lease-ms [WAIT timeout-ms] [FENCE] [BIND [grace-ms]]
/// [LOCKDELAY ms]` (argv without the command name).
#[inline]
pub fn acquire<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, LockError> {
    if argv.len() < 3 {
        return Err(LockError::WrongArity);
    }
    let mut terms = Terms::new(owner(argv[1])?, Want::Exclusive, lease(argv[2])?);
    let o = options(&argv[3..], &mut terms, Takes::FenceAndDelay)?;
    Ok(AcquireArgs {
        key: argv[0],
        wait_ms: o.wait,
        terms,
    })
}

/// `DLOCK.RWLOCK key owner READ|WRITE lease-ms [WAIT timeout-ms] [FENCE] [BIND [grace-ms]]
/// [LOCKDELAY ms]` (LOCKDELAY with WRITE only).
pub fn rwlock<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, LockError> {
    if argv.len() < 4 {
        return Err(LockError::WrongArity);
    }
    let owner = owner(argv[1])?;
    let want = match mode(argv[2]) {
        Some(Mode::Read) => Want::Read,
        Some(Mode::Write) => Want::Write,
        None => return Err(LockError::ModeWord),
    };
    let mut terms = Terms::new(owner, want, lease(argv[3])?);
    let o = options(&argv[4..], &mut terms, Takes::FenceAndDelay)?;
    if want == Want::Read && terms.lock_delay.is_some() {
        return Err(LockError::LockDelayOnRead);
    }
    Ok(AcquireArgs {
        key: argv[0],
        wait_ms: o.wait,
        terms,
    })
}

fn mode(word: &[u8]) -> Option<Mode> {
    if word.eq_ignore_ascii_case(b"READ") {
        Some(Mode::Read)
    } else if word.eq_ignore_ascii_case(b"WRITE") {
        Some(Mode::Write)
    } else {
        None
    }
}

/// `COUNT n` and `capacity`: a positive integer up to [`MAX_CAPACITY`].
fn permits(arg: &[u8], name: &'static str) -> Result<i64, LockError> {
    match parse_i64(arg) {
        Some(v) if (1..=MAX_CAPACITY).contains(&v) => Ok(v),
        _ => Err(LockError::PermitsWord(name)),
    }
}

/// `DLOCK.SEMAPHORE key owner capacity lease-ms [COUNT n] [WAIT timeout-ms] [BIND [grace-ms]]`.
pub fn semaphore<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, LockError> {
    if argv.len() < 4 {
        return Err(LockError::WrongArity);
    }
    let owner = owner(argv[1])?;
    let capacity = permits(argv[2], "capacity")?;
    let mut terms = Terms::new(owner, Want::Permits { capacity, count: 1 }, lease(argv[3])?);
    // FENCE, LOCKDELAY, READ, WRITE and anything else: syntax error.
    let o = options(&argv[4..], &mut terms, Takes::Count)?;
    let count = o.count.unwrap_or(1);
    if count > capacity {
        return Err(LockError::CountOverCapacity { count, capacity });
    }
    terms.want = Want::Permits { capacity, count };
    Ok(AcquireArgs {
        key: argv[0],
        wait_ms: o.wait,
        terms,
    })
}

/// `DLOCK.RELEASE key owner [READ|WRITE|COUNT n]`. Which kind of lock the option fits is
/// checked against the key (WRONGTYPE), not here. Words past the options are a syntax error,
/// as for a core command (`SET k v EX 1 2`); only a missing owner is an arity error.
#[inline]
pub fn release<'a>(argv: &[&'a [u8]]) -> Result<ReleaseArgs<'a>, LockError> {
    if argv.len() < 2 {
        return Err(LockError::WrongArity);
    }
    let owner = owner(argv[1])?;
    let (mode, count) = match &argv[2..] {
        [] => (None, None),
        [word] => (Some(mode(word).ok_or(LockError::Syntax)?), None),
        [word, n] if word.eq_ignore_ascii_case(COUNT) => (None, Some(permits(n, "COUNT")?)),
        _ => return Err(LockError::Syntax),
    };
    Ok(ReleaseArgs {
        key: argv[0],
        owner,
        mode,
        count,
    })
}

/// `DLOCK.WAITERS key [COUNT n]`: the key and how many waiters to list (`None`: all).
pub fn waiters<'a>(argv: &[&'a [u8]]) -> Result<(&'a [u8], Option<usize>), LockError> {
    match argv {
        [key] => Ok((key, None)),
        [key, word, n] if word.eq_ignore_ascii_case(COUNT) => {
            Ok((key, Some(permits(n, "COUNT")? as usize)))
        }
        [] => Err(LockError::WrongArity),
        _ => Err(LockError::Syntax),
    }
}

/// `DLOCK.RENEW key owner lease-ms [BIND [grace-ms]]`.
#[inline]
pub fn renew<'a>(argv: &[&'a [u8]]) -> Result<RenewArgs<'a>, LockError> {
    if argv.len() < 3 {
        return Err(LockError::WrongArity);
    }
    let owner = owner(argv[1])?;
    let lease_ms = lease(argv[2])?;
    // Words past the option: a syntax error, as for RELEASE.
    let bind = match &argv[3..] {
        [] => None,
        [word, rest @ ..] if rest.len() <= 1 && word.eq_ignore_ascii_case(BIND) => {
            match bind_option(rest.first().copied(), lease_ms)? {
                (grace, words) if words == 1 + rest.len() => Some(grace),
                _ => return Err(LockError::Syntax), // `BIND WAIT`: no option follows
            }
        }
        _ => return Err(LockError::Syntax),
    };
    Ok(RenewArgs {
        key: argv[0],
        owner,
        lease_ms,
        bind,
    })
}

/// `DLOCK.INFO key`.
pub fn info<'a>(argv: &[&'a [u8]]) -> Result<&'a [u8], LockError> {
    if argv.len() != 1 {
        return Err(LockError::WrongArity);
    }
    Ok(argv[0])
}

#[cfg(test)]
mod tests;
