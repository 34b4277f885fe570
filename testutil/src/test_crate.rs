//! The integration tests' layout: each package's `tests/` is one test binary, `tests/main.rs`,
//! with a module per file (one link instead of one per file). Cargo no longer builds a file
//! of `tests/` on its own (`autotests = false`), so a file left out of `main.rs` would never
//! run: [`assert_every_file_is_a_module`] fails instead.

use std::path::Path;

/// Panics naming every `*.rs` of `dir` (but `main.rs`) that `main_rs` (the text of
/// `dir/main.rs`) does not declare as `mod <name>;`, and every declared module without a file.
pub fn assert_every_file_is_a_module(dir: &Path, main_rs: &str) {
    let declared: Vec<&str> = main_rs
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".rs")?.to_string())
        })
        .filter(|m| m != "main")
        .collect();
    files.sort();
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !declared.contains(&f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{}: add `mod <name>;` to main.rs for {missing:?}: a file of tests/ runs only as a \
         module of the one test binary",
        dir.display()
    );
    let stale: Vec<&&str> = declared
        .iter()
        .filter(|m| !files.iter().any(|f| f == *m) && !dir.join(m).join("mod.rs").exists())
        .collect();
    assert!(
        stale.is_empty(),
        "{}: modules without a file: {stale:?}",
        dir.display()
    );
}
