//! What the server says about each DLOCK command: `COMMAND DOCS` and `COMMAND INFO` (summary,
//! since, complexity, arguments, arity, key spec) and, on servers that have them, ACL
//! categories. One table, one entry per command: adding a command means adding its entry here.
//!
//! `RedisModule_SetCommandInfo` exists from Redis 7.0; `RedisModule_SetCommandACLCategories`
//! only from Redis 7.2 (and in every Valkey), so categories are set only where the server
//! exports the function, and loading still works on 7.0.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::raw;

/// One argument as `COMMAND DOCS` shows it.
pub struct Arg {
    pub name: &'static CStr,
    pub kind: Kind,
    /// The word before the value (`WAIT` in `WAIT timeout-ms`), or the word itself for a token.
    pub token: Option<&'static CStr>,
    pub optional: bool,
}

pub enum Kind {
    /// The lock key (the command's one key spec).
    Key,
    String,
    Integer,
    /// A word alone, e.g. `FENCE`.
    Token,
    /// Exactly one of these.
    OneOf(&'static [Arg]),
}

const fn arg(name: &'static CStr, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
    }
}

/// A bare word, e.g. `READ`.
const fn word(name: &'static CStr, token: &'static CStr) -> Arg {
    Arg {
        name,
        kind: Kind::Token,
        token: Some(token),
        optional: false,
    }
}

/// `TOKEN value`, e.g. `COUNT n` as one choice of a `OneOf`.
const fn tagged(name: &'static CStr, token: &'static CStr, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: false,
    }
}

/// `[TOKEN value]`, or `[TOKEN]` for a `Kind::Token`.
const fn option(name: &'static CStr, token: &'static CStr, kind: Kind) -> Arg {
    Arg {
        optional: true,
        ..tagged(name, token, kind)
    }
}

/// How a command uses its key: the key-spec flags that ACL key permissions (`%R~`, `%W~`) and
/// clients read. Redis allows at most one of INSERT/UPDATE/DELETE per spec.
pub mod key_use {
    use redis_module::raw;
    const fn flags(bits: &[u32]) -> u64 {
        let mut out = 0u64;
        let mut i = 0;
        while i < bits.len() {
            out |= bits[i] as u64;
            i += 1;
        }
        out
    }
    /// Creates or changes the lock and returns what it now holds (like INCR).
    pub const GRANT: u64 = flags(&[
        raw::REDISMODULE_CMD_KEY_RW,
        raw::REDISMODULE_CMD_KEY_ACCESS,
        raw::REDISMODULE_CMD_KEY_UPDATE,
    ]);
    /// Changes the lease of an existing hold (like PEXPIRE).
    pub const RENEW: u64 = flags(&[raw::REDISMODULE_CMD_KEY_RW, raw::REDISMODULE_CMD_KEY_UPDATE]);
    /// Takes holds away, deleting the key with the last one (like HDEL).
    pub const RELEASE: u64 = flags(&[raw::REDISMODULE_CMD_KEY_RW, raw::REDISMODULE_CMD_KEY_DELETE]);
    /// Reads and returns the lock's data (like HGETALL).
    pub const READ: u64 = flags(&[raw::REDISMODULE_CMD_KEY_RO, raw::REDISMODULE_CMD_KEY_ACCESS]);
}

/// Everything the server is told about one command.
pub struct CommandDoc {
    pub name: &'static CStr,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// The dlock version that added the command.
    pub since: &'static CStr,
    /// Redis's arity, the command name included: `-N` means at least N words.
    pub arity: i32,
    /// `key_use` flags of the key (argument 1).
    pub key_use: u64,
    /// ACL categories, on servers that support them for module commands.
    pub acl: &'static CStr,
    /// Command tips for clients and proxies, space separated.
    pub tips: Option<&'static CStr>,
    pub args: &'static [Arg],
}

const KEY: Arg = arg(c"key", Kind::Key);
const OWNER: Arg = arg(c"owner", Kind::String);
const LEASE: Arg = arg(c"lease-ms", Kind::Integer);
const WAIT: Arg = option(c"timeout-ms", c"WAIT", Kind::Integer);
const FENCE: Arg = option(c"fence", c"FENCE", Kind::Token);
const READ: Arg = word(c"read", c"READ");
const WRITE: Arg = word(c"write", c"WRITE");

