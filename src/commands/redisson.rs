//! DLOCK.REDISSON: Redisson's own lock scripts, served natively. Clients never send it: the
//! command filter (`engine::scripts`) renames a recognised `EVAL`/`EVALSHA` to it, keeping
//! every other word, so its declaration mirrors `EVALSHA`'s (arity, numkeys-based key spec,
//! `scripting` category where the server gives module commands categories).

use super::docs::KEY;
use crate::engine::redisson;
use crate::ffi::command::{Args, Command};
use crate::ffi::command_info::{arg, Arg, KeyUse, Kind, Spec};
use crate::ffi::{Ctx, Reply};

/// `DLOCK.REDISSON script numkeys [key ...] [arg ...]`
pub struct Redisson;

impl Command for Redisson {
    const SPEC: Spec = Spec {
        name: c"dlock.redisson",
        // EVALSHA's: may propagate, runs on a stale replica (where it answers as the Lua),
        // not callable from scripts, no key needed.
        // `getkeys-api`: Redis 7.0 routes a cluster call by legacy key positions or by the
        // module's answer, never by a numkeys key spec.
        flags: c"may-replicate allow-stale deny-script no-mandatory-keys getkeys-api",
        arity: -3,
        key_at: 3,
        key_use: KeyUse::Script,
        acl: c"slow scripting",
        summary: c"Runs one of Redisson's lock scripts natively (sent as EVAL or EVALSHA; the module renames it)",
        complexity: c"O(N) where N is the number of keys",
        since: c"0.2.0",
        tips: None,
        args: &[
            arg(c"script", Kind::String),
            arg(c"numkeys", Kind::Integer),
            Arg {
                optional: true,
                ..KEY
            },
            Arg {
                optional: true,
                ..arg(c"arg", Kind::String)
            },
        ],
    };

    const KEYS_BY_API: bool = true;

    fn run(ctx: Ctx, argv: &[&[u8]], strs: Args) -> Reply {
        redisson::run(ctx, argv, strs)
    }

    /// EVALSHA's: `numkeys` keys after it (none when it is not a count that fits).
    fn key_positions(argv: &[&[u8]]) -> Vec<i32> {
        let numkeys = argv
            .get(2)
            .and_then(|n| dlock_core::redisson::strict_integer(n))
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| 3 + n <= argv.len())
            .unwrap_or(0);
        (3..3 + numkeys as i32).collect()
    }
}
