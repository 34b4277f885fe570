//! Reliability (issue #7), promise 6a: hostile input to the argument parsers, on stable Rust.
//!
//! `fuzz/` holds the cargo-fuzz target (libFuzzer, nightly). This is its stable counterpart in
//! `make test`: random argument vectors (grammar-aware words, boundary numbers, random and
//! non-UTF-8 bytes) go through `args::{acquire, rwlock, release, renew, info}` and
//! `config::Config::parse`, and each result is compared with an independent reference parser
//! written here from docs/COMMANDS.md (same reply or same error text). A
//! panic fails the test. Bounded: 2 s per parser in `make test`, 30 s under `DLOCK_LONG=1`;
//! `DLOCK_SEED` replays a run.
//!
//! The parsers come from the `dlock-core` crate, the very code the module runs.

use dlock_core::{args, config, error};

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_MS: i64 = 315_360_000_000;

// ---------------------------------------------------------------------------------------------
// The reference: what docs/COMMANDS.md says each parser must answer.

#[derive(Debug, PartialEq)]
struct Acq {
    key: Vec<u8>,
    owner: Vec<u8>,
    want: &'static str,
    lease: i64,
    wait: Option<i64>,
    fence: bool,
}

fn arity(cmd: &str) -> String {
    format!("ERR wrong number of arguments for '{cmd}' command")
}

/// A Redis-style integer: optional '-', then ASCII digits only, within i64.
fn int(w: &[u8]) -> Option<i64> {
    let (neg, digits) = match w.first() {
        Some(b'-') => (true, &w[1..]),
        _ => (false, w),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: i128 = 0;
    for d in digits {
        v = v * 10 + (d - b'0') as i128;
        if v > i64::MAX as i128 + 1 {
            return None;
        }
    }
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}

fn owner(w: &[u8]) -> Result<Vec<u8>, String> {
    if w.is_empty() || w.len() > 512 {
        return Err("ERR owner must be 1 to 512 bytes".into());
    }
    if w == b"mode" {
        return Err("ERR owner name 'mode' is reserved".into());
    }
    Ok(w.to_vec())
}

/// Digits beyond i64: a number too large, not a malformed one.
fn huge(w: &[u8]) -> bool {
    int(w).is_none() && !w.is_empty() && w.iter().all(u8::is_ascii_digit)
}

fn lease(w: &[u8]) -> Result<i64, String> {
    match int(w) {
        Some(v) if v > MAX_MS => Err(format!("ERR lease-ms must be at most {MAX_MS}")),
        _ if huge(w) => Err(format!("ERR lease-ms must be at most {MAX_MS}")),
        Some(v) if v >= 1 => Ok(v),
        _ => Err("ERR lease-ms must be a positive integer".into()),
    }
}

fn timeout(w: &[u8]) -> Result<i64, String> {
    match int(w) {
        Some(v) if v > MAX_MS => Err(format!("ERR timeout-ms must be at most {MAX_MS}")),
        _ if huge(w) => Err(format!("ERR timeout-ms must be at most {MAX_MS}")),
        Some(v) if v >= 0 => Ok(v),
        _ => Err("ERR timeout-ms must be a non-negative integer".into()),
    }
}

/// `BIND grace-ms`: from 0 to the lease (a bare `BIND`: 2 s or the lease).
fn grace(w: &[u8], lease: i64) -> Result<i64, String> {
    match int(w) {
        Some(v) if v > lease => Err(format!(
            "ERR grace-ms must be at most the lease-ms ({lease})"
        )),
        _ if huge(w) => Err(format!(
            "ERR grace-ms must be at most the lease-ms ({lease})"
        )),
        Some(v) if v >= 0 => Ok(v),
        _ => Err("ERR grace-ms must be a non-negative integer".into()),
    }
}

fn options(rest: &[&[u8]]) -> Result<(Option<i64>, bool), String> {
    let syntax = || "ERR syntax error".to_string();
    let (mut wait, mut fence) = (None, false);
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].to_ascii_uppercase();
        if w == b"WAIT" && wait.is_none() {
            wait = Some(timeout(rest.get(i + 1).ok_or_else(syntax)?)?);
            i += 2;
        } else if w == b"FENCE" && !fence {
            fence = true;
            i += 1;
        } else {
            return Err(syntax());
        }
    }
    Ok((wait, fence))
}

fn ref_acquire(a: &[&[u8]]) -> Result<Acq, String> {
    if a.len() < 3 {
        return Err(arity("dlock.acquire"));
    }
    let owner = owner(a[1])?;
    let lease = lease(a[2])?;
    let (wait, fence) = options(&a[3..])?;
    Ok(Acq {
        key: a[0].to_vec(),
        owner,
        want: "exclusive",
        lease,
        wait,
        fence,
    })
}

