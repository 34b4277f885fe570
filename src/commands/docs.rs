//! The arguments several commands share, as `COMMAND DOCS` shows them. Each command's own
//! entry (`Command::SPEC`: name, flags, arity, ACL categories, docs) is beside its handler.

use crate::ffi::command_info::{arg, option, word, Arg, Kind};

pub const KEY: Arg = arg(c"key", Kind::Key);
pub const OWNER: Arg = arg(c"owner", Kind::String);
pub const LEASE: Arg = arg(c"lease-ms", Kind::Integer);
pub const WAIT: Arg = option(c"timeout-ms", c"WAIT", Kind::Integer);
pub const FENCE: Arg = option(c"fence", c"FENCE", Kind::Token);
/// `[BIND [grace-ms]]`: a bare BIND takes the default grace (`args::bind_option`).
pub const BIND: Arg = option(c"bind", c"BIND", Kind::Block(&[GRACE]));
const GRACE: Arg = Arg {
    optional: true,
    ..arg(c"grace-ms", Kind::Integer)
};
pub const LOCKDELAY: Arg = option(c"lock-delay-ms", c"LOCKDELAY", Kind::Integer);
pub const READ: Arg = word(c"read", c"READ");
pub const WRITE: Arg = word(c"write", c"WRITE");
