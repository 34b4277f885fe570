//! The one place where command arguments become typed requests.
//!
//! Everything here is checked before the key is looked at, so an argument error wins over
//! WRONGTYPE (docs/COMMANDS.md: arguments are checked before the key is looked at).

use crate::error::LockError;
use crate::model::MODE_FIELD;
pub use crate::model::{Mode, Want};

/// The longest lease or wait a command accepts: ten years in milliseconds.
pub const MAX_MS: i64 = 315_360_000_000;
/// The longest owner name in bytes.
pub const MAX_OWNER_LEN: usize = 512;
/// The most permits a semaphore may have (and so the largest `COUNT`).
pub const MAX_CAPACITY: i64 = 1_000_000;

/// DLOCK.ACQUIRE / DLOCK.RWLOCK / DLOCK.SEMAPHORE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub key: &'a [u8],
    pub owner: &'a [u8],
    pub want: Want,
    pub lease_ms: i64,
    /// `WAIT timeout-ms`: `Some(0)` waits without limit.
    pub wait_ms: Option<i64>,
    pub fence: bool,
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
    crate::model::decimal(arg)
}

#[inline]
fn lease(arg: &[u8]) -> Result<i64, LockError> {
    match parse_i64(arg) {
        Some(v) if v > MAX_MS => Err(LockError::LeaseTooLong),
        Some(v) if v > 0 => Ok(v),
        _ => Err(LockError::LeaseNotPositive),
    }
}

#[inline]
fn timeout(arg: &[u8]) -> Result<i64, LockError> {
    match parse_i64(arg) {
        Some(v) if v > MAX_MS => Err(LockError::TimeoutTooLong),
        Some(v) if v >= 0 => Ok(v),
        _ => Err(LockError::TimeoutNegative),
    }
}

/// Parses `[WAIT timeout-ms] [FENCE]` in any order, each at most once.
#[inline]
fn options(rest: &[&[u8]]) -> Result<(Option<i64>, bool), LockError> {
    let (mut wait, mut fence) = (None, false);
    let mut i = 0;
    while i < rest.len() {
        let word = rest[i];
        if word.eq_ignore_ascii_case(b"WAIT") && wait.is_none() {
            let value = rest.get(i + 1).ok_or(LockError::Syntax)?;
            wait = Some(timeout(value)?);
            i += 2;
        } else if word.eq_ignore_ascii_case(b"FENCE") && !fence {
            fence = true;
            i += 1;
        } else {
            return Err(LockError::Syntax);
        }
    }
    Ok((wait, fence))
}

/// `DLOCK.ACQUIRE key owner lease-ms [WAIT timeout-ms] [FENCE]` (argv without the command name).
#[inline]
pub fn acquire<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, LockError> {
    if argv.len() < 3 {
        return Err(LockError::WrongArity);
    }
    let owner = owner(argv[1])?;
    let lease_ms = lease(argv[2])?;
    let (wait_ms, fence) = options(&argv[3..])?;
    Ok(AcquireArgs {
        key: argv[0],
        owner,
        want: Want::Exclusive,
        lease_ms,
        wait_ms,
        fence,
    })
}

