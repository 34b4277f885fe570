//! A run's result: how many scenarios passed, failed and were skipped, why, the longest
//! overlap the history checks saw, and the report printed from it.

use serde_json::{json, Value};

/// A run's result.
#[derive(Debug, Default)]
pub struct Summary {
    pub client: String,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub longest_overlap_us: i64,
    /// (scenario, reason)
    pub failures: Vec<(String, String)>,
    pub skips: Vec<(String, String)>,
    /// (scenario, seconds it took)
    pub times: Vec<(String, f64)>,
}

impl Summary {
    /// Adds another run's results to this one.
    pub(crate) fn join(&mut self, other: Summary) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.longest_overlap_us = self.longest_overlap_us.max(other.longest_overlap_us);
        self.failures.extend(other.failures);
        self.skips.extend(other.skips);
        self.times.extend(other.times);
    }

    /// `conformance <client>: N passed, N failed, N skipped; longest overlap X ms`, then a
    /// line per failure and per skip.
    pub fn report(&self) -> String {
        let mut out = format!(
            "conformance {}: {} passed, {} failed, {} skipped; longest overlap {:.1} ms\n",
            self.client,
            self.passed,
            self.failed,
            self.skipped,
            self.longest_overlap_us as f64 / 1000.0
        );
        for (name, why) in &self.failures {
            out.push_str(&format!("  FAILED {name}: {why}\n"));
        }
        for (name, why) in &self.skips {
            out.push_str(&format!("  skipped {name}: {why}\n"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "client": self.client,
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "longest_overlap_ms": self.longest_overlap_us as f64 / 1000.0,
            "failures": self.failures.iter().map(|(n, w)| json!({"scenario": n, "reason": w})).collect::<Vec<_>>(),
            "skips": self.skips.iter().map(|(n, w)| json!({"scenario": n, "why": w})).collect::<Vec<_>>(),
            "seconds": self.times.iter().map(|(n, s)| json!([n, s])).collect::<Vec<_>>(),
        })
    }
}
