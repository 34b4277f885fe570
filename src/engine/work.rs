//! The unit of work on one lock: open it, serve its queue (lapsed holders, a lock freed
//! behind the module's back), apply the step, save (replicated), re-arm the lease timer.
//! Every writing command and every wake-up goes through [`unit_of_work`], and every grant
//! through [`on_grant`].

use dlock_core::model::LockValue;
use dlock_core::rules;
use dlock_core::serve::{self, Granted};
use dlock_core::terms::Terms;

use crate::ffi::cluster::Route;
use crate::ffi::string::ArgStr;
use crate::ffi::{timer, Ctx, Reply};
use crate::stats::{Stats, STATS};

use super::blocked;
use super::job::Job;
use super::registry::registry;
use super::registry::Registry;
use super::store::{FenceCounter, LockKey, Open, Requester};

/// What a grant to `req` means beyond the lock's value: the LOCKDELAY it asked for, its
/// BIND to `connection` (or a binding left from an earlier hold undone), the INFO counters;
/// the reply.
pub fn on_grant<O: AsRef<[u8]>>(
    ctx: Ctx,
    lk: &mut LockKey,
    req: &Terms<O>,
    connection: Option<u64>,
    granted: Granted,
) -> Reply {
    let owner = req.owner();
    if let Some(ms) = req.lock_delay {
        lk.delay.ask(owner, ms);
    }
    let db = ctx.selected_db();
    match req.bind.zip(connection) {
        Some((grace_ms, client)) => super::bind::bind(client, db, lk.key, owner, grace_ms),
        // A new hold without BIND: a binding left from an earlier hold (that lapsed) must
        // not cut it. (Only asked while some hold is bound.)
        None if !granted.held_before && super::bind::any_bound() => {
            super::bind::unbind(db, lk.key, owner)
        }
        None => {}
    }
    let counter = if granted.fresh {
        &STATS.grants
    } else {
        &STATS.reentrant_grants
    };
    Stats::add(counter, 1);
    match granted.token {
        Some(token) => Reply::IntPair(granted.count, token),
        None => Reply::Int(granted.count),
    }
}

/// Whether a unit of work outside a command (a timer) may serve `key` on this node. In a
/// cluster the key may have left it (migrated, its slot given away, the cluster down): then
/// nothing may be granted or created here, and every waiter of the key is answered with the
/// redirect a fresh request gets here (counted in INFO) and leaves the queue. Commands need no
/// such check: the server routed them. Call with the key's database selected, the key not open.
pub fn served_here(ctx: Ctx, db: i32, key: &[u8]) -> bool {
    let Route::Elsewhere(error) = crate::ffi::cluster::route(ctx, key) else {
        return true;
    };
    let answered = blocked::answer_all(ctx, &mut registry(), db, key, &error);
    Stats::add(&STATS.cluster_redirects, answered);
    false
}

/// Serves the queue of `lk` as `dlock_core::serve::serve` decides (head first, while the
/// lock allows it): each waiter served is answered (`blocked::answer_head`: its grant, or its
/// error: WRONGTYPE when the value no longer suits). The caller saves `lk` afterwards.
pub fn serve(ctx: Ctx, reg: &mut Registry, db: i32, lk: &mut LockKey, now: i64) {
    if reg.waiters_on(db, lk.key) == 0 {
        return;
    }
    let key = lk.key;
    let queue = reg.queued_on(db, key).map(|w| &w.terms);
    let draw = |advance| FenceCounter::of(key).token(ctx, advance);
    let served = serve::serve(&mut lk.value, lk.delay.stored(), now, queue, draw);
    for outcome in served {
        blocked::answer_head(ctx, reg, db, key, |waiter| match outcome {
            Ok(granted) => {
                Stats::add(&STATS.handoffs, 1);
                crate::stats::record_wait(waiter.since.elapsed());
                on_grant(ctx, lk, &waiter.terms, waiter.connection, granted)
            }
            Err(e) => {
                Stats::add(&STATS.errors, 1);
                Reply::Error(e.message("dlock"))
            }
        });
    }
}

/// Drops lapsed read-write holders, then serves the queue. Every command that changes a lock
/// starts with this, so commands arriving between an event and its timer respect the queue.
fn prepare(ctx: Ctx, reg: &mut Registry, db: i32, lk: &mut LockKey, now: i64) {
    let lapsed = rules::prune_lapsed(&mut lk.value, now);
    Stats::add(&STATS.leases_expired, lapsed as u64);
    serve(ctx, reg, db, lk, now);
}

/// Arms (or moves earlier) the timer that wakes the queue of `lk` when its next lease may run
/// out: a lease that expires with waiters queued is handed on within milliseconds, not on
/// Redis's 100 ms expiry cycle.
fn rearm(ctx: Ctx, reg: &mut Registry, db: i32, lk: &LockKey, now: i64) {
    let Some(slot) = reg.lease_timer(db, lk.key) else {
        return;
    };
    // Redis expires a key once now > deadline: wake 1 ms after it (or after a lock-delay).
    let delay_end = lk.delay.running_until(&lk.value, now);
    let wanted = match (rules::next_change(&lk.value), delay_end) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
    .map(|at| at.saturating_add(1));
    match (*slot, wanted) {
        (Some((_, at)), Some(w)) if at <= w => {} // an earlier timer re-checks and re-arms
        (old, Some(w)) => {
            if let Some((t, _)) = old {
                timer::stop(ctx, t);
            }
            // At least 1 ms: while clients are paused Redis does not expire keys, and a 0 ms
            // timer would spin until the pause ends.
            let job = Job::LeaseCheck {
                db,
                key: lk.key.to_vec(),
            };
            *slot = Some((timer::start(ctx, (w - now).max(1), job), w));
        }
        (Some((t, _)), None) => {
            timer::stop(ctx, t);
            *slot = None;
        }
        (None, None) => {}
    }
}

/// One unit of work on the lock at `key` (see the file doc). `name`: the key as the command's
/// own argument string, shared instead of copied. `owner`: the requesting owner, whose own
/// one-field lock is then read with one HashGet.
pub fn unit_of_work<'k, R>(
    ctx: Ctx,
    db: i32,
    key: &'k [u8],
    name: Option<ArgStr>,
    owner: Option<Requester<'k>>,
    step: impl FnOnce(&mut Registry, &mut LockKey<'k>, i64) -> R,
) -> R {
    // A queue anywhere: the lease timer may need the key's expiry.
    let need_expire = super::registry::waiting() > 0;
    let how = Open::Write {
        name,
        owner,
        need_expire,
    };
    super::listen::hear_expiries(ctx);
    let mut lk = LockKey::open(ctx, key, how);
    if !matches!(lk.value, LockValue::Semaphore(_) | LockValue::NotALock) {
        lk.delay = super::delay::LockDelay::load(ctx, key);
    }
    let now = crate::ffi::context::now_ms();
    let mut reg = registry();
    prepare(ctx, &mut reg, db, &mut lk, now);
    let result = step(&mut reg, &mut lk, now);
    lk.delay.save(ctx, key, &lk.value, now);
    lk.save();
    rearm(ctx, &mut reg, db, &lk, now);
    result
}
