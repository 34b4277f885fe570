//! Which module build the tests load, and the refusal to load one older than its sources.
//!
//! `cargo test` does not rebuild the cdylib (`make test` does, first); without this check a
//! test run after an edit would silently exercise the previous build. The rule is cargo's
//! own: the module is stale when a file it was built from is newer than it (or gone). Those
//! files are the ones cargo lists in the dep-info file beside the module (`libdlock.d`: the
//! `.rs` files of `src/` and `core/src/` that are part of the build); without that file,
//! every `.rs` file under `src/` and `core/src/`. Manifests and `Cargo.lock` are not
//! compared: cargo does not rebuild when only their time changes (a merge touching them),
//! so a test could never get past the check.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

/// Path of the module to load: `DLOCK_MODULE` as given (not checked: the caller chose that
/// build), else `<workspace>/target/release/libdlock.so`, which must be at least as new as
/// its sources (panics otherwise, telling how to rebuild).
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("DLOCK_MODULE") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let module = root.join("target/release/libdlock.so");
    // Checked once per test binary; every later call gives the same verdict.
    static VERDICT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(why) = VERDICT.get_or_init(|| check_fresh(root, &module)) {
        panic!("{why}");
    }
    module
}

fn check_fresh(root: &Path, module: &Path) -> Result<(), String> {
    let rebuild = "run `cargo build --release -p dlock` (or `make test`, which builds first), \
                   or set DLOCK_MODULE to the build to test";
    let built = modified(module)
        .ok_or_else(|| format!("no module build at {}: {rebuild}", module.display()))?;
    let inputs = match std::fs::read_to_string(module.with_extension("d")) {
        Ok(dep_info) => dep_info_inputs(&dep_info),
        Err(_) => {
            let mut files = vec![];
            for dir in ["src", "core/src"] {
                rust_files(&root.join(dir), &mut files);
            }
            files
        }
    };
    let dated = inputs.into_iter().map(|p| {
        let t = modified(&p);
        (p, t)
    });
    match first_newer(built, dated) {
        None => Ok(()),
        Some(source) => Err(format!(
            "{} is older than {} (the module build is stale): {rebuild}",
            module.display(),
            source.display()
        )),
    }
}

/// The first input modified after `built`, or that no longer exists (`None` time): the
/// module was not built from what is on disk now.
fn first_newer(
    built: SystemTime,
    inputs: impl IntoIterator<Item = (PathBuf, Option<SystemTime>)>,
) -> Option<PathBuf> {
    inputs
        .into_iter()
        .find(|(_, t)| t.is_none_or(|t| t > built))
        .map(|(p, _)| p)
}

/// The inputs of a Makefile-style dep-info file as cargo writes it (`out: in1 in2 ...`,
/// spaces inside a path escaped as `\ `).
fn dep_info_inputs(dep_info: &str) -> Vec<PathBuf> {
    let Some(line) = dep_info.lines().find(|l| !l.trim().is_empty()) else {
        return vec![];
    };
    // The target is an absolute path; ": " (colon, space) ends it.
    let Some((_, inputs)) = line.split_once(": ") else {
        return vec![];
    };
    let mut out = vec![];
    let mut word = String::new();
    let mut chars = inputs.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            ' ' => out.extend((!word.is_empty()).then(|| PathBuf::from(std::mem::take(&mut word)))),
            c => word.push(c),
        }
    }
    out.extend((!word.is_empty()).then(|| PathBuf::from(word)));
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(s: u64) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s))
    }

    #[test]
    fn a_build_is_fresh_only_when_no_input_is_newer_or_gone() {
        let built = at(100).unwrap();
        let inputs = |times: &[Option<SystemTime>]| -> Vec<(PathBuf, Option<SystemTime>)> {
            (0..times.len())
                .map(|i| (PathBuf::from(format!("f{i}.rs")), times[i]))
                .collect()
        };
        assert_eq!(first_newer(built, inputs(&[at(10), at(100)])), None);
        assert_eq!(
            first_newer(built, inputs(&[at(10), at(101), at(200)])),
            Some(PathBuf::from("f1.rs"))
        );
        assert_eq!(
            first_newer(built, inputs(&[at(10), None])),
            Some(PathBuf::from("f1.rs")),
            "a deleted source means the build is not of what is on disk"
        );
        assert_eq!(first_newer(built, inputs(&[])), None);
    }

    #[test]
    fn dep_info_lists_the_inputs_after_the_target() {
        let d =
            "/w/target/release/libdlock.so: /w/core/src/lib.rs /w/my\\ dir/a.rs /w/src/lib.rs\n\n";
        assert_eq!(
            dep_info_inputs(d),
            ["/w/core/src/lib.rs", "/w/my dir/a.rs", "/w/src/lib.rs"].map(PathBuf::from)
        );
        assert!(dep_info_inputs("").is_empty());
    }

    #[test]
    fn a_source_touched_after_the_build_makes_it_stale() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/engine")).unwrap();
        std::fs::create_dir_all(root.join("core/src")).unwrap();
        let old = SystemTime::now() - Duration::from_secs(60);
        let set = |p: &Path, t: SystemTime| {
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_modified(t).unwrap();
        };
        for f in [
            "src/lib.rs",
            "src/engine/mod.rs",
            "core/src/lib.rs",
            "src/notes.txt",
        ] {
            std::fs::write(root.join(f), "").unwrap();
            set(&root.join(f), old);
        }
        let module = root.join("libdlock.so");
        assert!(check_fresh(root, &module)
            .unwrap_err()
            .contains("no module build"));
        std::fs::write(&module, "").unwrap();
        assert_eq!(check_fresh(root, &module), Ok(()));

        // Not a source file: ignored.
        set(
            &root.join("src/notes.txt"),
            SystemTime::now() + Duration::from_secs(5),
        );
        assert_eq!(check_fresh(root, &module), Ok(()));

        set(
            &root.join("src/engine/mod.rs"),
            SystemTime::now() + Duration::from_secs(5),
        );
        let why = check_fresh(root, &module).unwrap_err();
        assert!(why.contains("engine/mod.rs") && why.contains("cargo build --release -p dlock"));

        // With a dep-info file, only the files it lists count.
        std::fs::write(
            module.with_extension("d"),
            format!(
                "{}: {}\n",
                module.display(),
                root.join("core/src/lib.rs").display()
            ),
        )
        .unwrap();
        assert_eq!(check_fresh(root, &module), Ok(()));
        set(
            &root.join("core/src/lib.rs"),
            SystemTime::now() + Duration::from_secs(5),
        );
        assert!(check_fresh(root, &module)
            .unwrap_err()
            .contains("core/src/lib.rs"));
    }
}
