//! Command metadata: what `COMMAND DOCS` and `COMMAND INFO` say about a command (summary,
//! since, complexity, arguments, arity, key spec) and, on servers that have them, its ACL
//! categories. Each command declares its own entry (`Command::SPEC`, beside the handler).
//!
//! `RedisModule_SetCommandInfo` exists from Redis 7.0; `RedisModule_SetCommandACLCategories`
//! only from Redis 7.2 (and in every Valkey), so categories are set only where the server
//! exports the function, and loading still works on 7.0.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::raw;

use super::api;

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
    /// These in a row, e.g. `[BIND [grace-ms]]` (the token before them).
    Block(&'static [Arg]),
}

pub const fn arg(name: &'static CStr, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
    }
}

/// A bare word, e.g. `READ`.
pub const fn word(name: &'static CStr, token: &'static CStr) -> Arg {
    Arg {
        name,
        kind: Kind::Token,
        token: Some(token),
        optional: false,
    }
}

/// `TOKEN value`, e.g. `COUNT n` as one choice of a `OneOf`.
pub const fn tagged(name: &'static CStr, token: &'static CStr, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: false,
    }
}

/// `[TOKEN value]`, or `[TOKEN]` for a `Kind::Token`.
pub const fn option(name: &'static CStr, token: &'static CStr, kind: Kind) -> Arg {
    Arg {
        optional: true,
        ..tagged(name, token, kind)
    }
}

/// How a command uses its key: the key-spec flags that ACL key permissions (`%R~`, `%W~`) and
/// clients read. Redis allows at most one of INSERT/UPDATE/DELETE per spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyUse {
    /// Creates or changes the lock and returns what it now holds (like INCR): RW access update.
    Grant,
    /// Changes the lease of an existing hold (like PEXPIRE): RW update.
    Renew,
    /// Takes holds away, deleting the key with the last one (like HDEL): RW delete.
    Release,
    /// Reads and returns the lock's data (like HGETALL): RO access.
    Read,
    /// A script's keys, as `EVALSHA` declares them: `numkeys` at argument 2, the keys after
    /// it, each RW access update.
    Script,
}

impl KeyUse {
    fn flags(self) -> u64 {
        let bits = match self {
            KeyUse::Grant | KeyUse::Script => {
                raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_ACCESS
                    | raw::REDISMODULE_CMD_KEY_UPDATE
            }
            KeyUse::Renew => raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE,
            KeyUse::Release => raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
            KeyUse::Read => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        };
        bits as u64
    }
}

/// Everything the server is told about one command, declared beside its handler
/// (`Command::SPEC`).
pub struct Spec {
    /// The lower-case command name.
    pub name: &'static CStr,
    /// `RedisModule_CreateCommand` flags, e.g. `write deny-oom`.
    pub flags: &'static CStr,
    /// Redis's arity, the command name included: `-N` means at least N words.
    pub arity: i32,
    /// The position of the command's one key (first = last, step 1).
    pub key_at: i32,
    /// How it uses that key.
    pub key_use: KeyUse,
    /// ACL categories, on servers that support them for module commands.
    pub acl: &'static CStr,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// The dlock version that added the command.
    pub since: &'static CStr,
    /// Command tips for clients and proxies, space separated.
    pub tips: Option<&'static CStr>,
    pub args: &'static [Arg],
}

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
                Kind::Block(sub) => {
                    r.subargs = self.build(sub);
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK
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

/// Tells Redis what `COMMAND DOCS` / `COMMAND INFO` say about `command` (created from
/// `spec`): docs, arity, a key spec with access flags, and (7.2+) ACL categories.
///
/// # Safety
/// `ctx` is the context Redis passed to `RedisModule_OnLoad` (Redis accepts command info only
/// while the module loads) and `command` was created from `spec` in it.
pub(super) unsafe fn describe(ctx: *mut raw::RedisModuleCtx, spec: &Spec) -> Result<(), String> {
    // The sizes let Redis walk arrays of our struct layout, whatever its own version is.
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: `ctx` is the OnLoad context (caller); the name is NUL-terminated and Redis
    // only reads it during the call; a name it does not know gives null (checked below).
    let command = unsafe { api!(RedisModule_GetCommand)(ctx, spec.name.as_ptr()) };
    if command.is_null() {
        return Err(format!("command {:?} was not created", spec.name));
    }
    let mut raw_args = RawArgs::default();
    let args = raw_args.build(spec.args);
    // SAFETY: all-zero key specs are valid; the second one ends the array.
    let mut specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    specs[0].flags = spec.key_use.flags();
    specs[0].begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    if spec.key_use == KeyUse::Script {
        specs[0].bs.index.pos = 2;
        specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
        specs[0].fk.keynum.keynumidx = 0;
        specs[0].fk.keynum.firstkey = 1;
        specs[0].fk.keynum.keystep = 1;
    } else {
        specs[0].bs.index.pos = spec.key_at;
        specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        specs[0].fk.range.lastkey = 0;
        specs[0].fk.range.keystep = 1;
        specs[0].fk.range.limit = 0;
    }
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: spec.summary.as_ptr(),
        complexity: spec.complexity.as_ptr(),
        since: spec.since.as_ptr(),
        history: std::ptr::null_mut(),
        tips: spec.tips.map_or(std::ptr::null(), CStr::as_ptr),
        arity: spec.arity,
        key_specs: specs.as_mut_ptr(),
        args,
    };
    // SAFETY: `command` came from GetCommand; `info` and everything it points to live
    // until the call returns, and Redis copies what it keeps.
    let ok = unsafe { api!(RedisModule_SetCommandInfo)(command, &info) };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err(format!("invalid command info for {:?}", spec.name));
    }
    // SAFETY: reads the API table, which `RedisModule_Init` filled before any command was
    // created and nothing writes afterwards (the pointer is set on 7.2+ only).
    if let Some(set_categories) = unsafe { raw::RedisModule_SetCommandACLCategories } {
        // SAFETY: `command` came from GetCommand; the categories are NUL-terminated and
        // Redis parses them during the call.
        let status = unsafe { set_categories(command, spec.acl.as_ptr()) };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("invalid ACL categories for {:?}", spec.name));
        }
    }
    Ok(())
}
