//! Redisson's own lock scripts, served natively: which scripts are known (by the SHA1 of
//! their text, never the text), the arguments each takes, and what each does for a given
//! state of its keys (pure: the module reads the keys, asks here, writes what it is told).
//!
//! A script is served natively only when everything about the call is what Redisson sends
//! (the keys and arguments in the shape below) and the keys hold what Redisson's locks hold;
//! anything else (a string at the lock key, a hold count that is not an integer, a latch
//! that is not a number...) is [`Fallback`]: the module runs the real Lua, so that the reply
//! (its error text included) and every effect are the script's own.

use crate::redisson_rwlock::{BatchForm, RwCall, RwRole};
pub(crate) use crate::redisson_terms::{ms, publish_command};
pub use crate::redisson_terms::{
    strict_integer, Fallback, LatchState, LockState, Publish, Publisher,
};

/// What a known script does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `RLock` tryLock: `KEYS[1]` lock; `ARGV[1]` lease ms, `ARGV[2]` owner.
    TryLock,
    /// `RLock` unlock: `KEYS[1]` lock, `KEYS[2]` channel (`KEYS[3]` latch); `ARGV[1]` message,
    /// `ARGV[2]` lease ms, `ARGV[3]` owner (`ARGV[4]` publish command, `ARGV[5]` latch ms).
    Unlock(Publisher),
    /// `RLock` forceUnlock: `KEYS[1]` lock, `KEYS[2]` channel; `ARGV[1]` message (`ARGV[2]`
    /// publish command).
    ForceUnlock(Publisher),
    /// The watchdog's renewal of one lock: `KEYS[1]`; `ARGV[1]` lease ms, `ARGV[2]` owner.
    Renew,
    /// The watchdog's renewal of up to 100 locks of one slot: `KEYS[i]`; `ARGV[1]` lease ms,
    /// `ARGV[i + 1]` the owner of `KEYS[i]`. Replies an array of 1 / 0.
    RenewBatch,
    /// `RReadWriteLock`'s scripts (`redisson_rwlock`).
    RwLock(RwRole),
}

/// One known script: the SHA1 of its text, the text's length (for `EVAL`: a text of another
/// length is not hashed at all) and its role.
pub struct Script {
    pub sha1: [u8; 20],
    pub len: usize,
    pub role: Role,
}

