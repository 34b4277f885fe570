//! What a lock key holds, decoded from and encoded to its Redis hash.
//!
//! Exclusive lock (Redisson's RLock layout): `owner -> hold count`, lease = the key's PEXPIRE.
//! Read-write lock: `mode -> read|write`, `read:<owner> -> count`, `write:<owner> -> count`,
//! `lease:<owner> -> absolute deadline (unix ms)`; the key's expiry is the latest deadline.
//! Exclusive and read-write locks held with a fencing token keep it in the empty-named field
//! `"" -> token` (no owner is empty, so it never reads as a holder).
//! Semaphore: `mode -> semaphore`, `capacity -> permits`, `permits:<owner> -> count`,
//! `lease:<owner> -> absolute deadline (unix ms)`; the key's expiry is the latest deadline.

use crate::number::{decimal, positive};
use std::collections::BTreeMap;

pub type Owner = Vec<u8>;

/// What kind of hold a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Want {
    /// DLOCK.ACQUIRE: the exclusive (Redisson-layout) lock.
    Exclusive,
    /// DLOCK.RWLOCK ... READ
    Read,
    /// DLOCK.RWLOCK ... WRITE
    Write,
    /// DLOCK.SEMAPHORE: `count` permits of a semaphore of `capacity`.
    Permits { capacity: i64, count: i64 },
}

impl Want {
    /// How DLOCK.WAITERS names the request: `lock`, `read`, `write` or `permits:<n>`.
    pub fn describe(self) -> String {
        match self {
            Want::Exclusive => "lock".into(),
            Want::Read => "read".into(),
            Want::Write => "write".into(),
            Want::Permits { count, .. } => format!("permits:{count}"),
        }
    }
}

/// A mode named on a read-write lock (DLOCK.RELEASE's optional word).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Read,
    Write,
}

/// The decoded value of a lock key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LockValue {
    /// No key.
    Free,
    Exclusive(Exclusive),
    ReadWrite(ReadWrite),
    Semaphore(Semaphore),
    /// Something else lives at the key: WRONGTYPE for every command.
    NotALock,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Exclusive {
    /// `owner -> hold count` (one entry while held).
    pub holders: Holders,
    /// Absolute expiry of the key in unix ms; `None` when it has no TTL.
    pub expire_at: Option<i64>,
    /// The fencing token of the current hold, when one was taken (field [`FENCE_FIELD`]).
    pub fence: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReadWrite {
    pub holders: BTreeMap<Owner, RwHolder>,
    /// The fencing token of the current WRITE hold (field [`FENCE_FIELD`]).
    pub fence: Option<i64>,
}

/// The name of an exclusive lock's holder, inline up to 64 bytes (a Redisson or dlock
/// `UUID:thread` owner fits): taking and releasing a lock allocates nothing for it.
pub type HolderName = smallvec::SmallVec<[u8; 64]>;

/// The holders of an exclusive lock, `owner -> hold count`, by owner. Nearly always one: kept
/// inline then (no map, and no allocation for a name of up to 64 bytes); a hash with several
/// positive fields (not written by dlock or Redisson) still decodes, as a sorted list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Holders {
    #[default]
    None,
    One((HolderName, i64)),
    /// Two or more, sorted by owner.
    Many(Vec<(HolderName, i64)>),
}

impl Holders {
    #[inline]
    fn as_slice(&self) -> &[(HolderName, i64)] {
        match self {
            Holders::None => &[],
            Holders::One(pair) => std::slice::from_ref(pair),
            Holders::Many(v) => v,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Holders::None)
    }

