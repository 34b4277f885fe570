//! Redisson's own lock scripts as the Redisson jars the tests run send them, read from the
//! capture `make redisson-scripts` writes (`target/redisson/scripts-<version>.json`). The
//! project keeps no copy of the texts; without a capture, the tests and benchmark rows that
//! need them say so and stop (under CI they fail instead).

use std::path::PathBuf;

/// One captured script: its role (`lock.tryLock`, `lock.unlock`...), SHA1 and text.
#[derive(Clone, Debug)]
pub struct CapturedScript {
    pub redisson: String,
    pub role: String,
    pub sha1: String,
    pub text: String,
}

/// Where the capture is.
pub fn capture_dir() -> PathBuf {
    std::env::var_os("DLOCK_REDISSON_SCRIPTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/redisson"))
}

/// Every captured script of every version (one entry per version and role), or `None`
/// when nothing was captured.
pub fn captured() -> Option<Vec<CapturedScript>> {
    let mut out = vec![];
    for entry in std::fs::read_dir(capture_dir()).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("scripts-") && name.ends_with(".json")) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).ok()?;
        let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
        let version = doc["redisson"].as_str().unwrap_or_default().to_string();
        for s in doc["scripts"].as_array()? {
            out.push(CapturedScript {
                redisson: version.clone(),
                role: s["name"].as_str()?.to_string(),
                sha1: s["sha1"].as_str()?.to_string(),
                text: s["text"].as_str()?.to_string(),
            });
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The text with this SHA1, if captured.
pub fn text_of(sha1: &str) -> Option<String> {
    captured()?
        .into_iter()
        .find(|s| s.sha1 == sha1)
        .map(|s| s.text)
}

/// The captured scripts, or `None` after a clear message when there is no capture and the
/// run is not under CI (`CI` set: a missing capture is a failure).
pub fn captured_or_skip(what: &str) -> Option<Vec<CapturedScript>> {
    let got = captured();
    if got.is_none() {
        let msg = format!(
            "{what}: no capture of Redisson's scripts in {} (run `make redisson-scripts`)",
            capture_dir().display()
        );
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("SKIPPED {msg}");
    }
    got
}
