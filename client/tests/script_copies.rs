//! The Lua scripts are written once, in `dlock_client::scripts`: every copy another package
//! ships (listed in `client/script-copies.txt`) must be the export's exact text. Run
//! `make scripts` after changing a script.

#[path = "../examples/export_scripts.rs"]
mod export_scripts;

use std::path::Path;

#[test]
fn every_shipped_copy_is_the_export() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let expected = export_scripts::text();
    let copies: Vec<&str> = include_str!("../script-copies.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(!copies.is_empty(), "client/script-copies.txt lists no copy");
    let mut stale = Vec::new();
    for copy in &copies {
        match std::fs::read_to_string(root.join(copy)) {
            Ok(text) if text == expected => {}
            Ok(_) => stale.push(format!("{copy} differs from the export")),
            Err(e) => stale.push(format!("{copy}: {e}")),
        }
    }
    assert!(stale.is_empty(), "{}; run `make scripts`", stale.join("; "));
}