const fn digest(hex: &[u8; 40]) -> [u8; 20] {
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 20 {
        out[i] = (nibble(hex[2 * i]) << 4) | nibble(hex[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("not a hex digit"),
    }
}

/// Every script served natively, as the Redisson versions named send it (texts read from
/// Redisson's sources at each release tag: `RedissonLock`, `RedissonBaseLock`,
/// `renewal/LockTask`; checked against the texts captured from the jars the tests run).
pub const SCRIPTS: &[Script] = &[
    // RLock tryLock (tryLockInnerAsync), one text from 3.20.0 to 4.7.0.
    Script {
        sha1: digest(b"149c5a8bf18676fd99e9e6e24923bd64d9b62f94"),
        len: 234,
        role: Role::TryLock,
    },
    // RLock unlock, 3.20.0-3.21.x: `publish` written in the text.
    Script {
        sha1: digest(b"3ffe249c16dee540ac8ab32e39bd408626b9aff7"),
        len: 305,
        role: Role::Unlock(Publisher::Literal),
    },
    // RLock unlock, 3.22.0-3.23.x: the publish command as ARGV[4].
    Script {
        sha1: digest(b"778cea8aada230ae060b432fc333adaec85f2f4c"),
        len: 303,
        role: Role::Unlock(Publisher::Argument),
    },
    // RLock unlock, 3.24.0-4.7.0: ARGV[4] and the unlock latch KEYS[3].
    Script {
        sha1: digest(b"6866459238a13a701d42f4971f12d9f3a50e2442"),
        len: 471,
        role: Role::Unlock(Publisher::ArgumentLatch),
    },
    // RLock forceUnlock, 3.20.0-3.21.x: `publish` written in the text.
    Script {
        sha1: digest(b"7e9c80b3d786b95d5d4aaf8fd73adb9775fa6fb1"),
        len: 109,
        role: Role::ForceUnlock(Publisher::Literal),
    },
    // RLock forceUnlock, 3.22.0-4.7.0: the publish command as ARGV[2].
    Script {
        sha1: digest(b"605e338249a7a1d40df83b04f7658354f883b41b"),
        len: 107,
        role: Role::ForceUnlock(Publisher::Argument),
    },
    // The watchdog's renewal of one lock (RedissonBaseLock.renewExpirationAsync), 3.20.0-3.43.x.
    Script {
        sha1: digest(b"8e19a1ddbdee9138df9f32a480c57addab4353d1"),
        len: 120,
        role: Role::Renew,
    },
    // The watchdog's batched renewal (renewal/LockTask), 3.44.0-4.7.0.
    Script {
        sha1: digest(b"6a3d31570dc6f4b0bd32bcdc8e75667747c6f635"),
        len: 220,
        role: Role::RenewBatch,
    },
    // RReadWriteLock read tryLock (RedissonReadLock), 3.20.0-4.7.0.
    Script {
        sha1: digest(b"95553a6ff11176c18e71344e89d116b06fd6f753"),
        len: 717,
        role: Role::RwLock(RwRole::ReadTryLock),
    },
    // RReadWriteLock write tryLock (RedissonWriteLock), 3.20.0-4.7.0.
    Script {
        sha1: digest(b"6306ba3bf1f563b284bed52d305fce615c6664d9"),
        len: 508,
        role: Role::RwLock(RwRole::WriteTryLock),
    },
    // Read unlock, 3.20.0-3.21.x: `publish` written in the text.
    Script {
        sha1: digest(b"f5469be4bfe5232d519471092634b3ee84e5ee6f"),
        len: 1026,
        role: Role::RwLock(RwRole::ReadUnlock(Publisher::Literal)),
    },
    // Read unlock, 3.22.0-3.23.x: the publish command as ARGV[3].
    Script {
        sha1: digest(b"92a54c31a4dc3b46f81e24a6dd5bb7d677c6f882"),
        len: 1022,
        role: Role::RwLock(RwRole::ReadUnlock(Publisher::Argument)),
    },
    // Read unlock, 3.24.0-4.7.0: ARGV[3] and the unlock latch KEYS[5].
    Script {
        sha1: digest(b"6e1b10e11ac0a3ed8e902562ecd32ce01b553039"),
        len: 1295,
        role: Role::RwLock(RwRole::ReadUnlock(Publisher::ArgumentLatch)),
    },
    // Write unlock, 3.20.0-3.21.x.
    Script {
        sha1: digest(b"baa634f6184acc1b8f145e810a0e0e00967a3cbe"),
        len: 637,
        role: Role::RwLock(RwRole::WriteUnlock(Publisher::Literal)),
    },
    // Write unlock, 3.22.0-3.23.x: the publish command as ARGV[4].
    Script {
        sha1: digest(b"319a1cdf1b56c767a0a9adf2224250bf811f110c"),
        len: 633,
        role: Role::RwLock(RwRole::WriteUnlock(Publisher::Argument)),
    },
    // Write unlock, 3.24.0-4.7.0: ARGV[4] and the unlock latch KEYS[3].
    Script {
        sha1: digest(b"21f5fb0f8ddfa9be5c3e0c9757c128796add75c6"),
        len: 860,
        role: Role::RwLock(RwRole::WriteUnlock(Publisher::ArgumentLatch)),
    },
    // Read forceUnlock, 3.20.0-3.21.x.
    Script {
        sha1: digest(b"23f9bc91439172625235ce2ee06d6647f08a7e27"),
        len: 150,
        role: Role::RwLock(RwRole::ReadForceUnlock(Publisher::Literal)),
    },
    // Read forceUnlock, 3.22.0-4.7.0: ARGV[2] publish.
    Script {
        sha1: digest(b"27dbe744e95c1d854a7f556cc6817030de2d0d01"),
        len: 148,
        role: Role::RwLock(RwRole::ReadForceUnlock(Publisher::Argument)),
    },
    // Write forceUnlock, 3.20.0-3.21.x.
    Script {
        sha1: digest(b"23639b0b2d18d26ce352e148ff4ac5b8e984b696"),
        len: 151,
        role: Role::RwLock(RwRole::WriteForceUnlock(Publisher::Literal)),
    },
    // Write forceUnlock, 3.22.0-4.7.0: ARGV[2] publish.
    Script {
        sha1: digest(b"2e2cb2a3b13e2e80e4236ef6a25beaf365dba608"),
        len: 149,
        role: Role::RwLock(RwRole::WriteForceUnlock(Publisher::Argument)),
    },
    // The read lock's watchdog renewal, 3.20.0-3.43.x.
    Script {
        sha1: digest(b"6563941ff57e01b8cf61e86907b80686438a2f74"),
        len: 475,
        role: Role::RwLock(RwRole::ReadRenew),
    },
    // The batched read-lock renewal (ReadLockTask), 3.44.0-3.5x.
    Script {
        sha1: digest(b"1affef780a01e1406cb1968c62918f618d10d6a3"),
        len: 596,
        role: Role::RwLock(RwRole::RenewBatch(BatchForm::Shadowed)),
    },
    // The batched read-lock renewal, 4.x: owner names counted per key.
    Script {
        sha1: digest(b"38d2b478dfbe264ab67c221b7e4be62245f00ba0"),
        len: 574,
        role: Role::RwLock(RwRole::RenewBatch(BatchForm::Named)),
    },
];

/// The digests of `SCRIPTS` in lower-case hex, as `EVALSHA` names them.
const HEX: [[u8; 40]; SCRIPTS.len()] = {
    let mut out = [[0u8; 40]; SCRIPTS.len()];
    let mut i = 0;
    while i < SCRIPTS.len() {
        let mut j = 0;
        while j < 20 {
            out[i][2 * j] = b"0123456789abcdef"[(SCRIPTS[i].sha1[j] >> 4) as usize];
            out[i][2 * j + 1] = b"0123456789abcdef"[(SCRIPTS[i].sha1[j] & 15) as usize];
            j += 1;
        }
        i += 1;
    }
    out
};

/// The first 8 digits of each of `HEX`, read as a little-endian `u64`: one comparison per
/// script rejects an unknown digest.
const PREFIX: [u64; SCRIPTS.len()] = {
    let mut out = [0u64; SCRIPTS.len()];
    let mut i = 0;
    while i < SCRIPTS.len() {
        let mut j = 0;
        while j < 8 {
            out[i] |= (HEX[i][j] as u64) << (8 * j);
            j += 1;
        }
        let mut k = 0;
        while k < i {
            assert!(
                out[k] != out[i],
                "two known digests share their first 8 digits"
            );
            k += 1;
        }
        i += 1;
    }
    out
};

/// The script whose SHA1 is `hex` (40 hex digits, either case), as `EVALSHA` names it.
/// Setting bit 5 of every byte lower-cases `A`-`F` and leaves digits as they are, so a
/// digest whose first 8 digits are a known one's matches that prefix; the whole text is
/// then compared (case-insensitively, exactly).
#[inline]
pub fn by_sha1_hex(hex: &[u8]) -> Option<usize> {
    if hex.len() != 40 {
        return None;
    }
    let head = u64::from_le_bytes(hex[..8].try_into().ok()?) | 0x2020_2020_2020_2020;
    let i = PREFIX.iter().position(|&p| p == head)?;
    // Redisson sends lower case: one plain comparison; another case is compared as such.
    (hex == HEX[i] || hex.eq_ignore_ascii_case(&HEX[i])).then_some(i)
}

/// Whether some known script's text is `len` bytes long (the `EVAL` pre-check).
#[inline]
pub fn text_len_known(len: usize) -> bool {
    SCRIPTS.iter().any(|s| s.len == len)
}

/// A call of a known script in the shape Redisson sends it. `argv` is the whole command
/// (`EVALSHA sha numkeys keys... args...`).
#[derive(Debug, PartialEq, Eq)]
pub enum Call<'a> {
    TryLock {
        key: &'a [u8],
        lease_ms: i64,
        owner: &'a [u8],
    },
    Unlock {
        key: &'a [u8],
        channel: &'a [u8],
        message: &'a [u8],
        lease_ms: i64,
        owner: &'a [u8],
        publish: Publish,
        /// The latch key and how long it lives (3.24+).
        latch: Option<(&'a [u8], i64)>,
    },
    ForceUnlock {
        key: &'a [u8],
        channel: &'a [u8],
        message: &'a [u8],
        publish: Publish,
    },
    /// Single (`batch` false) or batched renewal: `keys[i]` held by `owners[i]`.
    Renew {
        batch: bool,
        keys: &'a [&'a [u8]],
        owners: &'a [&'a [u8]],
        lease_ms: i64,
    },
    RwLock(RwCall),
}

