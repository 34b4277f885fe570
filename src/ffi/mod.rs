//! The only place that calls `RedisModule_*`: small safe types over the raw module API, each
//! `unsafe` block with the reason it is sound. Nothing here knows about locks; the engine,
//! the commands and the events above use these types and never `raw` directly.
//!
//! Redis calls a module from its main thread only (dlock uses no thread-safe contexts), so
//! every handle here is used on that thread, during the callback that produced it.

pub mod blocked;
pub mod call;
pub mod cluster;
pub mod command;
pub mod command_info;
pub mod context;
pub mod events;
pub mod filter;
pub mod info;
pub mod key;
pub mod module;
pub mod notify;
pub mod pubsub;
pub mod replicate;
pub mod reply;
pub mod server_info;
pub mod string;
pub mod targets;
pub mod timer;

pub use context::Ctx;
pub use reply::Reply;
pub use string::RStr;

/// The API function `name`, as Redis filled it in at `RedisModule_Init` (every function used
/// here exists on Redis 7.0).
macro_rules! api {
    ($name:ident) => {
        redis_module::raw::$name.expect(concat!(stringify!($name), " is missing"))
    };
}
pub(crate) use api;
