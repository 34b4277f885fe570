//! Reading a key's state the way the tests compare it (lossy UTF-8, TTL in ms), and the
//! check that a server still answers.

use std::collections::BTreeMap;

use redis::Connection;

/// HGETALL as an ordered map (lossy UTF-8).
pub fn hgetall(con: &mut Connection, key: &str) -> BTreeMap<String, String> {
    let v: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(key).query(con).expect("HGETALL");
    v.into_iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(&k).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            )
        })
        .collect()
}

/// An expected hash, to compare with [`hgetall`].
pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// PTTL in ms (-1 without TTL, -2 when the key does not exist).
pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}
pub fn exists(con: &mut Connection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query(con).expect("EXISTS");
    n == 1
}
pub fn dbsize(con: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}
pub fn get_int(con: &mut Connection, key: &str) -> Option<i64> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}
/// DUMP of a key (raw bytes, None if absent).
pub fn dump(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
}
/// Assert the server still answers PING.
#[track_caller]
pub fn ping(con: &mut Connection) {
    let r: redis::RedisResult<String> = redis::cmd("PING").query(con);
    assert_eq!(
        r.as_deref().ok(),
        Some("PONG"),
        "server must still answer PING: {r:?}"
    );
}