/// `argv` (after `EVAL`/`EVALSHA`: the script, numkeys, keys, args) as a call of the script
/// with `role`, or `None` when its shape is not what Redisson sends (then it runs as Lua).
pub fn parse<'a>(role: Role, argv: &'a [&'a [u8]]) -> Option<Call<'a>> {
    let numkeys = usize::try_from(strict_integer(argv.get(1)?)?).ok()?;
    let rest = &argv[2..];
    if numkeys > rest.len() {
        return None;
    }
    let (keys, args) = rest.split_at(numkeys);
    match (role, keys, args) {
        (Role::TryLock, [key], [lease, owner]) => Some(Call::TryLock {
            key,
            lease_ms: ms(lease)?,
            owner,
        }),
        (Role::Unlock(form), [key, channel, latch @ ..], [message, lease, owner, rest @ ..]) => {
            // The three forms differ only in how the message goes out and in the latch.
            let (publish, latch) = match (form, latch, rest) {
                (Publisher::Literal, [], []) => (Publish::Publish, None),
                (Publisher::Argument, [], [p]) => (publish_command(p)?, None),
                (Publisher::ArgumentLatch, [latch], [p, latch_ms]) => {
                    (publish_command(p)?, Some((*latch, ms(latch_ms)?)))
                }
                _ => return None,
            };
            Some(Call::Unlock {
                key,
                channel,
                message,
                lease_ms: ms(lease)?,
                owner,
                publish,
                latch,
            })
        }
        (Role::ForceUnlock(Publisher::Literal), [key, channel], [message]) => {
            Some(Call::ForceUnlock {
                key,
                channel,
                message,
                publish: Publish::Publish,
            })
        }
        (Role::ForceUnlock(Publisher::Argument), [key, channel], [message, publish]) => {
            Some(Call::ForceUnlock {
                key,
                channel,
                message,
                publish: publish_command(publish)?,
            })
        }
        (Role::Renew, [_], [lease, _]) | (Role::RenewBatch, [_, ..], [lease, ..])
            if args.len() == keys.len() + 1 =>
        {
            Some(Call::Renew {
                batch: role == Role::RenewBatch,
                keys,
                owners: &args[1..],
                lease_ms: ms(lease)?,
            })
        }
        (Role::RwLock(r), _, _) => crate::redisson_rwlock::parse(r, keys, args).map(Call::RwLock),
        _ => None,
    }
}

/// tryLock: `Ok(Some(count))` the owner's field becomes `count` and the lease is set (reply
/// nil); `Ok(None)` another owner holds it (reply the key's PTTL).
pub fn try_lock(state: LockState) -> Result<Option<i64>, Fallback> {
    match state {
        LockState::Absent => Ok(Some(1)),
        LockState::Hash { field: None } => Ok(None),
        // HINCRBY's errors (not an integer, overflow) are the script's.
        LockState::Hash { field: Some(v) } => strict_integer(v)
            .and_then(|n| n.checked_add(1))
            .map(Some)
            .ok_or(Fallback),
        LockState::NotAHash => Err(Fallback),
    }
}

/// What unlock does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnlockStep {
    /// The latch of an earlier attempt answers (integer reply); nothing changes.
    Latched(i64),
    /// The owner holds nothing: reply nil.
    NotHeld,
    /// One hold less, `count` left: the lease is reset, the latch set to 0, reply 0.
    Decremented(i64),
    /// The last hold: the key is deleted, the message published, the latch set to 1, reply 1.
    Freed,
}

