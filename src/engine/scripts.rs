//! Which calls are Redisson's lock scripts, and whether they are served natively: the
//! command filter that renames a recognised `EVAL`/`EVALSHA` to `DLOCK.REDISSON` (same
//! argv otherwise, so key positions, cluster slot checks and ACL key checks are EVALSHA's),
//! the script look-up (`EVALSHA`: the digest; `EVAL`: the text's length, then its SHA1 once,
//! then a comparison with the bytes so verified), and the ACL guard.
//!
//! **ACL guard.** The filter runs before the ACL check, which then checks `DLOCK.REDISSON`
//! instead of `EVALSHA`; on Redis 7.0 a module command has no ACL category, and the filter
//! cannot tell who sent the command (its client id needs 7.2). So scripts are served natively
//! only while every ACL user that may run `EVAL` or `EVALSHA` may also run `DLOCK.REDISSON`
//! (asked with `ACL DRYRUN` for each user, from a timer: at load, and after each `ACL
//! SETUSER`/`DELUSER`/`LOAD` the filter sees, or an `EXEC` once such a command was seen,
//! since it may have been queued in MULTI). Until the answer comes, and whenever some user
//! could script but not run `DLOCK.REDISSON`, every script runs as Lua: no user ever gets a
//! `NOPERM` that the Lua would not give.
//!
//! The cost for an unrelated command: one look at the length and first letter of its name.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use dlock_core::redisson::{self, SCRIPTS};

use crate::ffi::filter::TAGS;

use crate::ffi::call::CallReply;
use crate::ffi::filter::{CommandFilterHandler, FilterArgs};
use crate::ffi::timer::{self, TimerJob};
use crate::ffi::{Ctx, RStr};
use crate::stats::{Stats, STATS};

/// The command recognised scripts are renamed to.
pub const COMMAND: &[u8] = b"dlock.redisson";

/// Whether the ACL guard allows native serving (see the file doc); false until checked.
static SERVING: AtomicBool = AtomicBool::new(false);
/// An ACL change was seen: every `EXEC` re-checks (it may have been queued in MULTI).
static ACL_CHANGED: AtomicBool = AtomicBool::new(false);
/// A check is armed (one timer at a time).
static CHECK_ARMED: AtomicBool = AtomicBool::new(false);

const _: () = assert!(SCRIPTS.len() <= TAGS, "a filter tag per script");

/// The texts of `SCRIPTS` that an `EVAL` has shown and whose SHA1 was verified, by index:
/// later `EVAL`s of them compare bytes instead of hashing.
static VERIFIED: Mutex<Vec<Option<Box<[u8]>>>> = Mutex::new(Vec::new());

/// The script an `EVAL` text is (its index in `SCRIPTS`).
pub fn by_text(text: &[u8]) -> Option<usize> {
    if !redisson::text_len_known(text.len()) {
        return None;
    }
    let mut verified = VERIFIED.lock().unwrap_or_else(|e| e.into_inner());
    if verified.len() < SCRIPTS.len() {
        verified.resize(SCRIPTS.len(), None);
    }
    let same_len = || (0..SCRIPTS.len()).filter(|&i| SCRIPTS[i].len == text.len());
    if let Some(i) = same_len().find(|&i| verified[i].as_deref() == Some(text)) {
        return Some(i);
    }
    let digest = sha1_smol::Sha1::from(text).digest().bytes();
    let i = same_len().find(|&i| SCRIPTS[i].sha1 == digest)?;
    verified[i] = Some(text.into());
    Some(i)
}

/// The script `EVAL`'s or `EVALSHA`'s argument names (`sha`: it is a digest).
pub fn identify(script: &[u8], sha: bool) -> Option<usize> {
    if sha {
        redisson::by_sha1_hex(script)
    } else {
        by_text(script)
    }
}

/// MODULE UNLOAD: forgets the verified texts and the guard's state.
pub fn free_all() {
    *VERIFIED.lock().unwrap_or_else(|e| e.into_inner()) = Vec::new();
    SERVING.store(false, Ordering::Relaxed);
    ACL_CHANGED.store(false, Ordering::Relaxed);
    CHECK_ARMED.store(false, Ordering::Relaxed);
}

/// The command filter (registered only with `redisson native`).
pub struct Recognise;

impl CommandFilterHandler for Recognise {
    /// An unrelated command costs one read of its name and a test of its length and first
    /// letter: everything else is out of line, so that this stays a leaf without a frame.
    #[inline]
    fn on_command(args: &mut FilterArgs) {
        let name = args.get(0);
        let Some(&first) = name.first() else {
            return;
        };
        match (name.len(), first | 0x20) {
            (4 | 7, b'e') => e_command(args),
            (3, b'a') => acl_command(args),
            _ => {}
        }
    }
}

/// `EVAL`, `EVALSHA`, `EXEC` (or another 4- or 7-letter name in `e`).
#[inline(never)]
fn e_command(args: &mut FilterArgs) {
    let name = args.get(0);
    if letters_are(name, b"evalsha") {
        eval(args, true);
    } else if letters_are(name, b"eval") {
        eval(args, false);
    } else if ACL_CHANGED.load(Ordering::Relaxed) && letters_are(name, b"exec") {
        acl_changed(args);
    }
}

