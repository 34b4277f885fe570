//! Errors a command answers with. Every one is a reply; none changes anything.

/// An error reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockError {
    /// Redis's own arity text, naming the command.
    WrongArity,
    /// `ERR syntax error`
    Syntax,
    /// The key holds a value that is not a lock of the kind the command works on.
    WrongType,
    /// Any other `ERR ...` text (the full text, prefix included).
    Msg(String),
}

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl LockError {
    /// The text of the error reply for `command` (lower-case command name).
    pub fn message(&self, command: &str) -> String {
        match self {
            LockError::WrongArity => {
                format!("ERR wrong number of arguments for '{command}' command")
            }
            LockError::Syntax => "ERR syntax error".to_string(),
            LockError::WrongType => WRONGTYPE.to_string(),
            LockError::Msg(m) => m.clone(),
        }
    }
}