    /// `(owner, count)` pairs by owner.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &i64)> {
        self.as_slice().iter().map(|(o, c)| (o.as_slice(), c))
    }

    #[inline]
    pub fn get(&self, owner: &[u8]) -> Option<&i64> {
        self.as_slice()
            .iter()
            .find(|(o, _)| o.as_slice() == owner)
            .map(|(_, c)| c)
    }

    #[inline]
    pub fn get_mut(&mut self, owner: &[u8]) -> Option<&mut i64> {
        match self {
            Holders::None => None,
            Holders::One((o, c)) => (o.as_slice() == owner).then_some(c),
            Holders::Many(v) => v
                .iter_mut()
                .find(|(o, _)| o.as_slice() == owner)
                .map(|(_, c)| c),
        }
    }

    pub fn contains_key(&self, owner: &[u8]) -> bool {
        self.get(owner).is_some()
    }

    /// Sets `owner`'s count (adding the owner when absent).
    #[inline]
    pub fn insert(&mut self, owner: &[u8], count: i64) {
        if let Some(c) = self.get_mut(owner) {
            *c = count;
            return;
        }
        let owner = HolderName::from_slice(owner);
        // A free lock's first holder (every fresh grant): written in place.
        if let Holders::None = self {
            *self = Holders::One((owner, count));
            return;
        }
        *self = match std::mem::take(self) {
            Holders::None => Holders::One((owner, count)),
            Holders::One(first) => {
                let mut v = vec![first, (owner, count)];
                v.sort();
                Holders::Many(v)
            }
            Holders::Many(mut v) => {
                let at = v.partition_point(|(o, _)| *o < owner);
                v.insert(at, (owner, count));
                Holders::Many(v)
            }
        };
    }

    /// Takes `owner` out; its count, if it held.
    #[inline]
    pub fn remove(&mut self, owner: &[u8]) -> Option<i64> {
        // The one holder leaving (every release of a held lock): no move of the value.
        if let Holders::One((o, c)) = self {
            if o.as_slice() != owner {
                return None;
            }
            let c = *c;
            *self = Holders::None;
            return Some(c);
        }
        match std::mem::take(self) {
            Holders::None => None,
            Holders::One((o, c)) if o.as_slice() == owner => Some(c),
            one @ Holders::One(_) => {
                *self = one;
                None
            }
            Holders::Many(mut v) => {
                let found = v.iter().position(|(o, _)| o.as_slice() == owner);
                let removed = found.map(|i| v.remove(i).1);
                *self = match v.len() {
                    1 => Holders::One(v.pop().expect("one left")),
                    _ => Holders::Many(v),
                };
                removed
            }
        }
    }
}

/// One owner's holds on a read-write lock and its own lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RwHolder {
    pub read: i64,
    pub write: i64,
    /// Absolute end of this owner's lease (unix ms).
    pub deadline: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Semaphore {
    /// The number of permits, fixed while the key exists.
    pub capacity: i64,
    pub holders: BTreeMap<Owner, SemHolder>,
}

/// One owner's permits on a semaphore and its own lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SemHolder {
    pub permits: i64,
    /// Absolute end of this owner's lease (unix ms).
    pub deadline: i64,
}

impl Semaphore {
    /// Permits held by all holders.
    pub fn used(&self) -> i64 {
        self.holders.values().map(|h| h.permits).sum()
    }
}

/// What a key holds, as read from Redis.
pub enum Stored<'a> {
    Absent,
    Hash {
        fields: &'a [(Vec<u8>, Vec<u8>)],
        expire_at: Option<i64>,
    },
    Other,
}

/// Exclusive and read-write layouts: the field holding the current hold's fencing token. Empty,
/// because an owner never is: a Redisson client reading the hash sees no extra holder, and the
/// field goes with the key when the lock is freed.
pub const FENCE_FIELD: &[u8] = b"";
/// Read-write layout: the field naming the mode (`read` or `write`); no owner may be called so.
pub const MODE_FIELD: &[u8] = b"mode";
/// Read-write layout: `read:<owner>` holds that owner's READ count.
pub const READ_PREFIX: &[u8] = b"read:";
/// Read-write layout: `write:<owner>` holds that owner's WRITE count.
pub const WRITE_PREFIX: &[u8] = b"write:";
/// Read-write layout: `lease:<owner>` holds the absolute end of that owner's lease (unix ms).
pub const LEASE_PREFIX: &[u8] = b"lease:";
/// Semaphore layout: the `mode` value of a semaphore.
pub const SEMAPHORE_MODE: &[u8] = b"semaphore";
/// Semaphore layout: the field holding the number of permits.
pub const CAPACITY_FIELD: &[u8] = b"capacity";
/// Semaphore layout: `permits:<owner>` holds the permits that owner holds (its lease is in
/// `lease:<owner>`, as for read-write locks).
pub const PERMITS_PREFIX: &[u8] = b"permits:";

