//! The cluster's slot map, cached: which node serves a key's slot. Read from
//! `CLUSTER SLOTS` once at connect time and again after a `MOVED` reply (an `ASK` is a
//! one-off redirection during a slot migration and leaves the map as it is).

use std::sync::RwLock;

use redis::aio::ConnectionLike;
use redis::Value;

/// Slot ranges and the address (`host:port`) of the master serving each.
#[derive(Default)]
pub(crate) struct SlotMap {
    ranges: RwLock<Vec<(u16, u16, String)>>,
}

impl SlotMap {
    /// The address serving `key`'s slot, if known.
    pub(crate) fn addr_for(&self, key: &str) -> Option<String> {
        let slot = dlock_core::names::key_slot(key.as_bytes());
        let ranges = self.ranges.read().unwrap();
        ranges
            .iter()
            .find(|(lo, hi, _)| *lo <= slot && slot <= *hi)
            .map(|(_, _, a)| a.clone())
    }

    /// Ask the cluster for the current map (`CLUSTER SLOTS`); on failure keep the old one.
    pub(crate) async fn refresh<C: ConnectionLike>(&self, conn: &mut C) {
        let Ok(v) = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<Value>(conn)
            .await
        else {
            return;
        };
        let Value::Array(entries) = v else { return };
        let mut ranges = Vec::with_capacity(entries.len());
        for r in entries {
            let Value::Array(r) = r else { continue };
            let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(node))) =
                (r.first(), r.get(1), r.get(2))
            else {
                continue;
            };
            let (Some(host), Some(Value::Int(port))) = (node.first(), node.get(1)) else {
                continue;
            };
            let host = match host {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => continue,
            };
            ranges.push((*lo as u16, *hi as u16, format!("{host}:{port}")));
        }
        if !ranges.is_empty() {
            *self.ranges.write().unwrap() = ranges;
        }
    }
}
