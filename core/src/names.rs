//! Names of the keys and channels that belong to a lock: the fencing counter of its cluster
//! slot, the per-lock counter of earlier versions (absorbed on upgrade) and Redisson's unlock
//! channel.

use std::io::{self, Write};

/// Redis Cluster's CRC16 (XMODEM), as in `cluster.c`.
pub const fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    let mut i = 0;
    while i < bytes.len() {
        crc = (crc << 8) ^ CRC16_TABLE[(((crc >> 8) as u8) ^ bytes[i]) as usize];
        i += 1;
    }
    crc
}

/// CRC16/XMODEM (polynomial 0x1021) one byte at a time, computed at compile time.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut b = 0;
    while b < 256 {
        let mut crc = (b as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[b] = crc;
        b += 1;
    }
    table
};

/// The part of `key` that Redis Cluster hashes: the first `{...}` with something inside, else
/// the whole key (`keyHashSlot` in `cluster.c`).
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The cluster hash slot of `key` (`CLUSTER KEYSLOT`).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) & 16383
}

/// The fencing counter shared by every lock of `key`'s cluster slot: `dlock:fences:{N}`, where
/// N is the smallest decimal number hashing to that slot. One key per slot, however many lock
/// names are fenced; it lives in the slot, so it moves with the slot's keys.
pub fn slot_fence_key(key: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(SLOT_FENCE_PREFIX.len() + 12);
    write_slot_fence_key(key, &mut name).expect("a Vec takes every byte");
    name
}

const SLOT_FENCE_PREFIX: &[u8] = b"dlock:fences:";

/// [`slot_fence_key`] written into `out`.
pub fn write_slot_fence_key<W: Write + ?Sized>(key: &[u8], out: &mut W) -> io::Result<()> {
    out.write_all(SLOT_FENCE_PREFIX)?;
    out.write_all(b"{")?;
    out.write_all(slot_tag(key_slot(key)).as_bytes())?;
    out.write_all(b"}")
}

/// The per-lock fencing counter that versions before the per-slot counter kept for lock `key`
/// (read once more, absorbed into the slot's counter and deleted when met), in the same slot:
/// - `dlock:fence:{K}` when K has no `{` or `}`;
/// - `dlock:fence:K` when K has a hash tag (the tag is kept);
/// - otherwise (braces without a valid tag, e.g. `a}b` or `x{}y`) `dlock:fence:{N}:K`, where N
///   is the smallest decimal number whose slot is K's slot.
pub fn legacy_fence_key(key: &[u8]) -> Vec<u8> {
    // Room for the longest form (`{N}:` with N < 2^32 takes at most 13 bytes): one allocation.
    let mut name = Vec::with_capacity(FENCE_PREFIX.len() + key.len() + 13);
    write_legacy_fence_key(key, &mut name).expect("a Vec takes every byte");
    name
}

const FENCE_PREFIX: &[u8] = b"dlock:fence:";

/// [`legacy_fence_key`] written into `out` (e.g. a stack buffer: nothing allocated for it).
pub fn write_legacy_fence_key<W: Write + ?Sized>(key: &[u8], out: &mut W) -> io::Result<()> {
    write_companion_key(FENCE_PREFIX, key, out)
}

const DELAY_PREFIX: &[u8] = b"dlock:delay:";

/// The lock-delay key of lock `key` (`LOCKDELAY`): named like the old per-lock fencing
/// counter, with the prefix `dlock:delay:`, in the same cluster slot as `key`.
pub fn write_delay_key<W: Write + ?Sized>(key: &[u8], out: &mut W) -> io::Result<()> {
    write_companion_key(DELAY_PREFIX, key, out)
}

/// Whether `name` is named like a lock-delay key (see [`write_delay_key`]).
pub fn is_delay_key(name: &[u8]) -> bool {
    name.starts_with(DELAY_PREFIX)
}

/// `prefix` + a form of `key` in `key`'s cluster slot (see [`legacy_fence_key`]).
fn write_companion_key<W: Write + ?Sized>(
    prefix: &[u8],
    key: &[u8],
    out: &mut W,
) -> io::Result<()> {
    out.write_all(prefix)?;
    if !key.contains(&b'{') && !key.contains(&b'}') {
        out.write_all(b"{")?;
        out.write_all(key)?;
        out.write_all(b"}")
    } else if hash_tag(key).is_some() {
        out.write_all(key)
    } else {
        out.write_all(b"{")?;
        out.write_all(slot_tag(key_slot(key)).as_bytes())?;
        out.write_all(b"}:")?;
        out.write_all(key)
    }
}