impl LockValue {
    pub fn decode(stored: Stored) -> LockValue {
        match stored {
            Stored::Absent => LockValue::Free,
            Stored::Other => LockValue::NotALock,
            Stored::Hash { fields, expire_at } => {
                let mode = fields.iter().find(|(f, _)| f == MODE_FIELD).map(|(_, v)| v);
                if mode.is_some_and(|m| m == SEMAPHORE_MODE) {
                    decode_semaphore(fields).map_or(LockValue::NotALock, LockValue::Semaphore)
                } else if mode.is_some() {
                    decode_rw(fields).map_or(LockValue::NotALock, LockValue::ReadWrite)
                } else {
                    decode_exclusive(fields, expire_at)
                        .map_or(LockValue::NotALock, LockValue::Exclusive)
                }
            }
        }
    }

    /// The hash fields this value is stored as (empty: the key does not exist).
    pub fn encode(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut out = BTreeMap::new();
        match self {
            LockValue::Exclusive(x) => {
                for (owner, count) in x.holders.iter() {
                    out.insert(owner.to_vec(), count.to_string().into_bytes());
                }
                if let Some(token) = x.fence.filter(|_| !x.holders.is_empty()) {
                    out.insert(FENCE_FIELD.to_vec(), token.to_string().into_bytes());
                }
            }
            LockValue::ReadWrite(rw) => {
                if rw.holders.is_empty() {
                    return out;
                }
                let mode: &[u8] = if rw.is_write_locked() {
                    b"write"
                } else {
                    b"read"
                };
                out.insert(MODE_FIELD.to_vec(), mode.to_vec());
                if let Some(token) = rw.fence {
                    out.insert(FENCE_FIELD.to_vec(), token.to_string().into_bytes());
                }
                for (owner, h) in &rw.holders {
                    let field = |prefix: &[u8]| [prefix, owner.as_slice()].concat();
                    if h.read > 0 {
                        out.insert(field(READ_PREFIX), h.read.to_string().into_bytes());
                    }
                    if h.write > 0 {
                        out.insert(field(WRITE_PREFIX), h.write.to_string().into_bytes());
                    }
                    out.insert(field(LEASE_PREFIX), h.deadline.to_string().into_bytes());
                }
            }
            LockValue::Semaphore(sem) => {
                if sem.holders.is_empty() {
                    return out;
                }
                out.insert(MODE_FIELD.to_vec(), SEMAPHORE_MODE.to_vec());
                out.insert(
                    CAPACITY_FIELD.to_vec(),
                    sem.capacity.to_string().into_bytes(),
                );
                for (owner, h) in &sem.holders {
                    let field = |prefix: &[u8]| [prefix, owner.as_slice()].concat();
                    out.insert(field(PERMITS_PREFIX), h.permits.to_string().into_bytes());
                    out.insert(field(LEASE_PREFIX), h.deadline.to_string().into_bytes());
                }
            }
            LockValue::Free | LockValue::NotALock => {}
        }
        out
    }

    /// The absolute expiry the key should carry.
    #[inline]
    pub fn expire_at(&self) -> Option<i64> {
        match self {
            LockValue::Exclusive(x) => x.expire_at,
            LockValue::ReadWrite(rw) => rw.holders.values().map(|h| h.deadline).max(),
            LockValue::Semaphore(sem) => sem.holders.values().map(|h| h.deadline).max(),
            _ => None,
        }
    }

    /// The fencing token of the current hold, if it took one.
    pub fn fence(&self) -> Option<i64> {
        match self {
            LockValue::Exclusive(x) => x.fence,
            LockValue::ReadWrite(rw) => rw.fence,
            _ => None,
        }
    }

    /// Sets (or clears) the fencing token of the current hold; semaphores have none.
    pub fn set_fence(&mut self, token: Option<i64>) {
        match self {
            LockValue::Exclusive(x) => x.fence = token,
            LockValue::ReadWrite(rw) => rw.fence = token,
            _ => {}
        }
    }

    /// Drops empty locks to `Free`, so that "no holder" and "no key" are one state.
    pub fn normalize(&mut self) {
        let empty = match self {
            LockValue::Exclusive(x) => x.holders.is_empty(),
            LockValue::ReadWrite(rw) => rw.holders.is_empty(),
            LockValue::Semaphore(sem) => sem.holders.is_empty(),
            _ => false,
        };
        if empty {
            *self = LockValue::Free;
        }
    }
}

impl ReadWrite {
    pub fn is_write_locked(&self) -> bool {
        self.holders.values().any(|h| h.write > 0)
    }
}

