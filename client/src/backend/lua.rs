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
pub const DEFAULT_CHANNEL_PREFIX: &str = dlock_core::names::DEFAULT_CHANNEL_PREFIX;

/// The unlock channel of lock `key`: `<prefix>:{key}`, or `<prefix>:key` when the key
/// contains `{` (it already has a hash tag).
///
/// ```
/// use dlock_client::scripts::channel_name;
/// assert_eq!(channel_name("redisson_lock__channel", "a"), "redisson_lock__channel:{a}");
/// assert_eq!(channel_name("redisson_lock__channel", "{a}b"), "redisson_lock__channel:{a}b");
/// ```
pub fn channel_name(prefix: &str, key: &str) -> String {
    // The rule lives in dlock-core (the module publishes on the same name); prefix and key
    // are UTF-8, so the name is too.
    String::from_utf8(dlock_core::names::unlock_channel(prefix, key.as_bytes()))
        .expect("built from UTF-8 parts")
}

// ---------------------------------------------------------------------------------------
// Read-write lock (script backend). Same hash layout as the module's DLOCK.RWLOCK:
// `mode` (read|write), `read:<owner>` / `write:<owner>` hold counts, `lease:<owner>` the
// owner's absolute deadline (unix ms); the key's PEXPIREAT is the latest deadline.

/// Shared Lua prelude of the read-write scripts: `now_ms()`, `settle(key)` (recompute
/// `mode` and the key's PEXPIREAT from the holders, delete the key when none is left) and
/// `prune(key, now)` (drop holders whose own lease has passed; `false` when the key is
/// not a read-write lock); then it opens `KEYS[1]` for every body: `key`, `now` and `f` (the
/// pruned fields), or the `WRONGTYPE` error when the key is not a read-write lock.
///
/// ```
/// assert!(dlock_client::scripts::RW_PRELUDE.contains("local function prune"));
/// ```
pub const RW_PRELUDE: &str = r#"
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function settle(key)
  local h = redis.call('hgetall', key)
  local w, r, maxd = false, false, 0
  for i = 1, #h, 2 do
    local f = h[i]
    if string.sub(f, 1, 6) == 'lease:' then
      local d = tonumber(h[i + 1])
      if d > maxd then maxd = d end
    elseif string.sub(f, 1, 6) == 'write:' then w = true
    elseif string.sub(f, 1, 5) == 'read:' then r = true end
  end
  if not w and not r then
    redis.call('del', key)
    return 'free'
  end
  local m = 'read'
  if w then m = 'write' end
  redis.call('hset', key, 'mode', m)
  redis.call('pexpireat', key, maxd)
  return m
end
local function prune(key, now)
  local h = redis.call('hgetall', key)
  local f = {}
  if #h == 0 then return f end
  for i = 1, #h, 2 do f[h[i]] = h[i + 1] end
  if f['mode'] ~= 'read' and f['mode'] ~= 'write' then return false end
  local changed = false
  for k, v in pairs(f) do
    if string.sub(k, 1, 6) == 'lease:' and tonumber(v) <= now then
      local o = string.sub(k, 7)
      redis.call('hdel', key, k, 'read:' .. o, 'write:' .. o)
      f[k] = nil
      f['read:' .. o] = nil
      f['write:' .. o] = nil
      changed = true
    end
  end
  if changed then
    if settle(key) == 'free' then return {} end
    local g = {}
    local h2 = redis.call('hgetall', key)
    for i = 1, #h2, 2 do g[h2[i]] = h2[i + 1] end
    return g
  end
  return f
end
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local key, now = KEYS[1], now_ms()
local f = prune(key, now)
if f == false then return redis.error_reply(WRONGTYPE) end
"#;