fn ref_rwlock(a: &[&[u8]]) -> Result<Acq, String> {
    if a.len() < 4 {
        return Err(arity("dlock.rwlock"));
    }
    let owner = owner(a[1])?;
    let want = match a[2].to_ascii_uppercase().as_slice() {
        b"READ" => "read",
        b"WRITE" => "write",
        _ => return Err("ERR mode must be READ or WRITE".into()),
    };
    let lease = lease(a[3])?;
    let (wait, fence) = options(&a[4..])?;
    Ok(Acq {
        key: a[0].to_vec(),
        owner,
        want,
        lease,
        wait,
        fence,
    })
}

type Rel = (Vec<u8>, Vec<u8>, Option<&'static str>, Option<i64>);

fn ref_release(a: &[&[u8]]) -> Result<Rel, String> {
    if a.len() < 2 {
        return Err(arity("dlock.release"));
    }
    let owner = owner(a[1])?;
    let upper: Vec<Vec<u8>> = a[2..].iter().map(|w| w.to_ascii_uppercase()).collect();
    let (mode, count) = match upper.as_slice() {
        [] => (None, None),
        [w] if w == b"READ" => (Some("read"), None),
        [w] if w == b"WRITE" => (Some("write"), None),
        [w, _] if w == b"COUNT" => (None, Some(permits(a[3], "COUNT")?)),
        _ => return Err("ERR syntax error".into()),
    };
    Ok((a[0].to_vec(), owner, mode, count))
}

/// `capacity` and `COUNT`: 1 ..= 1 000 000.
fn permits(w: &[u8], name: &str) -> Result<i64, String> {
    match int(w) {
        Some(v) if (1..=1_000_000).contains(&v) => Ok(v),
        _ => Err(format!(
            "ERR {name} must be a positive integer up to 1000000"
        )),
    }
}

type Sem = (Vec<u8>, Vec<u8>, String, i64, Option<i64>);

/// DLOCK.SEMAPHORE: `want` is `permits:<count>/<capacity>`.
fn ref_semaphore(a: &[&[u8]]) -> Result<Sem, String> {
    if a.len() < 4 {
        return Err(arity("dlock.semaphore"));
    }
    let owner = owner(a[1])?;
    let capacity = permits(a[2], "capacity")?;
    let lease = lease(a[3])?;
    let syntax = || "ERR syntax error".to_string();
    let (mut wait, mut count) = (None, None);
    let rest = &a[4..];
    for pair in rest.chunks(2) {
        let w = pair[0].to_ascii_uppercase();
        let value = pair.get(1).ok_or_else(syntax);
        if w == b"WAIT" && wait.is_none() {
            wait = Some(timeout(value?)?);
        } else if w == b"COUNT" && count.is_none() {
            count = Some(permits(value?, "COUNT")?);
        } else {
            return Err(syntax());
        }
    }
    let count = count.unwrap_or(1);
    if count > capacity {
        return Err(format!(
            "ERR COUNT {count} is more than the capacity {capacity}"
        ));
    }
    Ok((
        a[0].to_vec(),
        owner,
        format!("permits:{count}/{capacity}"),
        lease,
        wait,
    ))
}

fn ref_waiters(a: &[&[u8]]) -> Result<(Vec<u8>, Option<usize>), String> {
    match a {
        [k] => Ok((k.to_vec(), None)),
        [k, w, n] if w.eq_ignore_ascii_case(b"COUNT") => {
            Ok((k.to_vec(), Some(permits(n, "COUNT")? as usize)))
        }
        [] => Err(arity("dlock.waiters")),
        _ => Err("ERR syntax error".into()),
    }
}

fn ref_renew(a: &[&[u8]]) -> Result<(Vec<u8>, Vec<u8>, i64), String> {
    if a.len() < 3 {
        return Err(arity("dlock.renew"));
    }
    let owner = owner(a[1])?;
    let lease = lease(a[2])?;
    // `[BIND [grace-ms]]`: a word after BIND is its grace unless it starts an option (which
    // RENEW does not take); other words left over are a syntax error.
    let option = |w: &[u8]| {
        ["WAIT", "BIND", "FENCE", "LOCKDELAY", "COUNT"]
            .iter()
            .any(|o| w.eq_ignore_ascii_case(o.as_bytes()))
    };
    match &a[3..] {
        [] => {}
        [w] if w.eq_ignore_ascii_case(b"BIND") => {}
        [w, g] if w.eq_ignore_ascii_case(b"BIND") && !option(g) => {
            grace(g, lease)?;
        }
        _ => return Err("ERR syntax error".into()),
    }
    Ok((a[0].to_vec(), owner, lease))
}

fn ref_info(a: &[&[u8]]) -> Result<Vec<u8>, String> {
    if a.len() != 1 {
        return Err(arity("dlock.info"));
    }
    Ok(a[0].to_vec())
}

#[derive(Debug, PartialEq)]
struct Cfg {
    prefix: String,
    publish: &'static str,
    per_key: usize,
    total: usize,
}

fn ref_config(words: &[String]) -> Result<Cfg, Vec<String>> {
    // Error texts are log lines: the reference checks that they name the culprit.
    if words.len() % 2 == 1 {
        return Err(vec![
            format!("'{}'", words[words.len() - 1]),
            "no value".into(),
        ]);
    }
    let mut c = Cfg {
        prefix: "redisson_lock__channel".into(),
        publish: "auto",
        per_key: 1_000,
        total: 10_000,
    };
    let count = |name: &str, v: &str| -> Result<usize, Vec<String>> {
        let digits = v.strip_prefix('+').unwrap_or(v);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(vec![name.to_string(), format!("'{v}'")]);
        }
        digits
            .parse::<usize>()
            .map_err(|_| vec![name.to_string(), format!("'{v}'")])
    };
    for p in words.chunks(2) {
        let (name, v) = (p[0].to_ascii_lowercase(), p[1].as_str());
        match name.as_str() {
            "channel-prefix" if v.is_empty() => return Err(vec!["channel-prefix".into()]),
            "channel-prefix" => c.prefix = v.to_string(),
            "publish" => {
                c.publish = match v.to_ascii_lowercase().as_str() {
                    "yes" => "yes",
                    "no" => "no",
                    "auto" => "auto",
                    _ => return Err(vec!["publish".into(), format!("'{v}'")]),
                }
            }
            "max-waiters-per-key" => c.per_key = count(&name, v)?,
            "max-waiters" => c.total = count(&name, v)?,
            _ => return Err(vec![format!("unknown module argument '{}'", p[0])]),
        }
    }
    Ok(c)
}