fn decode_exclusive(fields: &[(Vec<u8>, Vec<u8>)], expire_at: Option<i64>) -> Option<Exclusive> {
    let mut holders = Holders::None;
    let mut fence = None;
    for (f, v) in fields {
        if f == FENCE_FIELD {
            fence = Some(decimal(v).filter(|n| *n >= 0)?);
        } else {
            holders.insert(f, positive(v)?);
        }
    }
    Some(Exclusive {
        holders,
        expire_at,
        fence,
    })
}

fn decode_rw(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<ReadWrite> {
    let mut holders: BTreeMap<Owner, RwHolder> = BTreeMap::new();
    let mut leases: BTreeMap<Owner, i64> = BTreeMap::new();
    let mut fence = None;
    for (f, v) in fields {
        if f == MODE_FIELD {
            if v != b"read" && v != b"write" {
                return None;
            }
        } else if f == FENCE_FIELD {
            fence = Some(decimal(v).filter(|n| *n >= 0)?);
        } else if let Some(owner) = f.strip_prefix(READ_PREFIX) {
            holders.entry(owner.to_vec()).or_default().read = positive(v)?;
        } else if let Some(owner) = f.strip_prefix(WRITE_PREFIX) {
            holders.entry(owner.to_vec()).or_default().write = positive(v)?;
        } else if let Some(owner) = f.strip_prefix(LEASE_PREFIX) {
            leases.insert(owner.to_vec(), positive(v)?);
        } else {
            return None;
        }
    }
    // Every holder needs its lease and every lease a holder; at most one writer.
    if leases.len() != holders.len() || holders.values().filter(|h| h.write > 0).count() > 1 {
        return None;
    }
    for (owner, h) in holders.iter_mut() {
        h.deadline = *leases.get(owner)?;
    }
    Some(ReadWrite { holders, fence })
}

/// A semaphore hash: every holder has its permits and its lease, and they fit the capacity.
fn decode_semaphore(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<Semaphore> {
    let mut capacity = None;
    let mut permits: BTreeMap<Owner, i64> = BTreeMap::new();
    let mut leases: BTreeMap<Owner, i64> = BTreeMap::new();
    for (f, v) in fields {
        if f == MODE_FIELD {
            continue; // already known to be `semaphore`
        } else if f == CAPACITY_FIELD {
            capacity = Some(positive(v)?);
        } else if let Some(owner) = f.strip_prefix(PERMITS_PREFIX) {
            permits.insert(owner.to_vec(), positive(v)?);
        } else if let Some(owner) = f.strip_prefix(LEASE_PREFIX) {
            leases.insert(owner.to_vec(), positive(v)?);
        } else {
            return None;
        }
    }
    if leases.len() != permits.len() {
        return None;
    }
    let mut sem = Semaphore {
        capacity: capacity?,
        holders: BTreeMap::new(),
    };
    for (owner, permits) in permits {
        let deadline = *leases.get(&owner)?;
        sem.holders.insert(owner, SemHolder { permits, deadline });
    }
    (sem.used() <= sem.capacity).then_some(sem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(a, b)| (a.as_bytes().to_vec(), b.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn fence_field_round_trips_and_is_no_holder() {
        let fields = f(&[("me", "2"), ("", "7")]);
        let v = LockValue::decode(Stored::Hash {
            fields: &fields,
            expire_at: Some(9),
        });
        let LockValue::Exclusive(x) = &v else {
            panic!("{v:?}")
        };
        assert_eq!((x.holders.len(), x.fence), (1, Some(7)));
        assert_eq!(v.encode().into_iter().collect::<Vec<_>>(), {
            let mut e = fields.clone();
            e.sort();
            e
        });
        let rw = f(&[
            ("mode", "write"),
            ("write:w", "1"),
            ("lease:w", "5"),
            ("", "3"),
        ]);
        let v = LockValue::decode(Stored::Hash {
            fields: &rw,
            expire_at: None,
        });
        assert_eq!(v.fence(), Some(3));
        for bad in [&[("me", "1"), ("", "x")][..], &[("me", "1"), ("", "-1")]] {
            let v = LockValue::decode(Stored::Hash {
                fields: &f(bad),
                expire_at: None,
            });
            assert_eq!(v, LockValue::NotALock);
        }
    }

    #[test]
    fn exclusive_round_trip() {
        let fields = f(&[("a1b2:7", "2")]);
        let v = LockValue::decode(Stored::Hash {
            fields: &fields,
            expire_at: Some(99),
        });
        match &v {
            LockValue::Exclusive(x) => {
                assert_eq!(x.holders.get(b"a1b2:7"), Some(&2));
                assert_eq!(x.expire_at, Some(99));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(v.encode().into_iter().collect::<Vec<_>>(), fields);
    }

    #[test]
    fn holders_stay_sorted_and_inline_for_one() {
        let mut h = Holders::default();
        assert!(h.is_empty());
        h.insert(b"b", 1);
        assert!(matches!(h, Holders::One(_)));
        h.insert(b"c", 3);
        h.insert(b"a", 2);
        h.insert(b"c", 4);
        let owners: Vec<_> = h.iter().map(|(o, c)| (o.to_vec(), *c)).collect();
        assert_eq!(
            owners,
            vec![(b"a".to_vec(), 2), (b"b".to_vec(), 1), (b"c".to_vec(), 4)]
        );
        assert_eq!(h.remove(b"b"), Some(1));
        assert_eq!(h.remove(b"x"), None);
        assert_eq!(h.remove(b"a"), Some(2));
        assert_eq!(h, Holders::One((HolderName::from_slice(b"c"), 4)));
        *h.get_mut(b"c").unwrap() += 1;
        assert_eq!(h.get(b"c"), Some(&5));
        assert_eq!(h.remove(b"c"), Some(5));
        assert!(h.is_empty());
    }

    #[test]
    fn not_a_lock() {
        for pairs in [
            &[("a", "x")][..],
            &[("a", "0")],
            &[("a", "-1")],
            &[("a", "1"), ("b", "1.5")],
            &[("mode", "other")],
            &[("mode", "read"), ("read:a", "1")], // no lease
            &[("mode", "semaphore"), ("permits:a", "1"), ("lease:a", "5")], // no capacity
            &[("mode", "semaphore"), ("capacity", "2"), ("permits:a", "1")], // no lease
            &[
                ("mode", "semaphore"),
                ("capacity", "1"),
                ("permits:a", "2"),
                ("lease:a", "5"),
            ],
            &[
                ("mode", "semaphore"),
                ("capacity", "2"),
                ("read:a", "1"),
                ("lease:a", "5"),
            ],
            &[("mode", "read"), ("zzz", "1")],
            &[
                ("mode", "write"),
                ("write:a", "1"),
                ("write:b", "1"),
                ("lease:a", "5"),
                ("lease:b", "5"),
            ],
        ] {
            let fields = f(pairs);
            let v = LockValue::decode(Stored::Hash {
                fields: &fields,
                expire_at: None,
            });
            assert_eq!(v, LockValue::NotALock, "{pairs:?}");
        }
        assert_eq!(LockValue::decode(Stored::Other), LockValue::NotALock);
        assert_eq!(LockValue::decode(Stored::Absent), LockValue::Free);
    }

    #[test]
    fn rw_round_trip() {
        let fields = f(&[
            ("lease:w", "200"),
            ("lease:r", "300"),
            ("mode", "write"),
            ("read:r", "1"),
            ("read:w", "2"),
            ("write:w", "1"),
        ]);
        let v = LockValue::decode(Stored::Hash {
            fields: &fields,
            expire_at: Some(1),
        });
        let LockValue::ReadWrite(rw) = &v else {
            panic!("{v:?}")
        };
        assert_eq!(
            rw.holders[&b"w".to_vec()],
            RwHolder {
                read: 2,
                write: 1,
                deadline: 200
            }
        );
        assert!(rw.is_write_locked());
        assert_eq!(v.expire_at(), Some(300));
        let mut sorted = fields.clone();
        sorted.sort();
        assert_eq!(v.encode().into_iter().collect::<Vec<_>>(), sorted);
    }

    #[test]
    fn semaphore_round_trip() {
        let fields = f(&[
            ("capacity", "4"),
            ("lease:a", "200"),
            ("lease:b", "300"),
            ("mode", "semaphore"),
            ("permits:a", "1"),
            ("permits:b", "2"),
        ]);
        let v = LockValue::decode(Stored::Hash {
            fields: &fields,
            expire_at: Some(1),
        });
        let LockValue::Semaphore(sem) = &v else {
            panic!("{v:?}")
        };
        assert_eq!((sem.capacity, sem.used()), (4, 3));
        assert_eq!(
            sem.holders[&b"b".to_vec()],
            SemHolder {
                permits: 2,
                deadline: 300
            }
        );
        assert_eq!(v.expire_at(), Some(300));
        assert_eq!(v.encode().into_iter().collect::<Vec<_>>(), fields);
    }
}
