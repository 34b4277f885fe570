//! Reading what callgrind counted, for every `--instr` mode (`instr`, `idle_instr`,
//! `redisson_instr`, `client_cpu`): counting switched on and off in a running server, a
//! file's total, and one function's inclusive count from `callgrind_annotate`.

use std::path::Path;
use std::process::Command;

/// Instructions in `function` and what it called (`callgrind_annotate --inclusive=yes`).
pub(crate) fn inclusive(out: &Path, function: &str) -> u64 {
    inclusive_in(&annotate(out), function)
}

/// The report of `callgrind_annotate --inclusive=yes` on a callgrind file.
pub(crate) fn annotate(out: &Path) -> String {
    let report = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(out)
        .output()
        .expect("run callgrind_annotate (valgrind)");
    String::from_utf8_lossy(&report.stdout).into_owned()
}

/// Instructions in `function` and what it called, read from an [`annotate`] report. Lines
/// read `count (pct%)  file:function [object]`; the object is sometimes left out, and a
/// function's inlined parts are listed under their own files: the function's count is the
/// largest of its lines.
pub(crate) fn inclusive_in(report: &str, function: &str) -> u64 {
    let count_of = |line: &str| -> Option<u64> {
        let (count, rest) = line.trim_start().split_once(' ')?;
        let (_, name) = rest.split_once("%)")?.1.trim().split_once(':')?;
        let name = name.split(" [").next()?;
        (name == function).then(|| count.replace(',', "").parse().ok())?
    };
    report.lines().filter_map(count_of).max().unwrap_or(0)
}

/// Switches callgrind's counting in the server `pid` on or off (returns once it is done).
pub(crate) fn instrumentation(pid: u32, on: bool) {
    let out = Command::new("callgrind_control")
        .args(["-i", if on { "on" } else { "off" }, &pid.to_string()])
        .output()
        .expect("run callgrind_control (valgrind)");
    assert!(
        out.status.success(),
        "callgrind_control: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The instruction total of a callgrind output file.
pub(crate) fn callgrind_total(out: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(out).ok()?;
    // `totals:` counts what was instrumented; `summary:` (written first) is 0 when counting
    // started switched off.
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    field("totals:").or_else(|| field("summary:"))
}

#[cfg(test)]
mod tests {
    use super::inclusive_in;

    /// Lines as `callgrind_annotate --inclusive=yes` wrote them for a server with waiters.
    const REPORT: &str = "\
21,442,359 (98.76%)  ???:serverCron [/usr/bin/redis-check-rdb]
 5,456,786 (25.13%)  ???:moduleFireServerEvent [/usr/bin/redis-check-rdb]
 5,363,174 (24.70%)  /w/src/ffi/events.rs:dlock::ffi::events::subscribe_cron::on_event
 4,680,769 (21.56%)  src/engine/listen.rs:dlock::ffi::events::subscribe_cron::on_event
     1,914 ( 0.01%)  src/ffi/events.rs:dlock::ffi::events::subscribe_cron::on_event [/m.so]
 5,311,637 (24.46%)  ???:clientsCron [/usr/bin/redis-check-rdb]
   222,626 ( 0.98%)  ???:databasesCron [/usr/bin/redis-check-rdb]";

    #[test]
    fn a_function_counts_its_largest_line_with_or_without_its_object() {
        let on_event = "dlock::ffi::events::subscribe_cron::on_event";
        assert_eq!(inclusive_in(REPORT, on_event), 5_363_174);
        assert_eq!(inclusive_in(REPORT, "serverCron"), 21_442_359);
        // A name that only ends like another is not it.
        assert_eq!(inclusive_in(REPORT, "Cron"), 0);
        assert_eq!(inclusive_in(REPORT, "moduleTimerHandler"), 0);
    }
}