/// Every DLOCK command. A command missing from the server (not registered) is skipped.
pub const COMMANDS: &[CommandDoc] = &[
    CommandDoc {
        name: c"dlock.acquire",
        summary: c"Takes an exclusive lock (Redisson RLock layout), re-entrant per owner; with WAIT, queues FIFO until granted or timed out",
        complexity: c"O(1)",
        since: c"0.1.0",
        arity: -4,
        key_use: key_use::GRANT,
        acl: c"write slow blocking",
        tips: None,
        args: &[KEY, OWNER, LEASE, WAIT, FENCE],
    },
    CommandDoc {
        name: c"dlock.rwlock",
        summary: c"Takes the read or the write side of a read-write lock with a lease per holder; with WAIT, queues FIFO until granted or timed out",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.1.0",
        arity: -5,
        key_use: key_use::GRANT,
        acl: c"write slow blocking",
        tips: None,
        args: &[
            KEY,
            OWNER,
            arg(c"mode", Kind::OneOf(&[READ, WRITE])),
            LEASE,
            WAIT,
            FENCE,
        ],
    },
    CommandDoc {
        name: c"dlock.semaphore",
        summary: c"Takes permits of a counting semaphore with a lease per holder; with WAIT, queues FIFO until granted or timed out",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.1.0",
        arity: -5,
        key_use: key_use::GRANT,
        acl: c"write slow blocking",
        tips: None,
        args: &[
            KEY,
            OWNER,
            arg(c"capacity", Kind::Integer),
            LEASE,
            option(c"count", c"COUNT", Kind::Integer),
            WAIT,
        ],
    },
    CommandDoc {
        name: c"dlock.release",
        summary: c"Gives back one hold (or COUNT permits); the last one deletes the key and hands the lock to the next waiter",
        complexity: c"O(N) where N is the number of holders and of waiters granted",
        since: c"0.1.0",
        arity: -3,
        key_use: key_use::RELEASE,
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
        arity: 4,
        key_use: key_use::RENEW,
        acl: c"write fast",
        tips: None,
        args: &[KEY, OWNER, LEASE],
    },
    CommandDoc {
        name: c"dlock.info",
        summary: c"Describes a lock: kind, mode, lease, holders, waiters and fencing token",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.1.0",
        arity: 2,
        key_use: key_use::READ,
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
        key_use: key_use::READ,
        acl: c"read slow",
        tips: Some(c"nondeterministic_output"),
        args: &[KEY, option(c"count", c"COUNT", Kind::Integer)],
    },
];

/// Raw argument arrays, each ending with a zeroed entry as Redis expects. The nested arrays
/// are kept here (their heap buffers do not move) until Redis has copied everything.
#[derive(Default)]
struct RawArgs {
    arrays: Vec<Vec<raw::RedisModuleCommandArg>>,
}

impl RawArgs {
    /// Converts `args` (and their sub-arguments); returns the array's address.
    fn build(&mut self, args: &[Arg]) -> *mut raw::RedisModuleCommandArg {
        let mut out = Vec::with_capacity(args.len() + 1);
        for a in args {
            // SAFETY: an all-zero RedisModuleCommandArg is valid (null pointers, zero ints);
            // Redis reads a zeroed entry as "no more arguments" and null fields as "absent".
            let mut r: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
            r.name = a.name.as_ptr();
            r.key_spec_index = -1;
            r.token = a.token.map_or(std::ptr::null(), CStr::as_ptr);
            if a.optional {
                r.flags = raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
            }
            r.type_ = match &a.kind {
                Kind::Key => {
                    r.key_spec_index = 0;
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY
                }
                Kind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                Kind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                Kind::Token => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
                Kind::OneOf(sub) => {
                    r.subargs = self.build(sub);
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF
                }
            };
            out.push(r);
        }
        // SAFETY: as above; this zeroed entry ends the array.
        out.push(unsafe { std::mem::zeroed() });
        let ptr = out.as_mut_ptr();
        self.arrays.push(out);
        ptr
    }
}

/// Hands every registered command's entry to Redis. Call from `RedisModule_OnLoad`, after the
/// commands are created (Redis accepts command info only while the module loads).
///
/// # Safety
/// `ctx` is the context Redis passed to `RedisModule_OnLoad`.
pub unsafe fn describe(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    // The sizes let Redis walk arrays of our struct layout, whatever its own version is.
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    for doc in COMMANDS {
        // SAFETY: `ctx` is the OnLoad context; the name is a valid C string.
        let command = unsafe { raw::RedisModule_GetCommand.unwrap()(ctx, doc.name.as_ptr()) };
        if command.is_null() {
            continue; // not registered by this build
        }
        let mut raw_args = RawArgs::default();
        let args = raw_args.build(doc.args);
        // SAFETY: all-zero key specs are valid; the second one ends the array.
        let mut specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
        specs[0].flags = doc.key_use;
        specs[0].begin_search_type =
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        specs[0].bs.index.pos = 1;
        specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        specs[0].fk.range.lastkey = 0;
        specs[0].fk.range.keystep = 1;
        specs[0].fk.range.limit = 0;
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: doc.summary.as_ptr(),
            complexity: doc.complexity.as_ptr(),
            since: doc.since.as_ptr(),
            history: std::ptr::null_mut(),
            tips: doc.tips.map_or(std::ptr::null(), CStr::as_ptr),
            arity: doc.arity,
            key_specs: specs.as_mut_ptr(),
            args,
        };
        // SAFETY: `command` came from GetCommand; `info` and everything it points to live
        // until the call returns, and Redis copies what it keeps.
        let ok = unsafe { raw::RedisModule_SetCommandInfo.unwrap()(command, &info) };
        if ok != raw::REDISMODULE_OK as c_int {
            return Err(format!("invalid command info for {:?}", doc.name));
        }
        // SAFETY: the function pointer is only present on servers that export it (7.2+).
        if let Some(set_categories) = unsafe { raw::RedisModule_SetCommandACLCategories } {
            if unsafe { set_categories(command, doc.acl.as_ptr()) } != raw::REDISMODULE_OK as c_int
            {
                return Err(format!("invalid ACL categories for {:?}", doc.name));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis refuses a call with too few words before the module sees it: the arity must be
    /// exactly what the required arguments need, and a minimum when options may follow.
    #[test]
    fn arity_matches_the_arguments() {
        for doc in COMMANDS {
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
        for doc in COMMANDS {
            let acl = doc.acl.to_str().unwrap();
            let reads = doc.key_use & raw::REDISMODULE_CMD_KEY_RO as u64 != 0;
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
