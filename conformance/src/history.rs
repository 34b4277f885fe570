//! The history check: every interval in which a driver reported a hold as held, per key.
//! Intervals of different owners of an exclusive lock or a write lock (or of a write lock
//! and a read lock) may overlap by at most the bound; a semaphore's holders may hold more
//! than its capacity for at most the bound.

/// One hold as the drivers reported it, in µs of the protocol's clock.
#[derive(Clone, Debug)]
pub struct Interval {
    /// `actor/hold`, for messages.
    pub name: String,
    /// `actor/owner label`: the same owner across holds.
    pub owner: String,
    pub key: String,
    pub kind: String,
    /// Permits (semaphores), else 1.
    pub count: u64,
    pub capacity: Option<u64>,
    pub start: i64,
    pub end: i64,
}

/// What the check found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// The longest overlap of conflicting holds (or time over a semaphore's capacity), µs.
    pub longest_us: i64,
    pub failures: Vec<String>,
}

fn conflict(a: &str, b: &str) -> bool {
    match (a, b) {
        ("read", "read") => false,
        ("semaphore", _) | (_, "semaphore") => false,
        _ => true,
    }
}

pub fn check(intervals: &[Interval], bound_us: i64) -> Verdict {
    let mut v = Verdict::default();
    for (i, a) in intervals.iter().enumerate() {
        for b in &intervals[i + 1..] {
            if a.key != b.key || a.owner == b.owner || !conflict(&a.kind, &b.kind) {
                continue;
            }
            let overlap = a.end.min(b.end) - a.start.max(b.start);
            if overlap <= 0 {
                continue;
            }
            v.longest_us = v.longest_us.max(overlap);
            if overlap > bound_us {
                v.failures.push(format!(
                    "history: {} and {} both reported {:?} held for {} ms (bound {} ms)",
                    a.name,
                    b.name,
                    a.key,
                    overlap / 1000,
                    bound_us / 1000
                ));
            }
        }
    }
    // Semaphores: sweep the starts and ends of each key's holds.
    let mut keys: Vec<&str> = intervals
        .iter()
        .filter(|i| i.kind == "semaphore")
        .map(|i| i.key.as_str())
        .collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let holds: Vec<&Interval> = intervals.iter().filter(|i| i.key == key && i.kind == "semaphore").collect();
        let capacity = holds.iter().filter_map(|h| h.capacity).min().unwrap_or(u64::MAX);
        let mut edges: Vec<(i64, i64)> = holds
            .iter()
            .flat_map(|h| [(h.start, h.count as i64), (h.end, -(h.count as i64))])
            .collect();
        // Ends before starts at one instant.
        edges.sort();
        let (mut held, mut over_since, mut over_total) = (0i64, None, 0i64);
        for (t, d) in edges {
            held += d;
            match (held as u64 > capacity, over_since) {
                (true, None) => over_since = Some(t),
                (false, Some(s)) => {
                    over_total = over_total.max(t - s);
                    over_since = None;
                }
                _ => {}
            }
        }
        v.longest_us = v.longest_us.max(over_total);
        if over_total > bound_us {
            v.failures.push(format!(
                "history: semaphore {key:?} held beyond its capacity {capacity} for {} ms (bound {} ms)",
                over_total / 1000,
                bound_us / 1000
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(name: &str, owner: &str, kind: &str, start: i64, end: i64) -> Interval {
        Interval {
            name: name.into(),
            owner: owner.into(),
            key: "k".into(),
            kind: kind.into(),
            count: 1,
            capacity: Some(2),
            start,
            end,
        }
    }

    #[test]
    fn overlaps_of_different_owners_beyond_the_bound_fail() {
        let ok = check(&[iv("a", "a", "lock", 0, 1000), iv("b", "b", "lock", 950, 2000)], 100);
        assert!(ok.failures.is_empty());
        assert_eq!(ok.longest_us, 50);
        let bad = check(&[iv("a", "a", "lock", 0, 1000), iv("b", "b", "write", 500, 2000)], 100);
        assert_eq!(bad.failures.len(), 1, "{bad:?}");
        // Same owner (reentrant), or two readers: no conflict.
        let same = check(&[iv("a", "a", "lock", 0, 1000), iv("a2", "a", "lock", 0, 1000)], 100);
        assert!(same.failures.is_empty());
        let readers = check(&[iv("a", "a", "read", 0, 1000), iv("b", "b", "read", 0, 1000)], 100);
        assert!(readers.failures.is_empty());
    }

    #[test]
    fn a_semaphore_over_its_capacity_fails() {
        let three = [
            iv("a", "a", "semaphore", 0, 1000),
            iv("b", "b", "semaphore", 0, 1000),
            iv("c", "c", "semaphore", 500, 2000),
        ];
        let v = check(&three, 100);
        assert_eq!(v.failures.len(), 1, "{v:?}");
        assert_eq!(v.longest_us, 500);
        let two = check(&three[..2], 100);
        assert!(two.failures.is_empty());
    }
}
