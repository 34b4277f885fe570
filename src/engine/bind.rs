//! BIND: holds bound to the connection that sent them. When that connection closes, each of
//! its holds has its lease cut to the grace (`rules::cut_lease`), written and propagated like
//! any lease change by the unit of work, from a 0 ms timer: the disconnect event may fire
//! inside another command (CLIENT KILL), where writing would replicate out of order.
//!
//! Memory only: bindings are not replicated or persisted (a restarted server or a promoted
//! replica knows none). Nothing is looked up while no hold is bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::{FxHashMap, FxHashSet};

use dlock_core::rules;

use crate::ffi::{timer, Ctx};
use crate::stats::{Stats, STATS};

use super::wake::Job;
use super::work;

/// A hold: database, key and owner, encoded as one byte string (db, key length, key, owner)
/// so that both indexes share one allocation.
type Hold = Arc<[u8]>;

fn encode(out: &mut Vec<u8>, db: i32, key: &[u8], owner: &[u8]) {
    out.clear();
    out.extend_from_slice(&db.to_le_bytes());
    out.extend_from_slice(&(key.len() as u64).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(owner);
}

fn decode(hold: &[u8]) -> (i32, &[u8], &[u8]) {
    let (db, rest) = hold.split_at(4);
    let (len, rest) = rest.split_at(8);
    let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
    let (key, owner) = rest.split_at(len);
    (
        i32::from_le_bytes(db.try_into().expect("4 bytes")),
        key,
        owner,
    )
}

struct Bound {
    client: u64,
    grace_ms: i64,
}

#[derive(Default)]
struct Bindings {
    by_hold: FxHashMap<Hold, Bound>,
    by_client: FxHashMap<u64, FxHashSet<Hold>>,
    /// Holds whose connection closed, with the deadline their lease is cut to (unix ms).
    cuts: Vec<(Hold, i64)>,
    /// The timer that applies `cuts` is armed.
    armed: bool,
    /// Reused to look holds up without allocating.
    scratch: Vec<u8>,
}

static BINDINGS: Mutex<Option<Bindings>> = Mutex::new(None);
/// How many holds are bound: the disconnect event and RELEASE return at once when 0.
static BOUND: AtomicUsize = AtomicUsize::new(0);

fn bindings() -> MutexGuard<'static, Option<Bindings>> {
    BINDINGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether any hold is bound.
pub fn any_bound() -> bool {
    BOUND.load(Ordering::Relaxed) > 0
}

/// Binds `owner`'s hold on `key` to client `client` with `grace_ms` (rebinding it if it was
/// bound to another connection).
pub fn bind(client: u64, db: i32, key: &[u8], owner: &[u8], grace_ms: i64) {
    let mut guard = bindings();
    let b = guard.get_or_insert_with(Bindings::default);
    encode(&mut b.scratch, db, key, owner);
    let previous = match b.by_hold.get_mut(b.scratch.as_slice()) {
        Some(bound) if bound.client == client => {
            bound.grace_ms = grace_ms; // the common case: a renewal from the same connection
            return;
        }
        Some(bound) => Some(std::mem::replace(&mut bound.client, client)),
        None => None,
    };
    let hold: Hold = Arc::from(b.scratch.as_slice());
    if let Some(old) = previous {
        b.by_hold.get_mut(&hold).expect("found above").grace_ms = grace_ms;
        forget_client_hold(b, old, &hold);
    } else {
        b.by_hold.insert(hold.clone(), Bound { client, grace_ms });
    }
    b.by_client.entry(client).or_default().insert(hold);
    BOUND.store(b.by_hold.len(), Ordering::Relaxed);
}

/// Takes `hold` out of `client`'s set. An emptied set stays until the client disconnects:
/// the next BIND on that connection (a lock cycle) reuses it instead of allocating one.
fn forget_client_hold(b: &mut Bindings, client: u64, hold: &[u8]) {
    if let Some(holds) = b.by_client.get_mut(&client) {
        holds.remove(hold);
    }
}

/// `owner` no longer holds anything on `key` (its last RELEASE): the binding ends.
pub fn unbind(db: i32, key: &[u8], owner: &[u8]) {
    if !any_bound() {
        return;
    }
    let mut guard = bindings();
    let Some(b) = guard.as_mut() else { return };
    encode(&mut b.scratch, db, key, owner);
    let hold = std::mem::take(&mut b.scratch);
    if let Some(bound) = b.by_hold.remove(hold.as_slice()) {
        forget_client_hold(b, bound.client, &hold);
    }
    b.scratch = hold;
    BOUND.store(b.by_hold.len(), Ordering::Relaxed);
}

/// The connection of `client` closed: its holds' leases are cut on the next event-loop turn,
/// to their grace from now.
pub fn client_closed(ctx: Ctx, client: u64) {
    if !any_bound() {
        return;
    }
    let mut guard = bindings();
    let Some(b) = guard.as_mut() else { return };
    let Some(holds) = b.by_client.remove(&client) else {
        return;
    };
    let now = crate::ffi::context::now_ms();
    for hold in holds {
        if let Some(bound) = b.by_hold.remove(&hold) {
            b.cuts.push((hold, now.saturating_add(bound.grace_ms)));
        }
    }
    BOUND.store(b.by_hold.len(), Ordering::Relaxed);
    arm(ctx, b, 0);
}

fn arm(ctx: Ctx, b: &mut Bindings, delay_ms: i64) {
    if !b.armed && !b.cuts.is_empty() {
        b.armed = true;
        timer::start(ctx, delay_ms, Job::CutLeases);
    }
}

/// The timer: cuts the leases of the holds whose connection closed.
pub fn cut_leases(ctx: Ctx) {
    let cuts = {
        let mut guard = bindings();
        let Some(b) = guard.as_mut() else { return };
        b.armed = false;
        if ctx.writes_paused() {
            // CLIENT PAUSE or a failover: nothing may be propagated until it ends.
            arm(ctx, b, 1);
            return;
        }
        std::mem::take(&mut b.cuts)
    };
    if !ctx.may_write() {
        return; // turned replica: the new master's data rules
    }
    for (hold, deadline) in cuts {
        let (db, key, owner) = decode(&hold);
        ctx.select_db(db);
        if !work::served_here(ctx, db, key) {
            continue; // the key left this cluster node, and its hold with it
        }
        // No requester: the key is read whole, with its expiry (a cut compares leases).
        let cut = work::with_lock(ctx, db, key, None, None, |_, lk, _| {
            rules::cut_lease(&mut lk.value, owner, deadline)
        });
        if cut {
            Stats::add(&STATS.leases_cut, 1);
        }
    }
}

/// MODULE UNLOAD.
pub fn free_all() {
    *bindings() = None;
    BOUND.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_round_trip() {
        let mut out = vec![];
        encode(&mut out, 3, b"k:{1}", b"owner:7");
        assert_eq!(decode(&out), (3, &b"k:{1}"[..], &b"owner:7"[..]));
        encode(&mut out, 0, b"", b"o");
        assert_eq!(decode(&out), (0, &b""[..], &b"o"[..]));
    }
}
