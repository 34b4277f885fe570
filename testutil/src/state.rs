//! What the module shows, read the one way every test reads it: `DLOCK.INFO` fields of a key,
//! `INFO dlock` counters, and which servers of a group hold a key. Synchronous (a read of a
//! few bytes on loopback): the async client tests call them too.

use redis::{Connection, Value};

use crate::{info_int, Server};

/// An integer field of a `DLOCK.INFO` reply (RESP2's flat field/value array, or RESP3's map);
/// `None` when the reply has no such integer field.
pub fn dlock_info_int(reply: &Value, field: &str) -> Option<i64> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Array(a) => a
            .chunks(2)
            .filter_map(|p| Some((p.first()?, p.get(1)?)))
            .collect(),
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs.into_iter().find_map(|(name, value)| {
        let named = match name {
            Value::BulkString(b) => b == field.as_bytes(),
            Value::SimpleString(s) => s == field,
            _ => false,
        };
        match value {
            Value::Int(n) if named => Some(*n),
            _ => None,
        }
    })
}

/// The clients queued on `key` (`DLOCK.INFO`'s `waiters`).
#[track_caller]
pub fn waiters(con: &mut Connection, key: &str) -> i64 {
    let reply: Value = redis::cmd("DLOCK.INFO")
        .arg(key)
        .query(con)
        .unwrap_or_else(|e| panic!("DLOCK.INFO {key}: {e}"));
    dlock_info_int(&reply, "waiters")
        .unwrap_or_else(|| panic!("DLOCK.INFO {key} has no waiters field: {reply:?}"))
}

/// Leases cut since the server started (`INFO dlock`'s `dlock_leases_cut`: BIND holds whose
/// connection closed).
#[track_caller]
pub fn leases_cut(con: &mut Connection) -> i64 {
    info_int(con, "dlock", "dlock_leases_cut").expect("dlock_leases_cut in INFO dlock")
}

/// How many of `servers` (those still running) have `key`.
pub fn servers_holding(servers: &mut [Server], key: &str) -> usize {
    let mut n = 0;
    for s in servers.iter_mut() {
        if s.is_running() && crate::keys::exists(&mut s.connection(), key) {
            n += 1;
        }
    }
    n
}
