//! A step's `expect`: the reply's error kind (naming the server where the contract says
//! so), its fields, how long it took, and the counts and tokens it must show.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// What a reply is checked against besides the step's `expect`.
pub(crate) struct Checker<'a> {
    /// The ports of every data server (an error about the servers names one of them).
    pub ports: Vec<u16>,
    /// The fencing token of each hold granted so far.
    pub tokens: &'a HashMap<String, u64>,
}

impl Checker<'_> {
    pub(crate) fn check(
        &self,
        what: &str,
        reply: &Value,
        expect: &Map<String, Value>,
    ) -> Result<(), String> {
        let fail = |why: String| Err(format!("{what}: {why}; reply {reply}"));
        let ok = reply["ok"] == true;
        // `any`: whatever the answer (a step whose outcome depends on timing the scenario
        // does not fix; the history check still judges it).
        if expect.get("any") == Some(&Value::Bool(true)) {
            return Ok(());
        }
        match expect.get("error").and_then(Value::as_str) {
            Some(kind) => {
                if ok {
                    return fail(format!("expected error {kind}"));
                }
                if reply["error"]["kind"] != kind {
                    return fail(format!("expected error {kind}"));
                }
                // These errors must name the server they are about.
                if matches!(kind, "module_not_loaded" | "connection" | "timeout") {
                    let msg = reply["error"]["message"].as_str().unwrap_or("");
                    let named = self.ports.iter().any(|p| msg.contains(&format!(":{p}")));
                    if !named {
                        return fail("the message does not name the server (host:port)".into());
                    }
                }
            }
            None if !ok => return fail("unexpected error".into()),
            None => {}
        }
        for field in ["granted", "released", "renewed", "held", "count", "reason"] {
            if let Some(want) = expect.get(field) {
                if reply.get(field) != Some(want) {
                    return fail(format!("expected {field} = {want}"));
                }
            }
        }
        let took = reply["t_us"].as_i64().unwrap_or(0) - reply["sent_us"].as_i64().unwrap_or(0);
        if let Some(ms) = expect.get("within_ms").and_then(Value::as_i64) {
            if took > ms * 1000 {
                return fail(format!("took {} ms, expected within {ms} ms", took / 1000));
            }
        }
        if let Some(ms) = expect.get("after_ms").and_then(Value::as_i64) {
            if took < ms * 1000 {
                return fail(format!(
                    "took {} ms, expected not before {ms} ms",
                    took / 1000
                ));
            }
        }
        if let Some(other) = expect.get("token_above").and_then(Value::as_str) {
            let Some(before) = self.tokens.get(other) else {
                return fail(format!("no token recorded for {other}"));
            };
            if reply["token"].as_u64().is_none_or(|t| t <= *before) {
                return fail(format!("expected a token above {other}'s {before}"));
            }
        }
        if let Some(n) = expect.get("waiters").and_then(Value::as_u64) {
            let got = reply["waiters"].as_array().map_or(0, Vec::len) as u64;
            if got != n {
                return fail(format!("expected {n} waiters"));
            }
        }
        if let Some(n) = expect.get("holders").and_then(Value::as_u64) {
            let got = reply["info"]["holders"].as_array().map_or(0, Vec::len) as u64;
            if got != n {
                return fail(format!("expected {n} holders"));
            }
        }
        Ok(())
    }
}
