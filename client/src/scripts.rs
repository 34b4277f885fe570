//! The Lua scripts of the script backend: a faithful copy of Redisson's `RLock` protocol
//! (`RedissonLock.tryLockInnerAsync`, `unlockInnerAsync`, `renewExpirationAsync`,
//! `forceUnlockAsync`), exposed so a benchmark can run the very same scripts.
//!
//! Data layout: the lock `K` is a hash `owner -> hold count` with a `PEXPIRE` lease; the
//! unlock channel is [`channel_name`]`(prefix, K)`; the unlock message is `0`
//! ([`UNLOCK_MESSAGE`]). The dlock module uses the same layout, so both kinds of clients
//! exclude each other on one key.
//!
//! ```
//! use dlock_client::scripts;
//! let lock = redis::Script::new(scripts::LOCK);
//! // KEYS[1] = lock key, ARGV[1] = lease in ms, ARGV[2] = owner
//! let _invocation = lock.key("orders").arg(30_000).arg("9f2c...:1");
//! assert_eq!(scripts::channel_name("redisson_lock__channel", "orders"),
//!            "redisson_lock__channel:{orders}");
//! ```

/// Acquire. `KEYS[1]` lock key, `ARGV[1]` lease (ms), `ARGV[2]` owner.
/// Returns nil when granted (fresh or reentrant; the lease is reset), else the lock's PTTL.
///
/// ```
/// assert!(dlock_client::scripts::LOCK.contains("pttl"));
/// ```
pub const LOCK: &str = "if (redis.call('exists', KEYS[1]) == 0) then \
redis.call('hincrby', KEYS[1], ARGV[2], 1); \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return nil; \
end; \
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
redis.call('hincrby', KEYS[1], ARGV[2], 1); \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Release one hold. `KEYS[1]` lock key, `KEYS[2]` unlock channel, `ARGV[1]` unlock message
/// (`0`), `ARGV[2]` lease (ms) to reset when holds remain, `ARGV[3]` owner.
/// Returns nil (not held: nothing changes), 0 (a hold remains; lease reset) or 1 (freed:
/// key deleted and the message published).
///
/// ```
/// assert!(dlock_client::scripts::UNLOCK.contains("publish"));
/// ```
pub const UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
return nil; \
end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then \
redis.call('pexpire', KEYS[1], ARGV[2]); \
return 0; \
else \
redis.call('del', KEYS[1]); \
redis.call('publish', KEYS[2], ARGV[1]); \
return 1; \
end; \
return nil;";

/// Watchdog renewal. `KEYS[1]` lock key, `ARGV[1]` lease (ms), `ARGV[2]` owner.
/// Returns 1 (held: lease reset) or 0 (not held: nothing changes).
///
/// ```
/// assert!(dlock_client::scripts::RENEW.contains("hexists"));
/// ```
pub const RENEW: &str = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return 1; \
end; \
return 0;";

/// Force unlock (Redisson `forceUnlockAsync`). `KEYS[1]` lock key, `KEYS[2]` unlock channel,
/// `ARGV[1]` unlock message. Returns 1 when a key was deleted (and the message published),
/// else 0.
///
/// ```
/// assert!(dlock_client::scripts::FORCE_UNLOCK.contains("del"));
/// ```
pub const FORCE_UNLOCK: &str = "if (redis.call('del', KEYS[1]) == 1) then \
redis.call('publish', KEYS[2], ARGV[1]); \
return 1; \
else \
return 0; \
end;";

/// The message published on the unlock channel when a lock is freed.
///
/// ```
/// assert_eq!(dlock_client::scripts::UNLOCK_MESSAGE, "0");
/// ```
pub const UNLOCK_MESSAGE: &str = "0";

/// Redisson's default unlock channel prefix.
///
/// ```
/// assert_eq!(dlock_client::scripts::DEFAULT_CHANNEL_PREFIX, "redisson_lock__channel");
/// ```
pub const DEFAULT_CHANNEL_PREFIX: &str = "redisson_lock__channel";

/// The unlock channel of lock `key`: `<prefix>:{key}`, or `<prefix>:key` when the key
/// contains `{` (it already has a hash tag).
///
/// ```
/// use dlock_client::scripts::channel_name;
/// assert_eq!(channel_name("redisson_lock__channel", "a"), "redisson_lock__channel:{a}");
/// assert_eq!(channel_name("redisson_lock__channel", "{a}b"), "redisson_lock__channel:{a}b");
/// ```
pub fn channel_name(prefix: &str, key: &str) -> String {
    if key.contains('{') {
        format!("{prefix}:{key}")
    } else {
        format!("{prefix}:{{{key}}}")
    }
}