/// Read-write acquire. `KEYS[1]` lock key, `ARGV[1]` owner, `ARGV[2]` `read` or `write`,
/// `ARGV[3]` lease (ms). Returns `{1, hold count of that mode}` when granted, `{0, ms}`
/// when refused (`ms`: time until the earliest other holder's lease ends, a hint for how
/// long to wait), or an error (`WRONGTYPE`, or `ERR cannot upgrade ...` for a reader asking
/// for WRITE). Use [`rw_lock_script`] for the full text (prelude included).
///
/// ```
/// assert!(dlock_client::scripts::RW_LOCK_BODY.contains("cannot upgrade"));
/// ```
pub const RW_LOCK_BODY: &str = r#"
local owner, want, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local mode = f['mode']
local mine_w = f['write:' .. owner] ~= nil
local mine_r = f['read:' .. owner] ~= nil
local ok = false
if want == 'read' then
  ok = (mode == nil) or (mode == 'read') or mine_w
elseif want == 'write' then
  if mine_w then ok = true
  elseif mine_r then return redis.error_reply('ERR cannot upgrade a READ hold to WRITE (it would deadlock)')
  else ok = (mode == nil) end
else
  return redis.error_reply('ERR mode must be READ or WRITE')
end
if not ok then
  local mind = nil
  for k, v in pairs(f) do
    if string.sub(k, 1, 6) == 'lease:' and string.sub(k, 7) ~= owner then
      local d = tonumber(v)
      if mind == nil or d < mind then mind = d end
    end
  end
  local wait = 100
  if mind ~= nil then wait = math.max(1, mind - now) end
  return {0, wait}
end
local c = redis.call('hincrby', key, want .. ':' .. owner, 1)
redis.call('hset', key, 'lease:' .. owner, now + lease)
settle(key)
return {1, c}
"#;

/// Read-write release. `KEYS[1]` lock key, `KEYS[2]` unlock channel, `ARGV[1]` owner,
/// `ARGV[2]` `read` or `write`, `ARGV[3]` unlock message. Returns nil (that mode is not
/// held: nothing changes), 0 (a hold of that mode remains) or 1 (the mode's last hold is
/// gone; the message is published when the lock becomes free or turns from write to read).
///
/// ```
/// assert!(dlock_client::scripts::RW_UNLOCK_BODY.contains("publish"));
/// ```
pub const RW_UNLOCK_BODY: &str = r#"
local owner, want = ARGV[1], ARGV[2]
local field = want .. ':' .. owner
if f[field] == nil then return nil end
local c = redis.call('hincrby', key, field, -1)
if c > 0 then return 0 end
redis.call('hdel', key, field)
local other = 'read'
if want == 'read' then other = 'write' end
if f[other .. ':' .. owner] == nil then redis.call('hdel', key, 'lease:' .. owner) end
local before = f['mode']
local m = settle(key)
if m == 'free' or (before == 'write' and m == 'read') then
  redis.call('publish', KEYS[2], ARGV[3])
end
return 1
"#;

/// Read-write renewal. `KEYS[1]` lock key, `ARGV[1]` lease (ms), `ARGV[2]` owner (the
/// argument order of [`RENEW`]). Returns 1 (the owner holds a mode: its own lease is reset)
/// or 0.
///
/// ```
/// assert!(dlock_client::scripts::RW_RENEW_BODY.contains("lease:"));
/// ```
pub const RW_RENEW_BODY: &str = r#"
local lease, owner = tonumber(ARGV[1]), ARGV[2]
if f['read:' .. owner] == nil and f['write:' .. owner] == nil then return 0 end
redis.call('hset', key, 'lease:' .. owner, now + lease)
settle(key)
return 1
"#;

/// The full text of a read-write script: [`RW_PRELUDE`] followed by `body`.
///
/// ```
/// let s = dlock_client::scripts::rw_lock_script(dlock_client::scripts::RW_LOCK_BODY);
/// let _script = redis::Script::new(&s);
/// ```
pub fn rw_lock_script(body: &str) -> String {
    format!("{RW_PRELUDE}{body}")
}

