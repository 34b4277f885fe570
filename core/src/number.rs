//! Integers as Redis writes them into hash fields and as clients send them: the one decimal
//! parser of the crate, used by the lock layouts (`model`), the argument parser (`args`) and
//! the module's readers of counters and companion keys.

/// A positive decimal integer as Redis writes it (HINCRBY results): a hold count or a
/// deadline; anything else makes the hash not a lock.
#[inline]
pub fn positive(value: &[u8]) -> Option<i64> {
    decimal(value).filter(|n| *n > 0)
}

/// A decimal `i64`: an optional `-`, then one or more digits (leading zeros allowed), nothing
/// else; `None` on overflow. What `str::parse::<i64>` accepts, minus a leading `+`, without
/// its UTF-8 check (this runs on every command).
#[inline]
pub fn decimal(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() {
        return None;
    }
    // Up to 18 digits cannot overflow: no checked arithmetic (hold counts, leases, deadlines).
    if digits.len() <= 18 {
        let mut n: i64 = 0;
        for &b in digits {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            n = n * 10 + d as i64;
        }
        return Some(if negative { -n } else { n });
    }
    let mut n: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        // Accumulate negatively so that i64::MIN parses too.
        n = n.checked_mul(10)?.checked_sub(d as i64)?;
    }
    if negative {
        Some(n)
    } else {
        n.checked_neg()
    }
}

#[cfg(test)]
mod tests {
    use super::{decimal, positive};

    #[test]
    fn decimal_matches_str_parse_without_plus() {
        for text in [
            "0",
            "7",
            "-7",
            "007",
            "-0",
            "+5",
            "",
            "-",
            "1.5",
            " 1",
            "1 ",
            "x",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999",
        ] {
            let expected = text.parse::<i64>().ok().filter(|_| !text.starts_with('+'));
            assert_eq!(decimal(text.as_bytes()), expected, "{text:?}");
        }
        assert_eq!(decimal(&[0xff, b'1']), None);
        assert_eq!(positive(b"0"), None);
        assert_eq!(positive(b"12"), Some(12));
    }
}