/// For each slot, the smallest decimal number hashing to it. Built at compile time, so it costs
/// no heap and nothing to free when the module is unloaded.
///
/// Numbers are visited shortest first and, within one length, in increasing order: a
/// depth-first walk over the digits that extends the CRC of the prefix by one byte per node
/// (about 220k table steps in all, instead of hashing each number from scratch).
static SLOT_TAGS: [u32; 16384] = {
    let mut tags = [u32::MAX; 16384];
    let mut missing = 16384;
    // "0" is the only number starting with the digit 0.
    let zero = (crc16(b"0") & 16383) as usize;
    tags[zero] = 0;
    missing -= 1;
    // Per depth: the digit there, the CRC of the digits up to and including it, the number.
    let mut digit = [0u8; 10];
    let mut crc = [0u16; 10];
    let mut value = [0u32; 10];
    let mut len = 1;
    while missing > 0 {
        // Walk all numbers of `len` digits (first digit 1-9) in increasing order.
        let mut depth = 0;
        digit[0] = 1;
        loop {
            let (prev_crc, prev_value) = if depth == 0 {
                (0, 0)
            } else {
                (crc[depth - 1], value[depth - 1])
            };
            let byte = b'0' + digit[depth];
            crc[depth] = (prev_crc << 8) ^ CRC16_TABLE[(((prev_crc >> 8) as u8) ^ byte) as usize];
            value[depth] = prev_value * 10 + digit[depth] as u32;
            if depth + 1 < len {
                depth += 1;
                digit[depth] = 0;
                continue;
            }
            let slot = (crc[depth] & 16383) as usize;
            if tags[slot] == u32::MAX {
                tags[slot] = value[depth];
                missing -= 1;
                if missing == 0 {
                    break;
                }
            }
            // Next number: carry up through the 9s.
            while digit[depth] == 9 && depth > 0 {
                depth -= 1;
            }
            if digit[depth] == 9 {
                break; // all numbers of this length done
            }
            digit[depth] += 1;
        }
        len += 1;
    }
    tags
};

/// The smallest decimal number whose CRC16 lands in `slot`.
fn slot_tag(slot: u16) -> String {
    SLOT_TAGS[slot as usize].to_string()
}

/// Redisson's default unlock channel prefix (the module argument `channel-prefix`, the
/// client's `channel_prefix`).
pub const DEFAULT_CHANNEL_PREFIX: &str = "redisson_lock__channel";

/// Redisson's unlock channel for lock `key`: `<prefix>:{K}`, or `<prefix>:K` when K has a `{`.
pub fn unlock_channel(prefix: &str, key: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(prefix.len() + key.len() + 3);
    write_unlock_channel(prefix, key, &mut name).expect("a Vec takes every byte");
    name
}

/// [`unlock_channel`] written into `out`.
pub fn write_unlock_channel<W: Write + ?Sized>(
    prefix: &str,
    key: &[u8],
    out: &mut W,
) -> io::Result<()> {
    out.write_all(prefix.as_bytes())?;
    out.write_all(b":")?;
    if key.contains(&b'{') {
        out.write_all(key)
    } else {
        out.write_all(b"{")?;
        out.write_all(key)?;
        out.write_all(b"}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification / CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"123456789"), 0x31C3 & 16383);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(hash_tag(b"foo{}{bar}"), None);
        assert_eq!(hash_tag(b"foo{{bar}}zap"), Some(&b"{bar"[..]));
    }

    #[test]
    fn fence_keys_are_in_the_lock_slot() {
        assert_eq!(legacy_fence_key(b"order:1"), b"dlock:fence:{order:1}");
        assert_eq!(legacy_fence_key(b"{user}:lock"), b"dlock:fence:{user}:lock");
        // One slot counter for every name of a slot.
        assert_eq!(slot_fence_key(b"{user}:a"), slot_fence_key(b"{user}:b"));
        assert_eq!(slot_fence_key(b"0"), b"dlock:fences:{0}");
        assert_eq!(slot_fence_key(b"{0}:any"), b"dlock:fences:{0}");
        for k in [
            &b"a}b"[..],
            b"x{}y",
            b"}{",
            b"{",
            b"}",
            b"plain",
            b"{t}x",
            b"a{b",
        ] {
            for f in [legacy_fence_key(k), slot_fence_key(k)] {
                assert_eq!(
                    key_slot(&f),
                    key_slot(k),
                    "{:?}",
                    String::from_utf8_lossy(&f)
                );
            }
        }
        let f = legacy_fence_key(b"a}b");
        assert!(f.starts_with(b"dlock:fence:{") && f.ends_with(b"}:a}b"));
    }

    #[test]
    fn every_slot_has_its_smallest_tag() {
        for slot in 0..16384 {
            assert_eq!(key_slot(slot_tag(slot).as_bytes()), slot);
        }
        // Smallest: no smaller number lands in the slot (checked on a sample).
        for slot in (0..16384).step_by(997) {
            let tag = SLOT_TAGS[slot as usize];
            assert!((0..tag).all(|n| key_slot(n.to_string().as_bytes()) != slot));
        }
    }

    #[test]
    fn crc16_matches_the_bitwise_definition() {
        fn bitwise(bytes: &[u8]) -> u16 {
            let mut crc: u16 = 0;
            for &b in bytes {
                crc ^= (b as u16) << 8;
                for _ in 0..8 {
                    crc = if crc & 0x8000 != 0 {
                        (crc << 1) ^ 0x1021
                    } else {
                        crc << 1
                    };
                }
            }
            crc
        }
        for s in [
            &b""[..],
            b"a",
            b"123456789",
            b"dlock:fence:{x}",
            &[0xff, 0, 7],
        ] {
            assert_eq!(crc16(s), bitwise(s));
        }
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn channel_names_follow_redisson() {
        assert_eq!(
            unlock_channel("redisson_lock__channel", b"k"),
            b"redisson_lock__channel:{k}"
        );
        assert_eq!(unlock_channel("p", b"{t}k"), b"p:{t}k");
    }
}
