//! What `COMMAND DOCS` and `COMMAND INFO` say about each DLOCK command, and its ACL
//! categories (Redis 7.2+, Valkey): one entry per command. Adding a command means adding its
//! entry here (`tests/command_metadata.rs` fails for a registered command without one).

use crate::ffi::command_info::{arg, option, tagged, word, Arg, CommandDoc, KeyUse, Kind};

const KEY: Arg = arg(c"key", Kind::Key);
const OWNER: Arg = arg(c"owner", Kind::String);
const LEASE: Arg = arg(c"lease-ms", Kind::Integer);
const WAIT: Arg = option(c"timeout-ms", c"WAIT", Kind::Integer);
const FENCE: Arg = option(c"fence", c"FENCE", Kind::Token);
const BIND: Arg = option(c"grace-ms", c"BIND", Kind::Integer);
const LOCKDELAY: Arg = option(c"lock-delay-ms", c"LOCKDELAY", Kind::Integer);
const READ: Arg = word(c"read", c"READ");
const WRITE: Arg = word(c"write", c"WRITE");

/// Every DLOCK command. A command missing from the server (not registered) is skipped.
pub const DOCS: &[CommandDoc] = &[
    CommandDoc {
        name: c"dlock.acquire",
        summary: c"Takes an exclusive lock (Redisson RLock layout), re-entrant per owner; with WAIT, queues FIFO until granted or timed out",
        complexity: c"O(1)",
        since: c"0.1.0",
        arity: -4,
        key_use: KeyUse::Grant,
        acl: c"write slow blocking",
        tips: None,
        args: &[KEY, OWNER, LEASE, WAIT, FENCE, BIND, LOCKDELAY],
    },
    CommandDoc {
        name: c"dlock.rwlock",
        summary: c"Takes the read or the write side of a read-write lock with a lease per holder; with WAIT, queues FIFO until granted or timed out",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.1.0",
        arity: -5,
        key_use: KeyUse::Grant,
        acl: c"write slow blocking",
        tips: None,
        args: &[
            KEY,
            OWNER,
            arg(c"mode", Kind::OneOf(&[READ, WRITE])),
            LEASE,
            WAIT,
            FENCE,
            BIND,
            LOCKDELAY,
        ],
    },
    CommandDoc {
        name: c"dlock.semaphore",
        summary: c"Takes permits of a counting semaphore with a lease per holder; with WAIT, queues FIFO until granted or timed out",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.1.0",
        arity: -5,
        key_use: KeyUse::Grant,
        acl: c"write slow blocking",
        tips: None,
        args: &[
            KEY,
            OWNER,
            arg(c"capacity", Kind::Integer),
            LEASE,
            option(c"count", c"COUNT", Kind::Integer),
            WAIT,
            BIND,
        ],
    },
    CommandDoc {
        name: c"dlock.release",
        summary: c"Gives back one hold (or COUNT permits); the last one deletes the key and hands the lock to the next waiter",
        complexity: c"O(N) where N is the number of holders and of waiters granted",
        since: c"0.1.0",
        arity: -3,
        key_use: KeyUse::Release,
        acl: c"write fast",
        tips: None,
        args: &[
            KEY,
            OWNER,
            Arg {
                name: c"which",
                kind: Kind::OneOf(&[READ, WRITE, tagged(c"count", c"COUNT", Kind::Integer)]),
                token: None,
                optional: true,
            },
        ],
    },
    CommandDoc {
        name: c"dlock.renew",
        summary: c"Resets the lease of an owner's hold (what a watchdog sends)",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.1.0",
        arity: -4,
        key_use: KeyUse::Renew,
        acl: c"write fast",
        tips: None,
        args: &[KEY, OWNER, LEASE, BIND],
    },
    CommandDoc {
        name: c"dlock.info",
        summary: c"Describes a lock: kind, mode, lease, holders, waiters and fencing token",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.1.0",
        arity: 2,
        key_use: KeyUse::Read,
        acl: c"read fast",
        tips: Some(c"nondeterministic_output"),
        args: &[KEY],
    },
    CommandDoc {
        name: c"dlock.waiters",
        summary: c"Lists the clients waiting on a lock, in FIFO order",
        complexity: c"O(N) where N is the number of waiters listed",
        since: c"0.1.0",
        arity: -2,
        key_use: KeyUse::Read,
        acl: c"read slow",
        tips: Some(c"nondeterministic_output"),
        args: &[KEY, option(c"count", c"COUNT", Kind::Integer)],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis refuses a call with too few words before the module sees it: the arity must be
    /// exactly what the required arguments need, and a minimum when options may follow.
    #[test]
    fn arity_matches_the_arguments() {
        for doc in DOCS {
            let required = doc.args.iter().filter(|a| !a.optional).count() as i32 + 1;
            let has_options = doc.args.iter().any(|a| a.optional);
            let expected = if has_options { -required } else { required };
            assert_eq!(doc.arity, expected, "{:?}", doc.name);
            assert!(
                matches!(doc.args.first().map(|a| &a.kind), Some(Kind::Key)),
                "{:?}: the key comes first",
                doc.name
            );
        }
    }

    #[test]
    fn writers_write_and_readers_read() {
        for doc in DOCS {
            let acl = doc.acl.to_str().unwrap();
            let reads = doc.key_use == KeyUse::Read;
            assert_eq!(acl.starts_with("read "), reads, "{:?}", doc.name);
            assert_eq!(acl.starts_with("write "), !reads, "{:?}", doc.name);
            assert!(
                acl.contains("fast") != acl.contains("slow"),
                "{:?}: fast or slow",
                doc.name
            );
        }
    }
}
