//! Helpers for tests on a real Redis Cluster (testutil's `Cluster`, which also finds a key
//! on a node and moves slots): a node's `DLOCK.INFO` read after `ASKING` (so that a node
//! importing the key's slot answers too).

use std::time::Duration;

use dlock_testutil::Cluster;
use redis::Value;

/// `DLOCK.INFO key` asked of node `node` after `ASKING` (RESP2: a flat field/value array).
pub fn info_asking(cl: &Cluster, node: usize, key: &str) -> Vec<Value> {
    let mut c = cl.nodes[node].connection();
    let (_, info): (Value, Vec<Value>) = redis::pipe()
        .cmd("ASKING")
        .cmd("DLOCK.INFO")
        .arg(key)
        .query(&mut c)
        .unwrap();
    info
}

fn field<'a>(info: &'a [Value], name: &str) -> &'a Value {
    info.chunks(2)
        .find_map(|pair| match pair {
            [Value::BulkString(n), v] if n == name.as_bytes() => Some(v),
            _ => None,
        })
        .unwrap_or_else(|| panic!("DLOCK.INFO has no field {name}: {info:?}"))
}

/// `waiters` of `DLOCK.INFO key` on node `node` (after `ASKING`).
pub fn waiters_asking(cl: &Cluster, node: usize, key: &str) -> i64 {
    match field(&info_asking(cl, node, key), "waiters") {
        Value::Int(n) => *n,
        other => panic!("waiters: {other:?}"),
    }
}

/// The owners in `holders` of `DLOCK.INFO key` on node `node` (after `ASKING`).
pub fn holders_asking(cl: &Cluster, node: usize, key: &str) -> Vec<String> {
    let info = info_asking(cl, node, key);
    let Value::Array(holders) = field(&info, "holders") else {
        panic!("holders: {info:?}")
    };
    holders
        .iter()
        .map(|h| match h {
            Value::Array(h) => match h.first() {
                Some(Value::BulkString(o)) => String::from_utf8_lossy(o).into_owned(),
                other => panic!("holder {other:?}"),
            },
            other => panic!("holder {other:?}"),
        })
        .collect()
}

/// Wait until `n` clients are queued on `key` at node `node`.
pub fn until_queued(cl: &Cluster, node: usize, key: &str, n: i64) {
    dlock_testutil::wait_for(
        Duration::from_secs(5),
        &format!("{n} waiter(s) on {key} at node {node}"),
        || (waiters_asking(cl, node, key) == n).then_some(()),
    );
}
