//! The module's layering rule, checked: `src/lib.rs` states it once, as a numbered list of the
//! crate's modules (bottom first) with nested lists for a module whose files are layered too
//! (the engine). This test reads that list and every `.rs` file under `src/`, and fails on
//! - a `crate::` or `super::` path from a module to one listed after it (or to itself at
//!   the same level, i.e. a sibling in the same layer), or from a file of a nested list to a
//!   file listed after it;
//! - a module or nested-list file on disk that the list does not place, or a listed one that
//!   is not on disk (the list must stay the truth).
//!
//! The files and their order are never written here: renaming or adding an engine file means
//! giving it its place in `src/lib.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The rule as stated: modules bottom first, each with its files bottom first (empty when
/// the module is one layer).
#[derive(Debug)]
struct Rule {
    modules: Vec<(String, Vec<String>)>,
}

impl Rule {
    fn module_rank(&self, name: &str) -> Option<usize> {
        self.modules.iter().position(|(m, _)| m == name)
    }

    fn files(&self, module: &str) -> &[String] {
        self.modules
            .iter()
            .find(|(m, _)| m == module)
            .map(|(_, f)| f.as_slice())
            .unwrap_or(&[])
    }
}

/// The first `name` in backticks after a list number (`1. `name`: ...`).
fn list_entry(line: &str) -> Option<(usize, String)> {
    let indent = line.len() - line.trim_start().len();
    let rest = line.trim_start();
    let (number, rest) = rest.split_once(". ")?;
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let name = rest.strip_prefix('`')?.split('`').next()?;
    Some((indent, name.to_string()))
}

/// Reads the `# Layers` section of the crate's doc comment.
fn parse_rule(lib_rs: &str) -> Rule {
    let doc: Vec<&str> = lib_rs
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").strip_prefix(' ').unwrap_or(""))
        .collect();
    let start = doc
        .iter()
        .position(|l| l.trim() == "# Layers")
        .expect("src/lib.rs's doc has no `# Layers` section");
    let mut modules: Vec<(String, Vec<String>)> = vec![];
    let mut top_indent = None;
    for line in &doc[start + 1..] {
        if line.starts_with('#') {
            break;
        }
        let Some((indent, name)) = list_entry(line) else {
            continue;
        };
        let top = *top_indent.get_or_insert(indent);
        if indent == top {
            modules.push((name, vec![]));
        } else {
            let (_, files) = modules
                .last_mut()
                .expect("a nested entry before any module");
            files.push(name);
        }
    }
    assert!(
        modules.len() >= 3,
        "the layer list in src/lib.rs was not read: {modules:?}"
    );
    Rule { modules }
}

/// Where a path written in a file goes: a crate module, and within it a file (if named).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
struct Target {
    module: String,
    file: Option<String>,
}

/// The source without comments and string literals, so prose never counts as an import.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            i = end;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal (`'"'`, `'\n'`); lifetimes (`'a`) have no closing quote.
            let close = src[i + 1..].find('\'').map_or(b.len(), |e| i + 1 + e + 1);
            i = if b[i + 1] == b'\\' {
                src[i + 3..].find('\'').map_or(b.len(), |e| i + 3 + e + 1)
            } else {
                close
            };
            out.push_str("' '");
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first segment of each path in a `{a, b::c, d::{e, f}}` group starting at `s[0] == '{'`
/// (nested groups belong to their own first segment).
fn group_heads(s: &str) -> Vec<String> {
    let mut heads = vec![];
    let mut depth = 0;
    let mut expect_head = true;
    for (i, c) in s.char_indices() {
        match c {
            '{' => {
                depth += 1;
                expect_head = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => expect_head = true,
            c if expect_head && depth == 1 && (c.is_ascii_alphabetic() || c == '_') => {
                heads.push(ident_at(&s[i..]).to_string());
                expect_head = false;
            }
            _ => {}
        }
    }
    heads
}

/// Every module (for `crate::`) or sibling file (for `super::`) named after `prefix`.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = vec![];
    for (at, _) in code.match_indices(prefix) {
        // `foo_crate::x` is not `crate::x`.
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if rest.starts_with('{') {
            out.extend(group_heads(rest));
        } else {
            let id = ident_at(rest);
            if !id.is_empty() {
                out.push(id.to_string());
            }
        }
    }
    out
}