/// Whether `name` is `word` (4 to 8 lower-case letters) in any case. Setting bit 5 turns
/// exactly the letters `A`-`Z`/`a`-`z` into `a`-`z`, so for a word of letters this is
/// `eq_ignore_ascii_case`, in two 4-byte comparisons (overlapping below 8 letters).
#[inline]
fn letters_are(name: &[u8], word: &[u8]) -> bool {
    let n = word.len();
    debug_assert!((4..=8).contains(&n) && word.iter().all(u8::is_ascii_lowercase));
    let four = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    name.len() == n
        && four(name, 0) | 0x2020_2020 == four(word, 0)
        && four(name, n - 4) | 0x2020_2020 == four(word, n - 4)
}

/// `ACL SETUSER/DELUSER/LOAD` (or another 3-letter name in `a`).
#[cold]
#[inline(never)]
fn acl_command(args: &mut FilterArgs) {
    if !args.get(0).eq_ignore_ascii_case(b"acl") {
        return;
    }
    let sub = args.get(1);
    if [&b"setuser"[..], b"deluser", b"load"]
        .iter()
        .any(|s| sub.eq_ignore_ascii_case(s))
    {
        ACL_CHANGED.store(true, Ordering::Relaxed);
        acl_changed(args);
    }
}

/// `EVAL`/`EVALSHA` (`sha`): renamed when the script is known, tagged with its index in
/// `SCRIPTS` (the command reads it back instead of looking the script up again).
fn eval(args: &mut FilterArgs, sha: bool) {
    // Redis's arity check answers a call without numkeys, under the name sent.
    let Some(i) = identify(args.get(1), sha).filter(|_| args.len() >= 3) else {
        return;
    };
    // The call's shape is checked by the command (which runs the Lua when it is not
    // Redisson's): here only what must be decided before Redis checks the ACL.
    if SERVING.load(Ordering::Relaxed) {
        args.rename(i);
    } else {
        Stats::add(&STATS.redisson_lua, 1);
    }
}

/// Serving stops at once (scripts run as Lua) until the check says otherwise.
fn acl_changed(args: &FilterArgs) {
    SERVING.store(false, Ordering::Relaxed);
    if let Some(ctx) = args.module_ctx() {
        arm_check(ctx);
    }
}

/// Arms the ACL check on the next event-loop turn (after the command that changed the ACL).
pub fn arm_check(ctx: Ctx) {
    if !CHECK_ARMED.swap(true, Ordering::Relaxed) {
        timer::start(ctx, 0, AclCheck);
    }
}

/// The timer job of the ACL guard.
pub struct AclCheck;

impl TimerJob for AclCheck {
    fn fire(self, ctx: Ctx) {
        CHECK_ARMED.store(false, Ordering::Relaxed);
        SERVING.store(every_scripter_may_use_native(ctx), Ordering::Relaxed);
    }
}

/// Whether every ACL user that may run `EVAL` or `EVALSHA` may also run `DLOCK.REDISSON`.
fn every_scripter_may_use_native(ctx: Ctx) -> bool {
    let Some(users) = CallReply::run(ctx, c"ACL", &[c"USERS"]) else {
        return false;
    };
    let may = |user: &RStr, command: &[u8]| {
        let words = [
            RStr::new(ctx, b"DRYRUN"),
            RStr::new(ctx, user.bytes()),
            RStr::new(ctx, command),
            RStr::new(ctx, b"x"),
            RStr::new(ctx, b"0"),
        ];
        let refs: Vec<&RStr> = words.iter().collect();
        CallReply::run_strs(ctx, c"ACL", &refs, false)
            .and_then(|r| r.text())
            .is_some_and(|t| t == "OK")
    };
    users.strings().iter().all(|name| {
        let user = RStr::new(ctx, name);
        may(&user, COMMAND) || !(may(&user, b"evalsha") || may(&user, b"eval"))
    })
}

#[cfg(test)]
mod tests {
    use super::letters_are;

    #[test]
    fn letters_are_is_eq_ignore_ascii_case_for_words_of_letters() {
        for word in [&b"eval"[..], b"exec", b"evalsha"] {
            // Names around the three words: cases, lengths, and bytes one bit-5 flip away.
            for name in [
                "eval",
                "EVAL",
                "eVaL",
                "exec",
                "EXEC",
                "evalsha",
                "EVALSHA",
                "EvalSha",
                "evals",
                "eva",
                "",
                "eval\x00",
                "%VAL",
                "\x05val",
                "evalsh\x01",
                "evalsh@",
                "EVAL_RO",
            ]
            .map(str::as_bytes)
            {
                assert_eq!(
                    letters_are(name, word),
                    name.eq_ignore_ascii_case(word),
                    "{name:?} vs {word:?}"
                );
            }
        }
        // Every byte against each letter's place.
        for b in 0..=255u8 {
            let mut name = *b"evalsha";
            name[3] = b;
            assert_eq!(
                letters_are(&name, b"evalsha"),
                name.eq_ignore_ascii_case(b"evalsha")
            );
        }
    }
}
