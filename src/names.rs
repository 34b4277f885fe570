//! Names of the keys and channels that belong to a lock: the fencing counter (same cluster
//! slot as the lock) and Redisson's unlock channel.

/// Redis Cluster's CRC16 (XMODEM), as in `cluster.c`.
fn crc16(bytes: &[u8]) -> u16 {
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

/// The part of `key` that Redis Cluster hashes: the first `{...}` with something inside, else
/// the whole key (`keyHashSlot` in `cluster.c`).
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The cluster hash slot of `key`.
pub fn hash_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) & 16383
}

/// The fencing counter of lock `key`, in the same cluster slot:
/// - `dlock:fence:{K}` when K has no `{` or `}`;
/// - `dlock:fence:K` when K has a hash tag (the tag is kept);
/// - otherwise (braces without a valid tag, e.g. `a}b` or `x{}y`) `dlock:fence:{N}:K`, where N
///   is the smallest decimal number whose slot is K's slot.
pub fn fence_key(key: &[u8]) -> Vec<u8> {
    let mut name = b"dlock:fence:".to_vec();
    if !key.contains(&b'{') && !key.contains(&b'}') {
        name.push(b'{');
        name.extend_from_slice(key);
        name.push(b'}');
    } else if hash_tag(key).is_some() {
        name.extend_from_slice(key);
    } else {
        name.push(b'{');
        name.extend_from_slice(slot_tag(hash_slot(key)).as_bytes());
        name.extend_from_slice(b"}:");
        name.extend_from_slice(key);
    }
    name
}

lazy_static::lazy_static! {
    /// For each slot, the smallest decimal number hashing to it (built once, ~200k CRCs).
    static ref SLOT_TAGS: Vec<u32> = {
        let mut tags = vec![u32::MAX; 16384];
        let mut missing = tags.len();
        let mut n = 0u32;
        while missing > 0 {
            let slot = hash_slot(n.to_string().as_bytes()) as usize;
            if tags[slot] == u32::MAX {
                tags[slot] = n;
                missing -= 1;
            }
            n += 1;
        }
        tags
    };
}

/// The smallest decimal number whose CRC16 lands in `slot`.
fn slot_tag(slot: u16) -> String {
    SLOT_TAGS[slot as usize].to_string()
}

/// Redisson's unlock channel for lock `key`: `<prefix>:{K}`, or `<prefix>:K` when K has a `{`.
pub fn unlock_channel(prefix: &str, key: &[u8]) -> Vec<u8> {
    let mut name = prefix.as_bytes().to_vec();
    name.push(b':');
    if key.contains(&b'{') {
        name.extend_from_slice(key);
    } else {
        name.push(b'{');
        name.extend_from_slice(key);
        name.push(b'}');
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification / CLUSTER KEYSLOT.
        assert_eq!(hash_slot(b"123456789"), 0x31C3 & 16383);
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_eq!(hash_slot(b"foo{}{bar}"), hash_slot(b"foo{}{bar}"));
        assert_eq!(hash_tag(b"foo{}{bar}"), None);
        assert_eq!(hash_tag(b"foo{{bar}}zap"), Some(&b"{bar"[..]));
    }

    #[test]
    fn fence_key_is_in_the_lock_slot() {
        assert_eq!(fence_key(b"order:1"), b"dlock:fence:{order:1}");
        assert_eq!(fence_key(b"{user}:lock"), b"dlock:fence:{user}:lock");
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
            let f = fence_key(k);
            assert_eq!(
                hash_slot(&f),
                hash_slot(k),
                "{:?}",
                String::from_utf8_lossy(&f)
            );
        }
        let f = fence_key(b"a}b");
        assert!(f.starts_with(b"dlock:fence:{") && f.ends_with(b"}:a}b"));
    }

    #[test]
    fn every_slot_has_a_tag() {
        for slot in (0..16384).step_by(97) {
            assert_eq!(hash_slot(slot_tag(slot).as_bytes()), slot);
        }
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
