//! A key as a unit of work finds it: what Redis has expired by now, and the lock with its
//! lapsed holders dropped. The step runs it before anything reads a key; the properties
//! judge the lock by it.

use dlock_core::model::LockValue;
use dlock_core::rules;

use crate::Key;

/// What Redis does to a key whose time has passed, before anything reads it: the lock key
/// expires at its TTL (an exclusive lock's lease; the latest holder lease of the others), the
/// lock-delay companion at `until + delay`.
pub(crate) fn expire(key: &mut Key) {
    let gone = match &key.value {
        LockValue::Exclusive(x) => x.expire_at.is_some_and(|at| at < 0),
        LockValue::ReadWrite(_) | LockValue::Semaphore(_) => {
            key.value.expire_at().is_some_and(|at| at < 0)
        }
        _ => false,
    };
    if gone {
        key.value = LockValue::Free;
    }
    if key.delay.as_ref().is_some_and(|d| d.expire_at() < 0) {
        key.delay = None;
    }
}

/// The lock as a unit of work starting now would find it (expired, lapsed holders dropped).
pub(crate) fn live(key: &Key) -> LockValue {
    let mut k = Key {
        value: key.value.clone(),
        ..Key::default()
    };
    expire(&mut k);
    rules::prune_lapsed(&mut k.value, 0);
    k.value
}