// ---------------------------------------------------------------------------------------------
// The module's parsers, in the reference's terms.

fn want_name(w: args::Want) -> &'static str {
    match w {
        args::Want::Exclusive => "exclusive",
        args::Want::Read => "read",
        args::Want::Write => "write",
        args::Want::Permits { .. } => "permits",
    }
}

fn mod_acq(r: Result<args::AcquireArgs, error::LockError>, cmd: &str) -> Result<Acq, String> {
    r.map(|a| Acq {
        key: a.key.to_vec(),
        owner: a.terms.owner.to_vec(),
        want: want_name(a.terms.want),
        lease: a.terms.lease_ms,
        wait: a.wait_ms,
        fence: a.terms.fence,
    })
    .map_err(|e| e.message(cmd))
}

// ---------------------------------------------------------------------------------------------
// The generator.

fn word(rng: &mut StdRng) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "k",
        "lock:1",
        "{tag}x",
        "owner",
        "o",
        "mode",
        "MODE",
        "Mode",
        "WAIT",
        "wait",
        "WaIt",
        "FENCE",
        "fence",
        "FeNcE",
        "READ",
        "read",
        "WRITE",
        "write",
        "Write",
        "COUNT",
        "count",
        "2",
        "1000000",
        "1000001",
        "NX",
        "PX",
        "EX",
        "0",
        "1",
        "-1",
        "-0",
        "05",
        "+5",
        " 5",
        "5 ",
        "1.5",
        "1e3",
        "0x10",
        "100",
        "30000",
        "315360000000",
        "315360000001",
        "-315360000000",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "99999999999999999999",
        "",
        " ",
        "\0",
        "yes",
        "no",
        "YES",
        "auto",
        "Auto",
        "publish",
        "max-waiters",
        "max-waiters-per-key",
        "channel-prefix",
        "MAX-WAITERS",
        "colour",
    ];
    match rng.gen_range(0..10) {
        0..=5 => WORDS[rng.gen_range(0..WORDS.len())].as_bytes().to_vec(),
        6 => rng
            .gen_range(-1_000_000_000_000i64..1_000_000_000_000)
            .to_string()
            .into_bytes(),
        7 => {
            let n = *[511usize, 512, 513, 1024].get(rng.gen_range(0..4)).unwrap();
            vec![b'x'; n]
        }
        _ => {
            let n = rng.gen_range(0..12);
            (0..n).map(|_| rng.gen()).collect()
        }
    }
}

