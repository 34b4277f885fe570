//! [`InFlight`]: which acquires and releases of an (owner, lock) are on their way to the
//! server, so that the clean-up after a cancelled acquire can tell its own grant from a
//! concurrent one of the same owner.
//!
//! The clean-up compares the owner's hold count on the server with the holds this client
//! knows of; a surplus is the abandoned grant. That comparison is only right while no other
//! acquire or release of the same (key, owner, kind) is between its send and its
//! registration: a grant not yet registered would look abandoned (and be released: a hold
//! lost), a release not yet answered would hide one. So every such operation holds a read
//! gate of its (key, owner, kind) for its flight, and the clean-up takes the write gate:
//! it waits, without blocking new operations, until none is in flight, then holds the gate
//! (new operations of that owner on that lock wait a round trip or two) while it checks
//! and gives back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::kind::LockKind;

type Slot = (Arc<str>, Arc<str>, LockKind);

/// The gates of every (key, owner, kind) with an operation in flight.
#[derive(Default)]
pub(crate) struct InFlight {
    gates: Mutex<HashMap<Slot, Arc<RwLock<()>>>>,
}

/// Held while one acquire or release is in flight; dropping it ends the flight.
pub(crate) struct Flight<'a> {
    owner: &'a InFlight,
    slot: Slot,
    gate: Option<OwnedRwLockReadGuard<()>>,
}

/// Held by the clean-up of an abandoned acquire: no other operation of the same
/// (key, owner, kind) is in flight while it lives.
pub(crate) struct Quiet<'a> {
    owner: &'a InFlight,
    slot: Slot,
    gate: Option<OwnedRwLockWriteGuard<()>>,
}

impl InFlight {
    fn gate(&self, slot: &Slot) -> Arc<RwLock<()>> {
        let mut gates = self.gates.lock().unwrap();
        gates.entry(slot.clone()).or_default().clone()
    }

    /// Forget the gate of `slot` once nobody but the map has it (so the map does not grow
    /// with every lock name and owner ever used).
    fn prune(&self, slot: &Slot) {
        let mut gates = self.gates.lock().unwrap();
        if gates.get(slot).is_some_and(|g| Arc::strong_count(g) == 1) {
            gates.remove(slot);
        }
    }

    /// Start an acquire or release of `owner` on (`key`, `kind`): waits only while a
    /// clean-up of that owner on that lock runs.
    pub(crate) async fn start(
        &self,
        key: &Arc<str>,
        owner: &Arc<str>,
        kind: LockKind,
    ) -> Flight<'_> {
        let slot = (key.clone(), owner.clone(), kind);
        let gate = self.gate(&slot).read_owned().await;
        Flight {
            owner: self,
            slot,
            gate: Some(gate),
        }
    }

    /// Wait until no operation of `owner` on (`key`, `kind`) is in flight, for at most
    /// `within`; `None` when one still is then.
    pub(crate) async fn quiet(
        &self,
        key: &Arc<str>,
        owner: &Arc<str>,
        kind: LockKind,
        within: Duration,
    ) -> Option<Quiet<'_>> {
        let slot = (key.clone(), owner.clone(), kind);
        let gate = self.gate(&slot);
        let deadline = tokio::time::Instant::now() + within;
        // Polled, not queued: a queued writer would hold back every new operation of
        // this owner on this lock until the one in flight (maybe a long wait) ends.
        let got = loop {
            if let Ok(g) = gate.clone().try_write_owned() {
                break Some(g);
            }
            if tokio::time::Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        drop(gate);
        match got {
            Some(g) => Some(Quiet {
                owner: self,
                slot,
                gate: Some(g),
            }),
            None => {
                self.prune(&slot);
                None
            }
        }
    }

    #[cfg(test)]
    fn gates(&self) -> usize {
        self.gates.lock().unwrap().len()
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        drop(self.gate.take());
        self.owner.prune(&self.slot);
    }
}

impl Drop for Quiet<'_> {
    fn drop(&mut self) {
        drop(self.gate.take());
        self.owner.prune(&self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> (Arc<str>, Arc<str>) {
        (Arc::from("k"), Arc::from("o"))
    }

    #[tokio::test]
    async fn quiet_waits_for_flights_and_gates_are_pruned() {
        let f = InFlight::default();
        let (k, o) = slot();
        let flight = f.start(&k, &o, LockKind::Exclusive).await;
        // Another kind or owner is not held back.
        assert!(f
            .quiet(&k, &Arc::from("p"), LockKind::Exclusive, Duration::ZERO)
            .await
            .is_some());
        assert!(f
            .quiet(&k, &o, LockKind::Exclusive, Duration::from_millis(20))
            .await
            .is_none());
        drop(flight);
        let q = f.quiet(&k, &o, LockKind::Exclusive, Duration::ZERO).await;
        assert!(q.is_some());
        // A start waits while the clean-up holds the gate.
        let blocked = tokio::time::timeout(
            Duration::from_millis(20),
            f.start(&k, &o, LockKind::Exclusive),
        )
        .await;
        assert!(blocked.is_err());
        drop(q);
        drop(f.start(&k, &o, LockKind::Exclusive).await);
        assert_eq!(f.gates(), 0);
    }
}
