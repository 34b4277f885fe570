//! The module context of the running callback, and the calls made on it.

use std::ffi::CString;
use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::raw;

use super::api;

/// The `RedisModuleCtx` of the callback being run (command, timer, event, blocked-client
/// callback). Valid until that callback returns; never stored.
#[derive(Clone, Copy)]
pub struct Ctx(NonNull<raw::RedisModuleCtx>);

impl Ctx {
    /// # Safety
    /// `ptr` is the context Redis passed to the callback being run (not null).
    pub unsafe fn from_raw(ptr: *mut raw::RedisModuleCtx) -> Ctx {
        Ctx(NonNull::new(ptr).expect("Redis passes a context"))
    }

    pub fn as_ptr(self) -> *mut raw::RedisModuleCtx {
        self.0.as_ptr()
    }

    /// The database the context works on (timer and event contexts start in db 0).
    pub fn selected_db(self) -> i32 {
        // SAFETY: a live context of the running callback.
        unsafe { api!(RedisModule_GetSelectedDb)(self.as_ptr()) }
    }

    pub fn select_db(self, db: i32) {
        self.try_select_db(db);
    }

    /// Selects `db`; `false` when the server has no such database.
    pub fn try_select_db(self, db: i32) -> bool {
        // SAFETY: as above; an out-of-range db is refused by Redis with an error code.
        unsafe { api!(RedisModule_SelectDb)(self.as_ptr(), db) == raw::REDISMODULE_OK as c_int }
    }

    fn flags(self) -> u32 {
        // SAFETY: as above.
        unsafe { api!(RedisModule_GetContextFlags)(self.as_ptr()) as u32 }
    }

    /// Whether the server runs in cluster mode.
    pub fn in_cluster(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }

    /// Whether the running command may block its client: not inside MULTI/EXEC, a script, or
    /// another context that forbids blocking (then WAIT behaves as if absent, like BLPOP).
    pub fn may_block(self) -> bool {
        let forbid = raw::REDISMODULE_CTX_FLAGS_MULTI
            | raw::REDISMODULE_CTX_FLAGS_LUA
            | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING;
        self.flags() & forbid == 0
    }

    /// The id of the client that sent the running command (`CLIENT ID`).
    pub fn client_id(self) -> u64 {
        // SAFETY: a live command context.
        unsafe { api!(RedisModule_GetClientId)(self.as_ptr()) }
    }

    /// Whether the running command comes from a user's own connection: not from a script or
    /// function, not replicated from a master, not replayed from the AOF.
    pub fn sent_by_a_connection(self) -> bool {
        let not = raw::REDISMODULE_CTX_FLAGS_LUA
            | raw::REDISMODULE_CTX_FLAGS_REPLICATED
            | raw::REDISMODULE_CTX_FLAGS_LOADING;
        self.flags() & not == 0
    }

    /// The id of the user's connection that sent the running command (see
    /// [`Ctx::sent_by_a_connection`]): what a BIND binds a hold to. None from a script, a
    /// master or the AOF.
    pub fn connection(self) -> Option<u64> {
        self.sent_by_a_connection().then(|| self.client_id())
    }

    /// Whether this server is a master (loading or not).
    pub fn is_master(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
    }

    /// Whether this server may write on its own (timers, events): a master that is not
    /// loading, neither an RDB/AOF nor (a `repl-diskless-load swapdb` replica) a new data set
    /// in the background. A replica must leave the master's replicated deletes alone.
    pub fn may_write(self) -> bool {
        let flags = self.flags();
        let loading = raw::REDISMODULE_CTX_FLAGS_LOADING | raw::REDISMODULE_CTX_FLAGS_ASYNC_LOADING;
        flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0 && flags & loading == 0
    }

    /// Whether a write command may change keys here as it runs: a master, not loading, not
    /// beyond `maxmemory` (where a script's writes are refused).
    pub fn writes_allowed(self) -> bool {
        let flags = self.flags();
        let refuse = raw::REDISMODULE_CTX_FLAGS_LOADING
            | raw::REDISMODULE_CTX_FLAGS_ASYNC_LOADING
            | raw::REDISMODULE_CTX_FLAGS_OOM
            | raw::REDISMODULE_CTX_FLAGS_READONLY;
        flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0 && flags & refuse == 0
    }

    /// Whether clients are paused (CLIENT PAUSE, a failover): Redis 7.0 asserts that nothing
    /// is propagated then (`propagateNow`), so writes from timers must wait for the end.
    pub fn writes_paused(self) -> bool {
        // SAFETY: no precondition (the main thread, in a callback or command).
        unsafe { api!(RedisModule_AvoidReplicaTraffic)() != 0 }
    }

    /// Logs `line` at warning level through this context (so that it names this load of the
    /// module, also after MODULE UNLOAD + LOAD).
    pub fn log_warning(self, line: &str) {
        let text = cstring(line);
        // SAFETY: a live context; the three strings are NUL-terminated and outlive the call,
        // and the format takes exactly one `%s`.
        unsafe {
            api!(RedisModule_Log)(
                self.as_ptr(),
                c"warning".as_ptr(),
                c"%s".as_ptr(),
                text.as_ptr(),
            )
        };
    }
}

/// Current time in unix ms, the clock Redis expires keys by.
pub fn now_ms() -> i64 {
    // SAFETY: reads the server clock; no arguments.
    unsafe { api!(RedisModule_Milliseconds)() }
}

/// A C string for log lines and error replies (an inner NUL becomes a space).
pub fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).expect("no NUL left")
}