/// A crate module and its second-level name: `crate::engine::{store, work}` names the engine's
/// `store` and `work`.
fn crate_targets(code: &str) -> BTreeSet<Target> {
    let mut out = BTreeSet::new();
    for module in paths_after(code, "crate::") {
        out.insert(Target {
            module: module.clone(),
            file: None,
        });
        for file in paths_after(code, &format!("crate::{module}::")) {
            out.insert(Target {
                module: module.clone(),
                file: Some(file),
            });
        }
        // `crate::{engine::{self, wake}}` and the like.
        for group in code.match_indices("crate::{") {
            let text = &code[group.0 + "crate::".len()..];
            for inner in paths_after(text, &format!("{module}::")) {
                out.insert(Target {
                    module: module.clone(),
                    file: Some(inner),
                });
            }
        }
    }
    out
}

struct SourceFile {
    /// `src/engine/store.rs` → ("engine", Some("store")); `src/stats.rs` → ("stats", None);
    /// `src/engine/mod.rs` → ("engine", None).
    module: String,
    file: Option<String>,
    path: PathBuf,
    code: String,
}

fn source_files(src: &Path) -> Vec<SourceFile> {
    let mut out = vec![];
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel: Vec<String> = path
                .strip_prefix(src)
                .unwrap()
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let (module, file) = match rel.as_slice() {
                [one] => (one.clone(), None),
                [m, f] if f == "mod" => (m.clone(), None),
                [m, f] => (m.clone(), Some(f.clone())),
                // Deeper files belong to their second-level file's layer.
                [m, f, ..] => (m.clone(), Some(f.clone())),
                [] => unreachable!(),
            };
            let code = code_only(&fs::read_to_string(&path).unwrap());
            out.push(SourceFile {
                module,
                file,
                path,
                code,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Names a module's `mod.rs` re-exports from its files (`pub use registry::{registry, waiting}`),
/// so `super::waiting` counts as the `registry` file.
fn reexports(mod_rs: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in mod_rs.lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let file = ident_at(rest).to_string();
        let after = &rest[file.len()..];
        if let Some(group) = after.strip_prefix("::{") {
            for name in group.trim_end_matches("};").split(',') {
                out.insert(name.trim().to_string(), file.clone());
            }
        } else if let Some(name) = after.strip_prefix("::") {
            out.insert(ident_at(name).to_string(), file.clone());
        }
    }
    out
}

/// Every import against `rule` in `files`, and every file the rule does not place.
fn violations(rule: &Rule, files: &[SourceFile]) -> Vec<String> {
    let mut bad = vec![];
    let on_disk: BTreeSet<&str> = files.iter().map(|f| f.module.as_str()).collect();
    for (module, listed_files) in &rule.modules {
        if module != "dlock_core" && !on_disk.contains(module.as_str()) {
            bad.push(format!(
                "src/lib.rs lists `{module}`, which is not a module on disk"
            ));
        }
        for f in listed_files {
            if !files
                .iter()
                .any(|s| &s.module == module && s.file.as_deref() == Some(f))
            {
                bad.push(format!(
                    "src/lib.rs lists `{module}::{f}`, which is not a file on disk"
                ));
            }
        }
    }
    let mod_rs: BTreeMap<&str, BTreeMap<String, String>> = files
        .iter()
        .filter(|f| f.file.is_none())
        .map(|f| (f.module.as_str(), reexports(&f.code)))
        .collect();
    for f in files {
        let shown = f.path.display();
        let Some(rank) = rule.module_rank(&f.module) else {
            bad.push(format!(
                "{shown}: module `{}` has no place in src/lib.rs's layer list",
                f.module
            ));
            continue;
        };
        let layered = rule.files(&f.module);
        let file_rank = |name: &str| layered.iter().position(|x| x == name);
        let own_rank = f.file.as_deref().and_then(file_rank);
        if let Some(name) = &f.file {
            if !layered.is_empty() && own_rank.is_none() {
                bad.push(format!(
                    "{shown}: file `{name}` has no place in the `{}` list of src/lib.rs",
                    f.module
                ));
            }
        }
        // Sibling files of this file's module it names, through `crate::<own module>::x` or
        // `super::x` (only in a module's file, not in its mod.rs, and not inside a nested
        // `mod tests { use super::*; }`, where `super` is the file itself).
        let mut siblings: Vec<String> = vec![];
        for t in crate_targets(&f.code) {
            if t.module == f.module {
                siblings.extend(t.file);
                continue;
            }
            if t.module == "lib" {
                continue;
            }
            match rule.module_rank(&t.module) {
                Some(r) if r < rank => {}
                Some(_) => bad.push(format!(
                    "{shown}: uses `crate::{}`, not below `{}` in src/lib.rs's layer list",
                    t.module, f.module
                )),
                None => bad.push(format!(
                    "{shown}: uses `crate::{}`, which src/lib.rs's layer list does not place",
                    t.module
                )),
            }
        }
        if f.file.is_some() {
            let top_level = match f.code.find("mod tests") {
                Some(at) => &f.code[..at],
                None => &f.code,
            };
            siblings.extend(paths_after(top_level, "super::"));
        }
        let Some(own) = own_rank else {
            continue;
        };
        for name in siblings {
            let name = mod_rs
                .get(f.module.as_str())
                .and_then(|r| r.get(&name))
                .cloned()
                .unwrap_or(name);
            // Items of the module's own mod.rs (not a layered file) are not a layer.
            if let Some(r) = file_rank(&name) {
                if r >= own {
                    bad.push(format!(
                        "{shown}: uses `{}::{name}`, listed at or after `{}` in src/lib.rs",
                        f.module,
                        f.file.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
    }
    // One line per wrong import, however many of its items a file names.
    bad.dedup();
    bad
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_source_follows_the_stated_layers() {
    let src = src_dir();
    let rule = parse_rule(&fs::read_to_string(src.join("lib.rs")).unwrap());
    // The engine's files are layered in the rule (the test would pass vacuously otherwise).
    assert!(
        rule.files("engine").len() >= 5,
        "the engine's files are not listed in src/lib.rs: {rule:?}"
    );
    let files = source_files(&src);
    let bad = violations(&rule, &files);
    assert!(
        bad.is_empty(),
        "imports against the layer list of src/lib.rs:\n  {}",
        bad.join("\n  ")
    );
}

/// The checker itself, on a copy of the real source with one import against the order: the
/// `queue` file reaching up to `work`, and `stats` reaching up to `engine`.
#[test]
fn an_import_against_the_order_is_found() {
    let src = src_dir();
    let rule = parse_rule(&fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = source_files(&src);
    let queue = files
        .iter_mut()
        .find(|f| f.module == "engine" && f.file.as_deref() == Some("queue"))
        .expect("src/engine/queue.rs");
    queue.code = format!("use super::work::try_grant;\n{}", queue.code);
    let stats = files.iter_mut().find(|f| f.module == "stats").unwrap();
    stats.code = format!(
        "fn f() {{ crate::engine::{{registry, store}}::x(); }}\n{}",
        stats.code
    );
    let bad = violations(&rule, &files);
    assert!(
        bad.iter()
            .any(|b| b.contains("queue.rs") && b.contains("engine::work")),
        "{bad:?}"
    );
    assert!(
        bad.iter()
            .any(|b| b.contains("stats.rs") && b.contains("crate::engine")),
        "{bad:?}"
    );
    assert_eq!(bad.len(), 2, "{bad:?}");
}

/// A file the list does not place is a failure, not a pass.
#[test]
fn an_unplaced_file_is_found() {
    let src = src_dir();
    let rule = parse_rule(&fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = source_files(&src);
    files.push(SourceFile {
        module: "engine".into(),
        file: Some("newcomer".into()),
        path: src.join("engine/newcomer.rs"),
        code: "use super::job::Job;".into(),
    });
    let bad = violations(&rule, &files);
    assert!(
        bad.iter().any(|b| b.contains("`newcomer` has no place")),
        "{bad:?}"
    );
}

#[test]
fn paths_are_read_from_groups_and_bodies() {
    let code = code_only(
        "use crate::{engine::{self, wake}, ffi::Ctx};\n\
         // crate::commands in a comment\n\
         let s = \"crate::events\";\n\
         fn f() { crate::stats::record(); }",
    );
    let t: Vec<String> = crate_targets(&code)
        .into_iter()
        .map(|t| match t.file {
            Some(f) => format!("{}::{f}", t.module),
            None => t.module,
        })
        .collect();
    assert_eq!(
        t,
        [
            "engine",
            "engine::self",
            "engine::wake",
            "ffi",
            "ffi::Ctx",
            "stats",
            "stats::record"
        ]
    );
}
