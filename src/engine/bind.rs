//! BIND: holds bound to the connection that sent them. When that connection closes, each of
//! its holds has its lease cut to the grace (`rules::cut_lease`), written and propagated like
//! any lease change by the unit of work, from a 0 ms timer (`fire`): the disconnect event may
//! fire inside another command (CLIENT KILL), where writing would replicate out of order.
//!
//! Memory only: bindings are not replicated or persisted (a restarted server or a promoted
//! replica knows none). Nothing is looked up while no hold is bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::ffi::{timer, Ctx};

use super::job::Job;

/// A hold: database, key and owner, encoded as one byte string (db, key length, key, owner)
/// so that both indexes share one allocation.
pub(super) type Hold = Arc<[u8]>;

fn encode(out: &mut Vec<u8>, db: i32, key: &[u8], owner: &[u8]) {
    out.clear();
    out.extend_from_slice(&db.to_le_bytes());
    out.extend_from_slice(&(key.len() as u64).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(owner);
}

pub(super) fn decode(hold: &[u8]) -> (i32, &[u8], &[u8]) {
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

/// A hold in a client's set, known by its address: it is the allocation `by_hold` keys the
/// hold with, so the set hashes a number instead of the hold's bytes.
struct ByAddr {
    addr: usize,
    hold: Hold,
}

impl ByAddr {
    fn new(hold: Hold) -> ByAddr {
        ByAddr {
            addr: addr(&hold),
            hold,
        }
    }
}

fn addr(hold: &Hold) -> usize {
    hold.as_ptr() as usize
}

impl PartialEq for ByAddr {
    fn eq(&self, other: &Self) -> bool {
        self.addr == other.addr
    }
}
impl Eq for ByAddr {}
impl std::hash::Hash for ByAddr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.addr.hash(state)
    }
}
impl std::borrow::Borrow<usize> for ByAddr {
    fn borrow(&self) -> &usize {
        &self.addr
    }
}

#[derive(Default)]
struct Bindings {
    by_hold: FxHashMap<Hold, Bound>,
    by_client: FxHashMap<u64, FxHashSet<ByAddr>>,
    /// The allocation of the last hold unbound, reused by the next bind of a hold as long
    /// (a lock cycle binds and unbinds one hold per cycle: no allocation then).
    spare: Option<Hold>,
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
        Some(bound) => {
            bound.grace_ms = grace_ms;
            Some(std::mem::replace(&mut bound.client, client))
        }
        None => None,
    };
    let hold: Hold = match previous {
        Some(old) => {
            let (hold, _) = b
                .by_hold
                .get_key_value(b.scratch.as_slice())
                .expect("found above");
            let hold = hold.clone();
            forget_client_hold(b, old, &hold);
            hold
        }
        None => {
            let hold = new_hold(&mut b.spare, &b.scratch);
            b.by_hold.insert(hold.clone(), Bound { client, grace_ms });
            hold
        }
    };
    b.by_client
        .entry(client)
        .or_default()
        .insert(ByAddr::new(hold));
    BOUND.store(b.by_hold.len(), Ordering::Relaxed);
}

/// A hold with the bytes `bytes`, in `spare`'s allocation when it fits.
fn new_hold(spare: &mut Option<Hold>, bytes: &[u8]) -> Hold {
    if let Some(mut hold) = spare.take() {
        if hold.len() == bytes.len() {
            if let Some(buf) = Arc::get_mut(&mut hold) {
                buf.copy_from_slice(bytes);
                return hold;
            }
        }
    }
    Arc::from(bytes)
}

/// Takes `hold` out of `client`'s set. An emptied set stays until the client disconnects:
/// the next BIND on that connection (a lock cycle) reuses it instead of allocating one.
fn forget_client_hold(b: &mut Bindings, client: u64, hold: &Hold) {
    if let Some(holds) = b.by_client.get_mut(&client) {
        holds.remove(&addr(hold));
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
    if let Some((hold, bound)) = b.by_hold.remove_entry(b.scratch.as_slice()) {
        forget_client_hold(b, bound.client, &hold);
        b.spare = Some(hold);
    }
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
    for ByAddr { hold, .. } in holds {
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

/// The `Job::CutLeases` timer fired: the holds whose connection closed, with the deadline
/// each lease is cut to, or nothing (none left, or a pause: then it is tried again in 1 ms).
pub(super) fn take_cuts(ctx: Ctx) -> Vec<(Hold, i64)> {
    let mut guard = bindings();
    let Some(b) = guard.as_mut() else {
        return vec![];
    };
    b.armed = false;
    if ctx.writes_paused() {
        // CLIENT PAUSE or a failover: nothing may be propagated until it ends.
        arm(ctx, b, 1);
        return vec![];
    }
    std::mem::take(&mut b.cuts)
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

    #[test]
    fn a_hold_is_indexed_once_and_follows_its_last_connection() {
        let (k, o) = (&b"k"[..], &b"o"[..]);
        bind(1, 0, k, o, 100);
        bind(1, 0, k, o, 200); // a renewal: the same entry
        bind(2, 0, k, o, 300); // rebound elsewhere
        bind(2, 1, k, o, 300); // another database: another hold
        {
            let guard = bindings();
            let b = guard.as_ref().unwrap();
            assert_eq!(b.by_hold.len(), 2);
            let mut held = vec![];
            encode(&mut held, 0, k, o);
            let bound = &b.by_hold[held.as_slice()];
            assert_eq!((bound.client, bound.grace_ms), (2, 300));
            assert!(b.by_client[&1].is_empty());
            assert_eq!(b.by_client[&2].len(), 2);
        }
        unbind(0, k, o);
        unbind(1, k, o);
        assert!(!any_bound());
        free_all();
    }
}
