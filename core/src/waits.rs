//! Who a waiting request waits for: the edges of the wait-for graph that deadlock detection
//! walks. Pure rules over a decoded lock; the module's engine supplies the values and queues.

use crate::model::{LockValue, Owner, Want};

/// The owners whose holds keep a request from being granted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Blockers {
    /// Each of these must leave before the request can be granted (exclusive holder, writer,
    /// readers blocking a WRITE).
    pub all: Vec<Owner>,
    /// Any one of these leaving may make room (the holders of a full semaphore).
    pub any: Vec<Owner>,
}

/// The holders of `value` that block `owner`'s request `want` at `now` (unix ms), leaving out
/// `owner` itself and holders whose own lease has passed. A value of another kind blocks
/// nothing (the request is answered WRONGTYPE, it does not wait).
pub fn blockers(value: &LockValue, owner: &[u8], want: Want, now: i64) -> Blockers {
    let mut b = Blockers::default();
    match (value, want) {
        (LockValue::Exclusive(x), Want::Exclusive) => {
            b.all = x
                .holders
                .iter()
                .filter(|(o, _)| *o != owner)
                .map(|(o, _)| o.to_vec())
                .collect();
        }
        (LockValue::ReadWrite(rw), Want::Read | Want::Write) => {
            b.all = rw
                .holders
                .iter()
                .filter(|(o, h)| o.as_slice() != owner && h.deadline >= now)
                .filter(|(_, h)| want == Want::Write || h.write > 0)
                .map(|(o, _)| o.clone())
                .collect();
        }
        (LockValue::Semaphore(sem), Want::Permits { count, .. }) => {
            let live = || sem.holders.iter().filter(|(_, h)| h.deadline >= now);
            let used: i64 = live().map(|(_, h)| h.permits).sum();
            if used + count > sem.capacity {
                b.any = live()
                    .filter(|(o, _)| o.as_slice() != owner)
                    .map(|(o, _)| o.clone())
                    .collect();
            }
        }
        _ => {}
    }
    b
}

/// Whether a request queued ahead (`ahead`) holds back `me` behind it: always in a strict FIFO
/// queue, except two READs (consecutive readers are granted together).
pub fn queued_conflict(ahead: Want, me: Want) -> bool {
    !(ahead == Want::Read && me == Want::Read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::acquire;

    fn permits(count: i64) -> Want {
        Want::Permits { capacity: 2, count }
    }

    #[test]
    fn holders_that_block() {
        let mut v = LockValue::Free;
        acquire(&mut v, b"a", Want::Exclusive, 100, 0, false);
        assert_eq!(
            blockers(&v, b"b", Want::Exclusive, 0).all,
            vec![b"a".to_vec()]
        );
        assert!(blockers(&v, b"a", Want::Exclusive, 0).all.is_empty());
        assert_eq!(blockers(&v, b"b", Want::Read, 0), Blockers::default());

        let mut rw = LockValue::Free;
        acquire(&mut rw, b"r1", Want::Read, 100, 0, false);
        acquire(&mut rw, b"r2", Want::Read, 50, 0, false);
        // Readers share: a READ is blocked by nobody; a WRITE by every live reader.
        assert!(blockers(&rw, b"x", Want::Read, 0).all.is_empty());
        assert_eq!(blockers(&rw, b"x", Want::Write, 0).all.len(), 2);
        assert_eq!(
            blockers(&rw, b"x", Want::Write, 60).all,
            vec![b"r1".to_vec()],
            "a lapsed reader blocks nothing"
        );

        let mut sem = LockValue::Free;
        acquire(&mut sem, b"a", permits(1), 100, 0, false);
        assert_eq!(blockers(&sem, b"b", permits(1), 0), Blockers::default());
        acquire(&mut sem, b"b", permits(1), 100, 0, false);
        let full = blockers(&sem, b"c", permits(1), 0);
        assert!(full.all.is_empty());
        assert_eq!(full.any, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(blockers(&sem, b"a", permits(1), 0).any, vec![b"b".to_vec()]);
    }

    #[test]
    fn queue_conflicts() {
        assert!(!queued_conflict(Want::Read, Want::Read));
        assert!(queued_conflict(Want::Write, Want::Read));
        assert!(queued_conflict(Want::Read, Want::Write));
        assert!(queued_conflict(Want::Exclusive, Want::Exclusive));
        assert!(queued_conflict(permits(1), permits(1)));
    }
}
