//! The Makefile's operator paths: the toolchain check that `make run` / `make test` /
//! `make build` start with (a machine without cargo, or with Debian 12's rustc 1.63, gets one
//! message within seconds, not a compile error), and `make install` putting the module where
//! redis-production.conf loads it from (and the exporter script where the monitoring set-up
//! expects it).

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's `rust-version` (Cargo.toml), which the check enforces.
fn rust_min() -> String {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let line = toml
        .lines()
        .find(|l| l.starts_with("rust-version = "))
        .expect("rust-version in Cargo.toml");
    line.split('"').nth(1).unwrap().to_string()
}

fn which(tool: &str) -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{tool} is not installed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A PATH of its own: the tools the Makefile's check uses, plus the given fake programs.
fn bin_dir(fakes: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for tool in ["sed", "awk", "sort", "head"] {
        symlink(which(tool), dir.path().join(tool)).unwrap();
    }
    for (name, script) in fakes {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// `make <target>` in the repository with nothing of this process's environment (cargo sets
/// CARGO for tests, which the Makefile would use) but PATH and HOME.
fn make(target: &str, path: &Path, home: &Path) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(which("make"))
        .arg("-C")
        .arg(root())
        .arg(target)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .output()
        .unwrap();
    (out, start.elapsed())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn make_without_cargo_stops_at_once_with_the_toolchain_message() {
    let bin = bin_dir(&[]);
    let home = tempfile::tempdir().unwrap();
    for target in ["run", "test", "build"] {
        let (out, took) = make(target, bin.path(), home.path());
        let err = stderr(&out);
        assert!(
            !out.status.success(),
            "make {target} succeeded without cargo"
        );
        assert!(
            err.contains(&format!("dlock needs cargo and rustc >= {}", rust_min())),
            "make {target}: {err}"
        );
        assert!(err.contains("https://sh.rustup.rs"), "make {target}: {err}");
        assert!(
            took < Duration::from_secs(10),
            "make {target} took {took:?}"
        );
    }
}

#[test]
fn make_with_debian_12_rustc_names_the_version_needed() {
    let home = tempfile::tempdir().unwrap();
    let old = bin_dir(&[
        ("cargo", "exit 0"),
        ("rustc", "echo 'rustc 1.63.0 (4b91a6ea7 2022-08-08)'"),
    ]);
    let (out, _) = make("build", old.path(), home.path());
    let err = stderr(&out);
    assert!(!out.status.success(), "make build went on with rustc 1.63");
    assert!(
        err.contains(&format!(
            "dlock needs rustc >= {}; this machine has 1.63.0",
            rust_min()
        )),
        "{err}"
    );

    // The minimum itself passes (a version compare, not a string compare: 1.100 > 1.88).
    for version in [rust_min(), "1.100.0".to_string()] {
        let ok = bin_dir(&[
            ("cargo", "exit 0"),
            ("rustc", &format!("echo 'rustc {version} (0 2030-01-01)'")),
        ]);
        let (out, _) = make("toolchain", ok.path(), home.path());
        assert!(out.status.success(), "rustc {version}: {}", stderr(&out));
    }
}

#[test]
fn make_install_puts_the_module_where_the_production_config_loads_it() {
    let conf = std::fs::read_to_string(root().join("redis-production.conf")).unwrap();
    let loaded = conf
        .lines()
        .find_map(|l| l.strip_prefix("loadmodule "))
        .and_then(|l| l.split_whitespace().next())
        .expect("a loadmodule line in redis-production.conf");
    let built = root().join("target/release/libdlock.so");
    let dest = tempfile::tempdir().unwrap();
    let staged = |target: &str| {
        let out = Command::new(which("make"))
            .arg("-C")
            .arg(root())
            .arg(target)
            .arg(format!("DESTDIR={}", dest.path().display()))
            .env_remove("MAKEFLAGS")
            .output()
            .unwrap();
        assert!(out.status.success(), "make {target}: {}", stderr(&out));
    };
    let install = || staged("install");
    install();
    let installed = dest.path().join(loaded.trim_start_matches('/'));
    let debug = installed.parent().unwrap().join(".debug/libdlock.so.debug");
    // Stripped: no debug info, no symbol table; it names its debug file, which has both.
    let sections = |path: &Path| -> Vec<String> {
        let out = Command::new(which("readelf"))
            .args(["-S", "-W"])
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "readelf {}: {}",
            path.display(),
            stderr(&out)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('.')))
            .map(String::from)
            .collect()
    };
    let module = sections(&installed);
    assert!(
        module.iter().any(|s| s == ".gnu_debuglink")
            && !module
                .iter()
                .any(|s| s.starts_with(".debug_") || s == ".symtab"),
        "the installed module is not stripped with a debug link: {module:?}"
    );
    assert!(
        sections(&built).iter().any(|s| s == ".debug_info"),
        "the build keeps its debug info (make bench-instr)"
    );
    let kept = sections(&debug);
    assert!(
        kept.iter().any(|s| s == ".debug_info") && kept.iter().any(|s| s == ".symtab"),
        "{}: {kept:?}",
        debug.display()
    );
    let link = std::fs::read(&installed).unwrap();
    assert!(
        link.windows(b"libdlock.so.debug\0".len())
            .any(|w| w == b"libdlock.so.debug\0"),
        "the module does not name libdlock.so.debug"
    );
    let (small, big) = (
        std::fs::metadata(&installed).unwrap().len(),
        std::fs::metadata(&built).unwrap().len(),
    );
    println!("installed module {small} bytes, built {big} bytes");
    assert!(small * 2 < big, "installed {small} bytes, built {big}");
    // And the stripped module is a working module.
    let srv = dlock_testutil::Server::builder()
        .without_module()
        .args(["--loadmodule", installed.to_str().unwrap()])
        .start();
    let acquired: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("k")
        .arg("me")
        .arg(10_000)
        .query(&mut srv.connection())
        .expect("DLOCK.ACQUIRE on the installed module");
    assert_eq!(acquired, 1);

    // The exporter script, where deploy/monitoring/prometheus-redis-exporter.default names it.
    let script = dest.path().join("usr/local/share/dlock/dlock-info.lua");
    assert_eq!(
        std::fs::read(&script).unwrap_or_else(|e| panic!("{}: {e}", script.display())),
        std::fs::read(root().join("deploy/monitoring/dlock-info.lua")).unwrap()
    );

    // Again, as an upgrade: a new file takes the name, the one a running server mapped is
    // left alone (rewriting it in place would change code under the server's feet).
    let old = std::fs::metadata(&installed).unwrap().ino();
    install();
    assert_ne!(
        std::fs::metadata(&installed).unwrap().ino(),
        old,
        "replaced in place"
    );
    for dir in [installed.parent().unwrap(), debug.parent().unwrap()] {
        let left: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            left.iter()
                .all(|n| n == "libdlock.so" || n == ".debug" || n == "libdlock.so.debug"),
            "a temporary file was left: {left:?}"
        );
    }

    // uninstall takes both away.
    staged("uninstall");
    assert!(!installed.exists() && !debug.exists());
}
