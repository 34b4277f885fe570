//! Whether a release that frees a lock publishes Redisson's unlock message now (the `publish`
//! module argument; docs/BEHAVIOUR.md, *Unlock channel*).
//!
//! The message wakes Redisson's waiters, which SUBSCRIBE to the lock's channel before they try
//! the lock again. It costs each release ~0.8k instructions (the channel's name, Redis's look-up
//! of the channel and its walk over the patterns), although on most servers nobody listens.
//! With `publish auto` (the default) a standalone server without replicas publishes only while
//! someone may hear it: a subscriber to a pattern, or to a channel under the channel prefix
//! (`ffi::pubsub`, two `PUBSUB` calls, so never asked per release).
//!
//! While the last look found nobody, a freed lock's message is held back (its name kept) and a
//! timer looks again [`QUIET_LOOK_MS`] later: if a subscriber came meanwhile, the held-back
//! messages are sent then, late; if not, they are forgotten (a subscriber that came and went
//! in between is not waiting any more). So a Redisson waiter is woken at most `QUIET_LOOK_MS`
//! late, and only when it subscribed while nobody else listened. A name is held back once per
//! look: a lock freed again before the look (after a FLUSHALL, or taken and released again)
//! sends one message, not one per freeing, since one `0` wakes every waiter on the channel and
//! a subscriber must not hear of a freeing the lock has since gone past. While someone listens, every
//! message goes out at once, and a release looks again after [`HEARD_LOOK_MS`] (staying in
//! that state longer than needed only costs the message). In cluster mode (a PUBLISH reaches
//! every node's subscribers) and with replicas (theirs) the subscribers cannot be counted here:
//! the message always goes out.

use std::hash::Hasher;
use std::sync::{Mutex, MutexGuard};

use rustc_hash::{FxHashMap, FxHasher};

use dlock_core::config::Publish;
use dlock_core::names;

use crate::ffi::context::now_ms;
use crate::ffi::replicate::publish_unlock_here;
use crate::ffi::{cluster, pubsub, targets, timer, Ctx, RStr};
use crate::stats::{Stats, STATS};

use super::job::{Job, Timer};

/// After a look found nobody: when the timer looks again (the most a held-back message is late).
pub const QUIET_LOOK_MS: i64 = 100;
/// After a look found someone: how soon a release may look again.
pub const HEARD_LOOK_MS: i64 = 1_000;
/// The held-back names' buffer kept between looks (beyond it, a burst's is given back).
const KEEP_BYTES: usize = 64 * 1024;

struct Listeners {
    /// When the last look was (unix ms, `now_ms`) and whether it found someone; `None` before
    /// the first.
    looked: Option<(i64, bool)>,
    /// The names of the locks freed since that look, their messages held back (one buffer,
    /// reused: no allocation per release).
    held_back: Vec<u8>,
    /// Where each held-back name ends in `held_back`.
    ends: Vec<usize>,
    /// The held-back names by FxHash, each to its index in `ends` (a name is held back once
    /// per look; a hash shared by two names is told apart by their bytes).
    index: FxHashMap<u64, usize>,
    /// Looks again `QUIET_LOOK_MS` after a message was held back.
    timer: Option<Timer>,
}

/// `None` before the first release with `publish auto` and after MODULE UNLOAD.
static LISTENERS: Mutex<Option<Listeners>> = Mutex::new(None);

fn listeners() -> MutexGuard<'static, Option<Listeners>> {
    LISTENERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A release frees `key` (an exclusive lock nobody in the queue took): whether its unlock
/// message goes out now. `false` also when it is held back, for the timer's look.
pub fn publish_now(ctx: Ctx, mode: Publish, key: &[u8], now: i64) -> bool {
    match mode {
        Publish::Always => return true,
        Publish::Never => return false,
        Publish::Auto => {}
    }
    if targets::get(ctx).replicas || cluster::enabled(ctx) {
        return true;
    }
    let mut guard = listeners();
    let l = guard.get_or_insert_with(|| Listeners {
        looked: None,
        held_back: Vec::new(),
        ends: Vec::new(),
        index: FxHashMap::default(),
        timer: None,
    });
    let heard = match l.looked {
        // While nobody listened, only the timer looks (clock going back or not).
        Some((_, false)) => false,
        Some((at, true)) if (at..at + HEARD_LOOK_MS).contains(&now) => true,
        _ => l.look(ctx, now),
    };
    if heard {
        return true;
    }
    if l.hold_back(key) {
        Stats::add(&STATS.unlock_messages_held_back, 1);
    }
    if l.timer.is_none() {
        l.timer = Some(timer::start(ctx, QUIET_LOOK_MS, Job::UnlockMessages));
    }
    false
}

/// The `Job::UnlockMessages` timer fired: look again, then send or forget what was held back.
pub fn timer_fired(ctx: Ctx) {
    let mut guard = listeners();
    let Some(l) = guard.as_mut() else { return };
    l.timer = None;
    l.look(ctx, now_ms());
}

impl Listeners {
    /// Keeps `key`'s message for the next look, unless it is kept already. Returns whether it
    /// was added.
    fn hold_back(&mut self, key: &[u8]) -> bool {
        let mut h = FxHasher::default();
        h.write(key);
        let hash = h.finish();
        if let Some(&i) = self.index.get(&hash) {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            if &self.held_back[start..self.ends[i]] == key {
                return false;
            }
        }
        self.held_back.extend_from_slice(key);
        self.ends.push(self.held_back.len());
        // A second name with the same hash is still sent, only not deduplicated.
        self.index.entry(hash).or_insert(self.ends.len() - 1);
        true
    }

    /// Looks for subscribers; sends the held-back messages if it finds any, else forgets
    /// them. Returns what it found.
    fn look(&mut self, ctx: Ctx, now: i64) -> bool {
        let prefix = &crate::config::get().channel_prefix;
        let heard = pubsub::subscribed_under(ctx, prefix);
        self.looked = Some((now, heard));
        if heard && !self.ends.is_empty() {
            let mut start = 0;
            for &end in &self.ends {
                let key = &self.held_back[start..end];
                start = end;
                let channel =
                    RStr::written(ctx, |out| names::write_unlock_channel(prefix, key, out));
                publish_unlock_here(ctx, &channel);
            }
            Stats::add(&STATS.unlock_messages_sent_late, self.ends.len() as u64);
        }
        self.held_back.clear();
        self.ends.clear();
        self.index.clear();
        // A burst of releases left a large buffer: give most of it back.
        if self.held_back.capacity() > KEEP_BYTES {
            self.held_back.shrink_to(KEEP_BYTES);
            self.ends.shrink_to(KEEP_BYTES / 16);
            self.index.shrink_to(KEEP_BYTES / 16);
        }
        heard
    }
}

/// MODULE UNLOAD (Redis refuses it while the timer is armed).
pub fn free_all() {
    *listeners() = None;
}