/// unlock, given its latch (`LatchState::Absent` for the forms without one) and the lock.
pub fn unlock(latch: LatchState, state: LockState) -> Result<UnlockStep, Fallback> {
    match latch {
        LatchState::Absent => {}
        // `tonumber(val)`: what Redisson writes (0 / 1) is served; any other text is the
        // script's to convert.
        LatchState::String(v) => return strict_integer(v).map(UnlockStep::Latched).ok_or(Fallback),
        LatchState::NotAString => return Err(Fallback),
    }
    match state {
        LockState::Absent | LockState::Hash { field: None } => Ok(UnlockStep::NotHeld),
        LockState::Hash { field: Some(v) } => {
            let left = strict_integer(v)
                .and_then(|n| n.checked_sub(1))
                .ok_or(Fallback)?;
            Ok(if left > 0 {
                UnlockStep::Decremented(left)
            } else {
                UnlockStep::Freed
            })
        }
        LockState::NotAHash => Err(Fallback),
    }
}

/// renew (one key of it): `Ok(true)` the owner holds it (the lease is reset; 1), `Ok(false)`
/// not (0).
pub fn renew(state: LockState) -> Result<bool, Fallback> {
    match state {
        LockState::Absent => Ok(false),
        LockState::Hash { field } => Ok(field.is_some()),
        LockState::NotAHash => Err(Fallback),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_consistent() {
        for (i, s) in SCRIPTS.iter().enumerate() {
            let hex: String = s.sha1.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(by_sha1_hex(hex.as_bytes()), Some(i));
            assert_eq!(by_sha1_hex(hex.to_uppercase().as_bytes()), Some(i));
            assert!(text_len_known(s.len));
        }
        assert_eq!(by_sha1_hex(&[b'0'; 40]), None);
        assert_eq!(
            by_sha1_hex(b"149c5a8bf18676fd99e9e6e24923bd64d9b62f9"),
            None
        );
        assert_eq!(
            by_sha1_hex(b"149c5a8bf18676fd99e9e6e24923bd64d9b62fzz"),
            None
        );
    }

    #[test]
    fn integers_as_redis_reads_them() {
        for (v, n) in [
            ("0", Some(0)),
            ("1", Some(1)),
            ("-5", Some(-5)),
            ("42", Some(42)),
        ] {
            assert_eq!(strict_integer(v.as_bytes()), n, "{v}");
        }
        for v in [
            "",
            "-",
            "01",
            "-0",
            "+1",
            " 1",
            "1 ",
            "1.0",
            "99999999999999999999",
        ] {
            assert_eq!(strict_integer(v.as_bytes()), None, "{v:?}");
        }
    }

    fn words(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn calls_in_redissons_shape_are_parsed() {
        let argv = words("x 1 k 30000 o:1");
        assert_eq!(
            parse(Role::TryLock, &argv),
            Some(Call::TryLock {
                key: b"k",
                lease_ms: 30000,
                owner: b"o:1"
            })
        );
        let argv = words("x 3 k c l 0 30000 o:1 SPUBLISH 13500");
        let Some(Call::Unlock { publish, latch, .. }) =
            parse(Role::Unlock(Publisher::ArgumentLatch), &argv)
        else {
            panic!("not parsed");
        };
        assert_eq!(
            (publish, latch),
            (Publish::SPublish, Some((&b"l"[..], 13500)))
        );
        let argv = words("x 2 a b 30000 o1 o2");
        let Some(Call::Renew { keys, owners, .. }) = parse(Role::RenewBatch, &argv) else {
            panic!("not parsed");
        };
        assert_eq!((keys.len(), owners), (2, &[&b"o1"[..], b"o2"][..]));
    }

    #[test]
    fn other_shapes_run_as_lua() {
        for (role, s) in [
            (Role::TryLock, "x 1 k 0 o"),
            (Role::TryLock, "x 1 k -5 o"),
            (Role::TryLock, "x 1 k 1e3 o"),
            (Role::TryLock, "x 1 k 300000000000000000 o"),
            (Role::TryLock, "x 2 k j 30000 o"),
            (Role::TryLock, "x 1 k 30000"),
            (Role::TryLock, "x 5 k 30000 o"),
            (Role::TryLock, "x 01 k 30000 o"),
            (Role::Unlock(Publisher::Argument), "x 2 k c 0 30000 o del"),
            (Role::ForceUnlock(Publisher::Argument), "x 2 k c 0 set"),
            (Role::RenewBatch, "x 2 a b 30000 o1"),
            (Role::RenewBatch, "x 0 30000"),
            (Role::Renew, "x 2 a b 30000 o1 o2"),
        ] {
            assert_eq!(parse(role, &words(s)), None, "{s}");
        }
    }

    #[test]
    fn the_scripts_answers() {
        let f = |v: &'static str| LockState::Hash {
            field: Some(v.as_bytes()),
        };
        let none = LockState::Hash { field: None };
        assert_eq!(try_lock(LockState::Absent), Ok(Some(1)));
        assert_eq!(try_lock(f("2")), Ok(Some(3)));
        assert_eq!(try_lock(none), Ok(None));
        assert_eq!(try_lock(f("x")), Err(Fallback));
        assert_eq!(try_lock(f("9223372036854775807")), Err(Fallback));
        assert_eq!(try_lock(LockState::NotAHash), Err(Fallback));

        let no = LatchState::Absent;
        assert_eq!(unlock(no, f("1")), Ok(UnlockStep::Freed));
        assert_eq!(unlock(no, f("0")), Ok(UnlockStep::Freed));
        assert_eq!(unlock(no, f("3")), Ok(UnlockStep::Decremented(2)));
        assert_eq!(unlock(no, none), Ok(UnlockStep::NotHeld));
        assert_eq!(unlock(no, LockState::Absent), Ok(UnlockStep::NotHeld));
        assert_eq!(unlock(no, LockState::NotAHash), Err(Fallback));
        assert_eq!(
            unlock(LatchState::String(b"1"), f("1")),
            Ok(UnlockStep::Latched(1))
        );
        assert_eq!(unlock(LatchState::String(b"0.5"), f("1")), Err(Fallback));
        assert_eq!(unlock(LatchState::NotAString, f("1")), Err(Fallback));

        assert_eq!(renew(f("x")), Ok(true));
        assert_eq!(renew(none), Ok(false));
        assert_eq!(renew(LockState::Absent), Ok(false));
        assert_eq!(renew(LockState::NotAHash), Err(Fallback));
    }
}
