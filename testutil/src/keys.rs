//! Reading a key's state the way the tests compare it (lossy UTF-8, TTL in ms).

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

/// PTTL in ms (-1 without TTL, -2 when the key does not exist).
pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}