// ---------------------------------------------------------------------------------------
// Semaphore (script backend). The layout of the module's DLOCK.SEMAPHORE (dlock-core's
// `model`): `mode` = `semaphore`, `capacity`, `permits:<owner>` and `lease:<owner>` (the
// owner's absolute deadline, unix ms); the key's PEXPIREAT is the latest deadline and the
// key is deleted when its last holder leaves. The field names are put in front of each
// script by [`semaphore_script`], from dlock-core, so they are written once.
//
// Plain Redis keeps no queue: a waiter tries, and tries again when a release publishes on
// the unlock channel or after at most 100 ms (no FIFO order; see the crate README).

/// Shared Lua prelude of the semaphore scripts (after the field names [`semaphore_script`]
/// defines): `now_ms()`, `load(key, now)` (the semaphore with lapsed holders removed:
/// `{capacity, used, holders = {owner = {permits, deadline}}, pruned}`, or `false` when the
/// key is not a semaphore), `settle(key, s)` (the key's PEXPIREAT from the holders, or
/// delete it when none is left) and `holding(key, s, owner)` (the owner's
/// `{permits, deadline}`, or nil after writing back a pruned hash); then it opens `KEYS[1]`
/// for every body: `key`, `now` and `s`, or the `WRONGTYPE` error when the key is not a
/// semaphore.
///
/// ```
/// assert!(dlock_client::scripts::SEMAPHORE_PRELUDE.contains("local function load"));
/// ```
pub const SEMAPHORE_PRELUDE: &str = r#"
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function load(key, now)
  local h = redis.call('hgetall', key)
  local s = {capacity = nil, used = 0, holders = {}, pruned = false}
  if #h == 0 then return s end
  local f = {}
  for i = 1, #h, 2 do f[h[i]] = h[i + 1] end
  if f[MODE] ~= SEMAPHORE then return false end
  s.capacity = tonumber(f[CAPACITY])
  if s.capacity == nil then return false end
  local lapsed = {}
  for k, v in pairs(f) do
    if string.sub(k, 1, #PERMITS) == PERMITS then
      local o = string.sub(k, #PERMITS + 1)
      local d = tonumber(f[LEASE .. o])
      if d == nil or d <= now then
        table.insert(lapsed, k)
        table.insert(lapsed, LEASE .. o)
      else
        local p = tonumber(v)
        s.holders[o] = {p, d}
        s.used = s.used + p
      end
    end
  end
  if #lapsed > 0 then
    redis.call('hdel', key, unpack(lapsed))
    s.pruned = true
  end
  -- No holder left: a free semaphore (the next grant may set another capacity).
  if next(s.holders) == nil then s.capacity = nil end
  return s
end
local function settle(key, s)
  local maxd = 0
  for _, h in pairs(s.holders) do
    if h[2] > maxd then maxd = h[2] end
  end
  if maxd == 0 then
    redis.call('del', key)
  else
    redis.call('pexpireat', key, maxd)
  end
end
local function holding(key, s, owner)
  local mine = s.holders[owner]
  if mine == nil and s.pruned then settle(key, s) end
  return mine
end
local key, now = KEYS[1], now_ms()
local s = load(key, now)
if s == false then return redis.error_reply(WRONGTYPE) end
"#;

/// Semaphore acquire. `KEYS[1]` semaphore key, `ARGV[1]` owner, `ARGV[2]` capacity,
/// `ARGV[3]` lease (ms), `ARGV[4]` permits to take. Returns `{1, the owner's permits}` when
/// granted (the owner's lease is reset), `{0, ms}` when they do not fit (`ms`: when to try
/// again at the latest, at most 100), `{-1, stored capacity}` when the semaphore exists
/// with another capacity, or a `WRONGTYPE` error. Use [`semaphore_script`] for the full
/// text.
///
/// ```
/// assert!(dlock_client::scripts::SEMAPHORE_ACQUIRE_BODY.contains("hset"));
/// ```
pub const SEMAPHORE_ACQUIRE_BODY: &str = r#"
local owner = ARGV[1]
local cap, lease, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if s.capacity ~= nil and s.capacity ~= cap then return {-1, s.capacity} end
if s.used + n > cap then
  local wait = 100
  for o, h in pairs(s.holders) do
    if o ~= owner and h[2] - now < wait then wait = math.max(1, h[2] - now) end
  end
  if s.pruned then settle(key, s) end
  return {0, wait}
end
local c = n
if s.holders[owner] ~= nil then c = s.holders[owner][1] + n end
redis.call('hset', key, MODE, SEMAPHORE, CAPACITY, cap, PERMITS .. owner, c, LEASE .. owner, now + lease)
s.holders[owner] = {c, now + lease}
settle(key, s)
return {1, c}
"#;

/// Semaphore release. `KEYS[1]` semaphore key, `KEYS[2]` unlock channel, `ARGV[1]` owner,
/// `ARGV[2]` permits to give back, `ARGV[3]` unlock message. Returns nil (the owner holds
/// none: nothing changes), 0 (it still holds some; its lease is left as it is), 1 (it holds
/// none now: its fields are gone, and the key when it was the last holder), or
/// `{-1, permits held}` when asked to give back more than it holds (nothing changes).
/// Every release publishes the message, waking a waiter.
///
/// ```
/// assert!(dlock_client::scripts::SEMAPHORE_RELEASE_BODY.contains("publish"));
/// ```
pub const SEMAPHORE_RELEASE_BODY: &str = r#"
local owner, n = ARGV[1], tonumber(ARGV[2])
local mine = holding(key, s, owner)
if mine == nil then return nil end
if n > mine[1] then return {-1, mine[1]} end
local r = 0
if n == mine[1] then
  redis.call('hdel', key, PERMITS .. owner, LEASE .. owner)
  s.holders[owner] = nil
  r = 1
else
  redis.call('hincrby', key, PERMITS .. owner, -n)
end
settle(key, s)
redis.call('publish', KEYS[2], ARGV[3])
return r
"#;

/// Semaphore renewal. `KEYS[1]` semaphore key, `ARGV[1]` lease (ms), `ARGV[2]` owner (the
/// argument order of [`RENEW`]). Returns 1 (the owner holds permits: its own lease is reset)
/// or 0.
///
/// ```
/// assert!(dlock_client::scripts::SEMAPHORE_RENEW_BODY.contains("return 1"));
/// ```
pub const SEMAPHORE_RENEW_BODY: &str = r#"
local lease, owner = tonumber(ARGV[1]), ARGV[2]
local mine = holding(key, s, owner)
if mine == nil then return 0 end
redis.call('hset', key, LEASE .. owner, now + lease)
mine[2] = now + lease
settle(key, s)
return 1
"#;

/// The full text of a semaphore script: the layout's field names (from dlock-core) and the
/// `WRONGTYPE` text as Lua locals, [`SEMAPHORE_PRELUDE`], then `body`.
///
/// ```
/// let s = dlock_client::scripts::semaphore_script(dlock_client::scripts::SEMAPHORE_ACQUIRE_BODY);
/// assert!(s.contains("'permits:'"));
/// let _script = redis::Script::new(&s);
/// ```
pub fn semaphore_script(body: &str) -> String {
    use dlock_core::model::{
        CAPACITY_FIELD, LEASE_PREFIX, MODE_FIELD, PERMITS_PREFIX, SEMAPHORE_MODE,
    };
    // The names are short ASCII constants without quotes, safe inside '...'.
    let lua = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    format!(
        "local MODE, SEMAPHORE, CAPACITY, PERMITS, LEASE = '{}', '{}', '{}', '{}', '{}'\n\
         local WRONGTYPE = '{}'\n{SEMAPHORE_PRELUDE}{body}",
        lua(MODE_FIELD),
        lua(SEMAPHORE_MODE),
        lua(CAPACITY_FIELD),
        lua(PERMITS_PREFIX),
        lua(LEASE_PREFIX),
        dlock_core::error::WRONGTYPE,
    )
}