fn argv(rng: &mut StdRng) -> Vec<Vec<u8>> {
    let n = rng.gen_range(0..9);
    (0..n).map(|_| word(rng)).collect()
}

fn budget() -> Duration {
    Duration::from_secs(dlock_testutil::workers::scale(2, 30))
}

fn seed() -> u64 {
    std::env::var("DLOCK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen())
}

/// Runs `check` on random argument vectors until the time budget is spent.
fn run(name: &str, mut check: impl FnMut(&[&[u8]])) {
    let seed = seed();
    println!("{name}: seed {seed} (DLOCK_SEED={seed} to replay)");
    let mut rng = StdRng::seed_from_u64(seed);
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < budget() {
        for _ in 0..1000 {
            let owned = argv(&mut rng);
            let refs: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
            check(&refs);
            n += 1;
        }
    }
    println!("{name}: {n} argument vectors, all as specified");
}

#[test]
fn acquire_parser_matches_the_reference() {
    run("dlock.acquire", |a| {
        let got = mod_acq(args::acquire(a), "dlock.acquire");
        assert_eq!(got, ref_acquire(a), "DLOCK.ACQUIRE {a:?}");
    });
}

#[test]
fn rwlock_parser_matches_the_reference() {
    run("dlock.rwlock", |a| {
        let got = mod_acq(args::rwlock(a), "dlock.rwlock");
        assert_eq!(got, ref_rwlock(a), "DLOCK.RWLOCK {a:?}");
    });
}

#[test]
fn release_renew_info_parsers_match_the_reference() {
    run("dlock.release/renew/info", |a| {
        let got = args::release(a)
            .map(|r| {
                let mode = r.mode.map(|m| match m {
                    args::Mode::Read => "read",
                    args::Mode::Write => "write",
                });
                (r.key.to_vec(), r.owner.to_vec(), mode, r.count)
            })
            .map_err(|e| e.message("dlock.release"));
        assert_eq!(got, ref_release(a), "DLOCK.RELEASE {a:?}");
        let got = args::renew(a)
            .map(|r| (r.key.to_vec(), r.owner.to_vec(), r.lease_ms))
            .map_err(|e| e.message("dlock.renew"));
        assert_eq!(got, ref_renew(a), "DLOCK.RENEW {a:?}");
        let got = args::info(a)
            .map(<[u8]>::to_vec)
            .map_err(|e| e.message("dlock.info"));
        assert_eq!(got, ref_info(a), "DLOCK.INFO {a:?}");
    });
}

#[test]
fn semaphore_and_waiters_parsers_match_the_reference() {
    run("dlock.semaphore/waiters", |a| {
        let got = args::semaphore(a)
            .map(|r| {
                let args::Want::Permits { capacity, count } = r.terms.want else {
                    panic!("DLOCK.SEMAPHORE {a:?} parsed as {:?}", r.terms.want)
                };
                assert!(!r.terms.fence, "DLOCK.SEMAPHORE {a:?}: no FENCE");
                (
                    r.key.to_vec(),
                    r.terms.owner.to_vec(),
                    format!("permits:{count}/{capacity}"),
                    r.terms.lease_ms,
                    r.wait_ms,
                )
            })
            .map_err(|e| e.message("dlock.semaphore"));
        assert_eq!(got, ref_semaphore(a), "DLOCK.SEMAPHORE {a:?}");
        let got = args::waiters(a)
            .map(|(k, n)| (k.to_vec(), n))
            .map_err(|e| e.message("dlock.waiters"));
        assert_eq!(got, ref_waiters(a), "DLOCK.WAITERS {a:?}");
    });
}

#[test]
fn module_arguments_parser_matches_the_reference() {
    run("module arguments", |a| {
        // Redis hands module arguments over as strings; the module reads them lossily.
        let words: Vec<String> = a
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        let got = config::Config::parse(&words);
        match (got, ref_config(&words)) {
            (Ok(c), Ok(r)) => assert_eq!(
                Cfg {
                    prefix: c.channel_prefix,
                    publish: match c.publish {
                        config::Publish::Always => "yes",
                        config::Publish::Never => "no",
                        config::Publish::Auto => "auto",
                    },
                    per_key: c.max_waiters_per_key,
                    total: c.max_waiters,
                },
                r,
                "module arguments {words:?}"
            ),
            (Err(line), Err(must_name)) => {
                for part in must_name {
                    assert!(
                        line.contains(&part),
                        "module arguments {words:?}: log line {line:?} should name {part:?}"
                    );
                }
            }
            (got, want) => panic!("module arguments {words:?}: got {got:?}, expected {want:?}"),
        }
    });
}