/// `DLOCK.RWLOCK key owner READ|WRITE lease-ms [WAIT timeout-ms] [FENCE]`.
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
    let lease_ms = lease(argv[3])?;
    let (wait_ms, fence) = options(&argv[4..])?;
    Ok(AcquireArgs {
        key: argv[0],
        owner,
        want,
        lease_ms,
        wait_ms,
        fence,
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

/// `DLOCK.SEMAPHORE key owner capacity lease-ms [COUNT n] [WAIT timeout-ms]`.
pub fn semaphore<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, LockError> {
    if argv.len() < 4 {
        return Err(LockError::WrongArity);
    }
    let owner = owner(argv[1])?;
    let capacity = permits(argv[2], "capacity")?;
    let lease_ms = lease(argv[3])?;
    let (mut count, mut wait_ms) = (None, None);
    let rest = &argv[4..];
    let mut i = 0;
    while i < rest.len() {
        let word = rest[i];
        let value = rest.get(i + 1);
        if word.eq_ignore_ascii_case(b"WAIT") && wait_ms.is_none() {
            wait_ms = Some(timeout(value.ok_or(LockError::Syntax)?)?);
        } else if word.eq_ignore_ascii_case(b"COUNT") && count.is_none() {
            count = Some(permits(value.ok_or(LockError::Syntax)?, "COUNT")?);
        } else {
            // FENCE, READ, WRITE and anything else.
            return Err(LockError::Syntax);
        }
        i += 2;
    }
    let count = count.unwrap_or(1);
    if count > capacity {
        return Err(LockError::CountOverCapacity { count, capacity });
    }
    Ok(AcquireArgs {
        key: argv[0],
        owner,
        want: Want::Permits { capacity, count },
        lease_ms,
        wait_ms,
        fence: false,
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
        [word, n] if word.eq_ignore_ascii_case(b"COUNT") => (None, Some(permits(n, "COUNT")?)),
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
        [key, word, n] if word.eq_ignore_ascii_case(b"COUNT") => {
            Ok((key, Some(permits(n, "COUNT")? as usize)))
        }
        [] => Err(LockError::WrongArity),
        _ => Err(LockError::Syntax),
    }
}

/// `DLOCK.RENEW key owner lease-ms`.
#[inline]
pub fn renew<'a>(argv: &[&'a [u8]]) -> Result<RenewArgs<'a>, LockError> {
    if argv.len() != 3 {
        return Err(LockError::WrongArity);
    }
    let owner = owner(argv[1])?;
    let lease_ms = lease(argv[2])?;
    Ok(RenewArgs {
        key: argv[0],
        owner,
        lease_ms,
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
mod tests {
    use super::*;

    fn v(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }
    fn a<'w>(words: &[&'w str]) -> Result<AcquireArgs<'w>, LockError> {
        let refs: Vec<&'w [u8]> = words.iter().map(|w| w.as_bytes()).collect();
        acquire(&refs)
    }
    fn msg(r: Result<AcquireArgs, LockError>) -> String {
        r.unwrap_err().message("dlock.acquire")
    }

    #[test]
    fn acquire_options_any_order_and_case() {
        let r = a(&["k", "o", "100", "fence", "wait", "5"]).unwrap();
        assert_eq!((r.wait_ms, r.fence, r.lease_ms), (Some(5), true, 100));
        let r = a(&["k", "o", "100"]).unwrap();
        assert_eq!((r.wait_ms, r.fence), (None, false));
        assert_eq!(a(&["k", "o", "1", "WAIT", "0"]).unwrap().wait_ms, Some(0));
    }

    #[test]
    fn acquire_errors() {
        assert_eq!(
            msg(a(&["k", "o"])),
            "ERR wrong number of arguments for 'dlock.acquire' command"
        );
        assert_eq!(msg(a(&["k", "o", "1", "WAIT"])), "ERR syntax error");
        assert_eq!(
            msg(a(&["k", "o", "1", "WAIT", "1", "WAIT", "1"])),
            "ERR syntax error"
        );
        assert_eq!(
            msg(a(&["k", "o", "1", "FENCE", "FENCE"])),
            "ERR syntax error"
        );
        assert_eq!(msg(a(&["k", "o", "1", "NX"])), "ERR syntax error");
        assert_eq!(
            msg(a(&["k", "o", "0"])),
            "ERR lease-ms must be a positive integer"
        );
        assert_eq!(
            msg(a(&["k", "o", "-5"])),
            "ERR lease-ms must be a positive integer"
        );
        assert_eq!(
            msg(a(&["k", "o", "1.5"])),
            "ERR lease-ms must be a positive integer"
        );
        assert_eq!(
            msg(a(&["k", "o", "+5"])),
            "ERR lease-ms must be a positive integer"
        );
        assert_eq!(
            msg(a(&["k", "o", "315360000001"])),
            "ERR lease-ms must be at most 315360000000"
        );
        assert_eq!(
            msg(a(&["k", "o", "99999999999999999999"])),
            "ERR lease-ms must be a positive integer"
        );
        assert_eq!(
            msg(a(&["k", "o", "1", "WAIT", "-1"])),
            "ERR timeout-ms must be a non-negative integer"
        );
        assert_eq!(
            msg(a(&["k", "o", "1", "WAIT", "x"])),
            "ERR timeout-ms must be a non-negative integer"
        );
        assert_eq!(msg(a(&["k", "", "1"])), "ERR owner must be 1 to 512 bytes");
        assert_eq!(
            msg(a(&["k", &"x".repeat(513), "1"])),
            "ERR owner must be 1 to 512 bytes"
        );
        assert!(a(&["k", &"x".repeat(512), "1"]).is_ok());
        assert_eq!(
            msg(a(&["k", "mode", "1"])),
            "ERR owner name 'mode' is reserved"
        );
        // The owner is checked before the lease: both are wrong, the owner error comes first.
        assert_eq!(msg(a(&["k", "", "x"])), "ERR owner must be 1 to 512 bytes");
    }

    #[test]
    fn rwlock_and_release_and_renew() {
        let owned = v(&["k", "o", "read", "10", "WAIT", "3"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        let r = rwlock(&refs).unwrap();
        assert_eq!((r.want, r.wait_ms), (Want::Read, Some(3)));
        let owned = v(&["k", "o", "both", "10"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        assert_eq!(
            rwlock(&refs).unwrap_err().message("x"),
            "ERR mode must be READ or WRITE"
        );

        let owned = v(&["k", "o", "Write"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        assert_eq!(release(&refs).unwrap().mode, Some(Mode::Write));
        let owned = v(&["k", "o", "x"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        assert_eq!(release(&refs).unwrap_err(), LockError::Syntax);
        let owned = v(&["k", "o", "READ", "x"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        assert_eq!(release(&refs).unwrap_err(), LockError::Syntax);
        let owned = v(&["k", "o", "COUNT", "1", "x"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        assert_eq!(release(&refs).unwrap_err(), LockError::Syntax);
        let owned = v(&["k", "o", "READ", "COUNT", "1"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        assert_eq!(release(&refs).unwrap_err(), LockError::Syntax);
        let owned = v(&["k"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        assert_eq!(release(&refs).unwrap_err(), LockError::WrongArity);

        let owned = v(&["k", "o", "7"]);
        let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
        assert_eq!(renew(&refs).unwrap().lease_ms, 7);
    }

    fn refs<'w>(words: &[&'w str]) -> Vec<&'w [u8]> {
        words.iter().map(|w| w.as_bytes()).collect()
    }

    #[test]
    fn semaphore_arguments() {
        fn s<'w>(w: &[&'w str]) -> Result<AcquireArgs<'w>, String> {
            semaphore(&refs(w)).map_err(|e| e.message("dlock.semaphore"))
        }
        let r = s(&["k", "o", "4", "100", "wait", "5", "count", "3"]).unwrap();
        assert_eq!(
            (r.want, r.wait_ms, r.lease_ms, r.fence),
            (
                Want::Permits {
                    capacity: 4,
                    count: 3
                },
                Some(5),
                100,
                false
            )
        );
        let r = s(&["k", "o", "4", "100"]).unwrap();
        assert_eq!(
            (r.want, r.wait_ms),
            (
                Want::Permits {
                    capacity: 4,
                    count: 1
                },
                None
            )
        );
        let e = |w: &[&str]| s(w).map(|_| ()).unwrap_err();
        assert_eq!(
            e(&["k", "o", "4"]),
            "ERR wrong number of arguments for 'dlock.semaphore' command"
        );
        for bad in ["FENCE", "READ", "WRITE", "NX"] {
            assert_eq!(e(&["k", "o", "4", "100", bad]), "ERR syntax error");
        }
        assert_eq!(e(&["k", "o", "4", "100", "COUNT"]), "ERR syntax error");
        assert_eq!(
            e(&["k", "o", "4", "100", "COUNT", "1", "COUNT", "1"]),
            "ERR syntax error"
        );
        for cap in ["0", "-1", "x", "1000001", "+3"] {
            assert_eq!(
                e(&["k", "o", cap, "100"]),
                "ERR capacity must be a positive integer up to 1000000"
            );
        }
        assert!(s(&["k", "o", "1000000", "100"]).is_ok());
        assert_eq!(
            e(&["k", "o", "4", "100", "COUNT", "0"]),
            "ERR COUNT must be a positive integer up to 1000000"
        );
        assert_eq!(
            e(&["k", "o", "4", "100", "COUNT", "5"]),
            "ERR COUNT 5 is more than the capacity 4"
        );
        assert_eq!(
            e(&["k", "o", "4", "0"]),
            "ERR lease-ms must be a positive integer"
        );
        assert_eq!(
            e(&["k", "mode", "4", "1"]),
            "ERR owner name 'mode' is reserved"
        );
        // Argument order of the checks: owner, capacity, lease, options.
        assert_eq!(
            e(&["k", "o", "0", "0"]),
            "ERR capacity must be a positive integer up to 1000000"
        );
    }

    #[test]
    fn release_count_and_waiters_arguments() {
        let r = release(&refs(&["k", "o", "count", "2"])).unwrap();
        assert_eq!((r.mode, r.count), (None, Some(2)));
        assert_eq!(
            release(&refs(&["k", "o", "COUNT"])).unwrap_err(),
            LockError::Syntax
        );
        assert_eq!(
            release(&refs(&["k", "o", "READ", "2"])).unwrap_err(),
            LockError::Syntax
        );
        assert_eq!(
            release(&refs(&["k", "o", "COUNT", "0"]))
                .unwrap_err()
                .message("x"),
            "ERR COUNT must be a positive integer up to 1000000"
        );
        assert_eq!(waiters(&refs(&["k"])).unwrap(), (&b"k"[..], None));
        assert_eq!(
            waiters(&refs(&["k", "count", "3"])).unwrap(),
            (&b"k"[..], Some(3))
        );
        assert_eq!(
            waiters(&refs(&["k", "LIMIT", "3"])).unwrap_err(),
            LockError::Syntax
        );
        assert_eq!(
            waiters(&refs(&["k", "COUNT"])).unwrap_err(),
            LockError::Syntax
        );
        assert_eq!(
            waiters(&refs(&["k", "COUNT", "0"]))
                .unwrap_err()
                .message("x"),
            "ERR COUNT must be a positive integer up to 1000000"
        );
        assert_eq!(waiters(&refs(&[])).unwrap_err(), LockError::WrongArity);
        assert_eq!(
            waiters(&refs(&["k", "COUNT", "1", "x"])).unwrap_err(),
            LockError::Syntax
        );
    }
}
