//! The server's own `INFO` sections as the module reads them (`RedisModule_GetServerInfo`):
//! one section fetched, fields read by name, freed when dropped. (The module's own section is
//! `info`.)

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::raw;

use super::{api, Ctx};

/// One section of the server's INFO, as fetched.
pub struct ServerInfo {
    ctx: Ctx,
    data: *mut raw::RedisModuleServerInfoData,
}

impl ServerInfo {
    /// Fetches `section` (Redis renders the whole section: tens of thousands of instructions,
    /// so callers ask seldom). `None` when the server returns nothing.
    pub fn section(ctx: Ctx, section: &CStr) -> Option<ServerInfo> {
        // SAFETY: a live context; the section name is NUL-terminated.
        let data = unsafe { api!(RedisModule_GetServerInfo)(ctx.as_ptr(), section.as_ptr()) };
        (!data.is_null()).then_some(ServerInfo { ctx, data })
    }

    /// An integer field, `None` when absent or not an integer.
    pub fn signed(&self, name: &CStr) -> Option<i64> {
        let mut err: c_int = 0;
        // SAFETY: `data` is live until dropped; the field name is NUL-terminated.
        let v = unsafe {
            api!(RedisModule_ServerInfoGetFieldSigned)(self.data, name.as_ptr(), &mut err)
        };
        (err == 0).then_some(v)
    }

    /// A field as text, `None` when absent.
    pub fn text(&self, name: &CStr) -> Option<String> {
        // SAFETY: `data` is live until dropped; the field name is NUL-terminated; the
        // returned string (or null) is valid while `data` is.
        let ptr = unsafe { api!(RedisModule_ServerInfoGetFieldC)(self.data, name.as_ptr()) };
        (!ptr.is_null()).then(|| {
            // SAFETY: a non-null field value is a NUL-terminated string, valid while `data` is.
            unsafe { CStr::from_ptr(ptr) }
                .to_string_lossy()
                .into_owned()
        })
    }
}

impl Drop for ServerInfo {
    fn drop(&mut self) {
        // SAFETY: `data` came from GetServerInfo on this context (still live: a `ServerInfo`
        // never outlives the callback that fetched it) and is freed once.
        unsafe { api!(RedisModule_FreeServerInfo)(self.ctx.as_ptr(), self.data) };
    }
}
