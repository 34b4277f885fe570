//! Bad input (docs/COMMANDS.md, "Errors"): exact error texts, nothing changes, the server
//! keeps answering; a randomized argument fuzz; bad module arguments fail the load.

use crate::common;
use common::*;
use rand::{Rng, SeedableRng};
use std::time::Duration;

const ARITY: &str = "ERR wrong number of arguments for";
const SYNTAX: &str = "ERR syntax error";
const LEASE_BAD: &str = "ERR lease-ms must be a positive integer";
const LEASE_MAX: &str = "ERR lease-ms must be at most 315360000000";
const TIMEOUT_BAD: &str = "ERR timeout-ms must be a non-negative integer";
const TIMEOUT_MAX: &str = "ERR timeout-ms must be at most 315360000000";
const OWNER_LEN: &str = "ERR owner must be 1 to 512 bytes";
const OWNER_MODE: &str = "ERR owner name 'mode' is reserved";
const MODE_WORD: &str = "ERR mode must be READ or WRITE";

/// Every key with its DUMP and whether it has a TTL.
fn snapshot(c: &mut Connection) -> Vec<(String, Option<Vec<u8>>, bool)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let d = dump(c, &k);
            let t = pttl(c, &k);
            (k, d, t >= 0)
        })
        .collect()
}

fn setup(c: &mut Connection) {
    assert_eq!(acquire(c, "L", "o", 600_000), Reply::Int(1));
    for args in [
        vec!["SET", "S", "string"],
        vec!["RPUSH", "LST", "a", "b"],
        vec!["HSET", "H", "f", "x"],
        vec!["HSET", "H0", "o", "0"],
        vec!["HSET", "HNEG", "o", "-3"],
        vec!["HSET", "HM", "mode", "other", "read:o", "1"],
        vec!["SADD", "SET", "m"],
    ] {
        assert!(!cmd(c, &args).is_err());
    }
}

/// Run `args`, expect an error starting with `expect`, and check nothing changed.
#[track_caller]
fn expect_err(c: &mut Connection, args: &[&str], expect: &str) {
    let before = snapshot(c);
    let r = cmd(c, args);
    match &r {
        Reply::Err(s) if s.starts_with(expect) => {}
        _ => panic!("{args:?}: expected error {expect:?}, got {r:?}"),
    }
    assert_eq!(snapshot(c), before, "{args:?} changed the keyspace");
    ping(c);
}

#[test]
fn arity_errors() {
    let srv = Server::start();
    let mut c = srv.connection();
    setup(&mut c);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["DLOCK.ACQUIRE"], "dlock.acquire"),
        (vec!["DLOCK.ACQUIRE", "L"], "dlock.acquire"),
        (vec!["DLOCK.ACQUIRE", "L", "o"], "dlock.acquire"),
        (vec!["DLOCK.RWLOCK", "R", "o", "READ"], "dlock.rwlock"),
        (vec!["DLOCK.RWLOCK", "R", "o"], "dlock.rwlock"),
        (vec!["DLOCK.RELEASE", "L"], "dlock.release"),
        (vec!["DLOCK.RENEW", "L", "o"], "dlock.renew"),
        (vec!["DLOCK.INFO"], "dlock.info"),
        (vec!["DLOCK.INFO", "L", "x"], "dlock.info"),
    ];
    for (args, name) in cases {
        expect_err(
            &mut c,
            &args,
            &format!("ERR wrong number of arguments for '{name}' command"),
        );
    }
}

#[test]
fn syntax_errors() {
    let srv = Server::start();
    let mut c = srv.connection();
    setup(&mut c);
    for key in ["L", "free", "S"] {
        let cases: Vec<Vec<&str>> = vec![
            vec!["DLOCK.ACQUIRE", key, "o2", "100", "WAIT"],
            vec![
                "DLOCK.ACQUIRE",
                key,
                "o2",
                "100",
                "WAIT",
                "10",
                "WAIT",
                "10",
            ],
            vec!["DLOCK.ACQUIRE", key, "o2", "100", "FENCE", "FENCE"],
            vec!["DLOCK.ACQUIRE", key, "o2", "100", "BOGUS"],
            vec!["DLOCK.RENEW", key, "o2", "100", "x"],
            // A bare BIND is the default grace; the option after it must be one it takes.
            vec!["DLOCK.RENEW", key, "o2", "100", "BIND", "WAIT"],
            vec!["DLOCK.RENEW", key, "o2", "100", "BIND", "1", "x"],
            vec!["DLOCK.ACQUIRE", key, "o2", "100", "BIND", "BIND"],
            vec!["DLOCK.SEMAPHORE", key, "o2", "2", "100", "BIND", "FENCE"],
            vec!["DLOCK.ACQUIRE", key, "o2", "100", "WAIT", "10", "extra"],
            vec!["DLOCK.ACQUIRE", key, "o2", "100", "FENCE", "WAIT"],
            vec!["DLOCK.ACQUIRE", key, "o2", "100", ""],
            vec!["DLOCK.RWLOCK", key, "o2", "READ", "100", "WAIT"],
            vec!["DLOCK.RWLOCK", key, "o2", "WRITE", "100", "FENCE", "fence"],
            vec!["DLOCK.RWLOCK", key, "o2", "READ", "100", "NOPE"],
            vec!["DLOCK.RELEASE", key, "o", "BOTH"],
            vec!["DLOCK.RELEASE", key, "o", ""],
            // Past the declared minimum, extra words are a syntax error as for SET k v EX 1 2.
            vec!["DLOCK.RELEASE", key, "o", "READ", "COUNT", "1"],
            vec!["DLOCK.RELEASE", key, "o", "COUNT", "1", "x"],
            vec!["DLOCK.WAITERS", key, "COUNT", "1", "x"],
        ];
        for args in cases {
            expect_err(&mut c, &args, SYNTAX);
        }
    }
}

#[test]
fn lease_and_timeout_errors() {
    let srv = Server::start();
    let mut c = srv.connection();
    setup(&mut c);
    for key in ["L", "free", "S", "LST"] {
        for bad in ["abc", "1.5", "", "0", "-5", "1e3", "0x10", " 5"] {
            expect_err(&mut c, &["DLOCK.ACQUIRE", key, "o2", bad], LEASE_BAD);
            expect_err(&mut c, &["DLOCK.RENEW", key, "o", bad], LEASE_BAD);
            expect_err(&mut c, &["DLOCK.RWLOCK", key, "o2", "READ", bad], LEASE_BAD);
        }
        expect_err(
            &mut c,
            &["DLOCK.ACQUIRE", key, "o2", "315360000001"],
            LEASE_MAX,
        );
        expect_err(
            &mut c,
            &["DLOCK.RENEW", key, "o", "315360000001"],
            LEASE_MAX,
        );
        expect_err(
            &mut c,
            &["DLOCK.RWLOCK", key, "o2", "WRITE", "315360000001"],
            LEASE_MAX,
        );
        // Beyond i64 is too long, not malformed: the message names the maximum.
        for cmd in [
            &["DLOCK.ACQUIRE", key, "o2", "99999999999999999999999"][..],
            &["DLOCK.RENEW", key, "o2", "99999999999999999999999"],
            &["DLOCK.RWLOCK", key, "o2", "READ", "99999999999999999999999"],
        ] {
            expect_err(&mut c, cmd, LEASE_MAX);
        }
        let big = "99999999999999999999999";
        expect_err(
            &mut c,
            &["DLOCK.ACQUIRE", key, "o2", "100", "BIND", big],
            "ERR grace-ms must be at most the lease-ms (100)",
        );
        expect_err(
            &mut c,
            &["DLOCK.ACQUIRE", key, "o2", "100", "LOCKDELAY", big],
            "ERR LOCKDELAY ms must be at most 60000",
        );
        for bad in ["abc", "-1", "1.5", ""] {
            expect_err(
                &mut c,
                &["DLOCK.ACQUIRE", key, "o2", "100", "WAIT", bad],
                TIMEOUT_BAD,
            );
            expect_err(
                &mut c,
                &["DLOCK.RWLOCK", key, "o2", "READ", "100", "WAIT", bad],
                TIMEOUT_BAD,
            );
        }
        expect_err(
            &mut c,
            &["DLOCK.ACQUIRE", key, "o2", "100", "WAIT", "315360000001"],
            TIMEOUT_MAX,
        );
        expect_err(
            &mut c,
            &[
                "DLOCK.ACQUIRE",
                key,
                "o2",
                "100",
                "WAIT",
                "99999999999999999999",
            ],
            TIMEOUT_MAX,
        );
    }
    // the limits themselves are accepted
    assert_eq!(acquire(&mut c, "max", "o", 315_360_000_000), Reply::Int(1));
    assert!(pttl(&mut c, "max") > 315_359_000_000);
    assert_eq!(
        cmd(
            &mut c,
            &["DLOCK.ACQUIRE", "max", "o", "1", "WAIT", "315360000000"]
        ),
        Reply::Int(2)
    );
}

#[test]
fn owner_errors() {
    let srv = Server::start();
    let mut c = srv.connection();
    setup(&mut c);
    let long = "x".repeat(513);
    for key in ["L", "free", "S"] {
        for (owner, msg) in [
            ("", OWNER_LEN),
            (long.as_str(), OWNER_LEN),
            ("mode", OWNER_MODE),
        ] {
            expect_err(&mut c, &["DLOCK.ACQUIRE", key, owner, "100"], msg);
            expect_err(&mut c, &["DLOCK.RWLOCK", key, owner, "READ", "100"], msg);
            expect_err(&mut c, &["DLOCK.RWLOCK", key, owner, "WRITE", "100"], msg);
            expect_err(&mut c, &["DLOCK.RELEASE", key, owner], msg);
            expect_err(&mut c, &["DLOCK.RELEASE", key, owner, "READ"], msg);
            expect_err(&mut c, &["DLOCK.RENEW", key, owner, "100"], msg);
        }
    }
    // 512 bytes, binary owner are fine
    let max = "y".repeat(512);
    assert_eq!(acquire(&mut c, "ok", &max, 10_000), Reply::Int(1));
    assert_eq!(release(&mut c, "ok", &max), Reply::Int(1));
    let bin = vec![0u8, 255, 10, 13, b'{', 0];
    let r = cmd_bytes(
        &mut c,
        &[
            b"DLOCK.ACQUIRE".to_vec(),
            b"bin".to_vec(),
            bin.clone(),
            b"10000".to_vec(),
        ],
    );
    assert_eq!(r, Reply::Int(1));
    let fields: Vec<Vec<u8>> = redis::cmd("HKEYS").arg("bin").query(&mut c).unwrap();
    assert_eq!(fields, vec![bin.clone()], "binary-safe owner field");
    let r = cmd_bytes(&mut c, &[b"DLOCK.RELEASE".to_vec(), b"bin".to_vec(), bin]);
    assert_eq!(r, Reply::Int(1));
}

#[test]
fn rwlock_mode_word_errors() {
    let srv = Server::start();
    let mut c = srv.connection();
    setup(&mut c);
    for key in ["free", "S"] {
        for w in ["READS", "", "RW", "EXCLUSIVE", "100"] {
            expect_err(&mut c, &["DLOCK.RWLOCK", key, "o", w, "100"], MODE_WORD);
        }
    }
}

#[test]
fn wrongtype_for_every_command() {
    let srv = Server::start();
    let mut c = srv.connection();
    setup(&mut c);
    for key in ["S", "LST", "H", "H0", "HNEG", "HM", "SET"] {
        let cases: Vec<Vec<&str>> = vec![
            vec!["DLOCK.ACQUIRE", key, "o", "100"],
            vec!["DLOCK.ACQUIRE", key, "o", "100", "WAIT", "100"],
            vec!["DLOCK.ACQUIRE", key, "o", "100", "FENCE"],
            vec!["DLOCK.RWLOCK", key, "o", "READ", "100"],
            vec!["DLOCK.RWLOCK", key, "o", "WRITE", "100", "WAIT", "0"],
            vec!["DLOCK.RELEASE", key, "o"],
            vec!["DLOCK.RELEASE", key, "f"],
            vec!["DLOCK.RELEASE", key, "o", "READ"],
            vec!["DLOCK.RENEW", key, "o", "100"],
            vec!["DLOCK.INFO", key],
        ];
        for args in cases {
            expect_err(&mut c, &args, WRONGTYPE);
        }
    }
    // a mode word on an exclusive lock
    expect_err(&mut c, &["DLOCK.RELEASE", "L", "o", "READ"], WRONGTYPE);
    expect_err(&mut c, &["DLOCK.RELEASE", "L", "o", "WRITE"], WRONGTYPE);
    assert!(
        !exists(&mut c, &slot_fence_key("S")),
        "no fence counter created for a WRONGTYPE key"
    );
}

#[test]
fn argument_errors_win_over_wrongtype() {
    let srv = Server::start();
    let mut c = srv.connection();
    setup(&mut c);
    for key in ["S", "LST", "H"] {
        expect_err(&mut c, &["DLOCK.ACQUIRE", key, "o", "-1"], LEASE_BAD);
        expect_err(&mut c, &["DLOCK.ACQUIRE", key, "o", "100", "BOGUS"], SYNTAX);
        expect_err(&mut c, &["DLOCK.ACQUIRE", key, "", "100"], OWNER_LEN);
        expect_err(&mut c, &["DLOCK.ACQUIRE", key, "mode", "100"], OWNER_MODE);
        expect_err(
            &mut c,
            &["DLOCK.ACQUIRE", key, "o", "100", "WAIT", "x"],
            TIMEOUT_BAD,
        );
        expect_err(&mut c, &["DLOCK.RENEW", key, "o", "0"], LEASE_BAD);
        expect_err(&mut c, &["DLOCK.RWLOCK", key, "o", "UP", "100"], MODE_WORD);
        expect_err(&mut c, &["DLOCK.RELEASE", key, "o", "X"], SYNTAX);
        expect_err(&mut c, &["DLOCK.RELEASE", key, "mode"], OWNER_MODE);
        expect_err(&mut c, &["DLOCK.INFO", key, "x"], ARITY);
    }
}

/// A command whose reply may block (it has a WAIT word): give it a short read time-out.
/// A well-formed command (valid arity and values, random options), sometimes with one word
/// replaced by garbage: exercises the lock logic, not only the parser.
fn fuzz_valid(rng: &mut impl Rng) -> Vec<Vec<u8>> {
    let keys = ["fz", "fz2", "{t}x", "rwz"];
    let owners = ["o1", "o2", "o3", "o4"];
    let leases = ["1", "20", "50", "1000", "5000"];
    let timeouts = ["1", "5", "20"];
    let k = keys[rng.gen_range(0..keys.len())];
    let o = owners[rng.gen_range(0..owners.len())];
    let l = leases[rng.gen_range(0..leases.len())];
    let mut v: Vec<String> = match rng.gen_range(0..5) {
        0 => vec!["DLOCK.ACQUIRE".into(), k.into(), o.into(), l.into()],
        1 => {
            let m = if rng.gen() { "READ" } else { "WRITE" };
            vec![
                "DLOCK.RWLOCK".into(),
                k.into(),
                o.into(),
                m.into(),
                l.into(),
            ]
        }
        2 => {
            let mut v = vec!["DLOCK.RELEASE".into(), k.into(), o.into()];
            match rng.gen_range(0..3) {
                0 => v.push("READ".into()),
                1 => v.push("WRITE".into()),
                _ => {}
            }
            v
        }
        3 => vec!["DLOCK.RENEW".into(), k.into(), o.into(), l.into()],
        _ => vec!["DLOCK.INFO".into(), k.into()],
    };
    if v[0] == "DLOCK.ACQUIRE" || v[0] == "DLOCK.RWLOCK" {
        let mut opts: Vec<Vec<String>> = vec![];
        if rng.gen() {
            opts.push(vec![
                "WAIT".into(),
                timeouts[rng.gen_range(0..timeouts.len())].into(),
            ]);
        }
        if rng.gen() {
            opts.push(vec!["FENCE".into()]);
        }
        if rng.gen() {
            opts.reverse();
        }
        v.extend(opts.into_iter().flatten());
    }
    let mut v: Vec<Vec<u8>> = v.into_iter().map(String::into_bytes).collect();
    if rng.gen_range(0..5) == 0 {
        let i = rng.gen_range(1..v.len());
        v[i] = (0..rng.gen_range(0..12)).map(|_| rng.gen()).collect();
    }
    v
}

fn fuzz_words(rng: &mut impl Rng) -> Vec<Vec<u8>> {
    const CMDS: [&str; 7] = [
        "DLOCK.ACQUIRE",
        "DLOCK.RELEASE",
        "DLOCK.RENEW",
        "DLOCK.RWLOCK",
        "DLOCK.INFO",
        "dlock.acquire",
        "dlock.rwlock",
    ];
    const WORDS: [&str; 40] = [
        "fz",
        "fz",
        "fz2",
        "{t}x",
        "S",
        "H",
        "o1",
        "o2",
        "o1",
        "mode",
        "",
        "READ",
        "WRITE",
        "read",
        "write",
        "WAIT",
        "wait",
        "FENCE",
        "fence",
        "0",
        "1",
        "5",
        "30",
        "100",
        "250",
        "-1",
        "315360000000",
        "315360000001",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "18446744073709551616",
        "1e3",
        "0x10",
        " 1",
        "+5",
        "1.5",
        "nan",
        "BOTH",
        "\u{0}",
    ];
    let n = rng.gen_range(0..9);
    let mut v = vec![CMDS[rng.gen_range(0..CMDS.len())].as_bytes().to_vec()];
    for i in 0..n {
        let w: Vec<u8> = match rng.gen_range(0..10) {
            0 => (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect(),
            1 if i == 1 => "z".repeat(rng.gen_range(500..530)).into_bytes(),
            2 => rng.gen_range(-5i64..2000).to_string().into_bytes(),
            _ => WORDS[rng.gen_range(0..WORDS.len())].as_bytes().to_vec(),
        };
        v.push(w);
    }
    v
}

#[test]
fn randomized_argument_fuzz() {
    let srv = Server::start();
    let mut ctl = srv.connection();
    let seed: u64 = std::env::var("DLOCK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("fuzz seed {seed} (DLOCK_FUZZ_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let iterations = 4000;
    let mut con = srv.connection();
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let (mut ok, mut errs, mut blocked) = (0, 0, 0);
    for i in 0..iterations {
        if i % 500 == 0 {
            redis::cmd("SET")
                .arg("S")
                .arg("v")
                .query::<()>(&mut ctl)
                .unwrap();
            redis::cmd("HSET")
                .arg("H")
                .arg("f")
                .arg("x")
                .query::<()>(&mut ctl)
                .unwrap();
        }
        if i % 97 == 0 {
            let _: i64 = redis::cmd("DEL")
                .arg("fz")
                .arg("fz2")
                .arg("{t}x")
                .query(&mut ctl)
                .unwrap();
        }
        let words = if rng.gen() {
            fuzz_valid(&mut rng)
        } else {
            fuzz_words(&mut rng)
        };
        match cmd_bytes(&mut con, &words) {
            Reply::Io(e) => {
                // a WAIT that blocks is legitimate; anything else is a broken server
                let has_wait = words.iter().any(|w| w.eq_ignore_ascii_case(b"WAIT"));
                assert!(
                    has_wait,
                    "no reply to {:?} (seed {seed}): {e}",
                    words
                        .iter()
                        .map(|w| String::from_utf8_lossy(w).into_owned())
                        .collect::<Vec<_>>()
                );
                blocked += 1;
                ping(&mut ctl);
                con = srv.connection(); // drop the blocked connection (a disconnecting waiter)
                con.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
            }
            Reply::Err(_) => errs += 1,
            _ => ok += 1,
        }
    }
    eprintln!("fuzz: {ok} ok, {errs} errors, {blocked} blocked");
    assert!(
        ok > 100 && errs > 100,
        "fuzz should hit both paths: {ok} ok / {errs} errors"
    );
    ping(&mut ctl);
    let info: String = redis::cmd("INFO").query(&mut ctl).unwrap();
    assert!(info.contains("redis_version"));
    let d = info_dlock(&mut ctl);
    assert!(
        d.contains_key("dlock_grants"),
        "INFO dlock after fuzz: {d:?}"
    );
    drop(con);
    wait_for(5 * SEC, "all fuzz waiters gone", || {
        (info_dlock(&mut ctl)["dlock_waiters"] == 0).then_some(())
    });
    for k in ["fz", "fz2", "{t}x", "rwz"] {
        let r = cmd(&mut ctl, &["DLOCK.INFO", k]);
        assert!(
            matches!(r, Reply::Arr(_)),
            "DLOCK.INFO {k} after fuzz: {r:?}"
        );
    }
}

#[test]
fn bad_module_arguments_fail_the_load() {
    let cases: [(&[&str], &str); 6] = [
        (&["publish", "maybe"], "publish"),
        (&["max-waiters", "-1"], "max-waiters"),
        (&["max-waiters", "abc"], "max-waiters"),
        (&["max-waiters-per-key", "1x"], "max-waiters-per-key"),
        (&["bogus-option", "1"], "bogus-option"),
        (&["channel-prefix"], "channel-prefix"),
    ];
    for (args, word) in cases {
        match Server::builder()
            .module_args(args.iter().copied())
            .try_start()
        {
            Ok(_) => panic!("module loaded with bad arguments {args:?}"),
            Err(log) => assert!(
                log.to_lowercase().contains(word),
                "the log should name {word:?} for {args:?}:\n{log}"
            ),
        }
    }
    // and good ones load (case-insensitive values, 0 = no limit)
    let srv = Server::builder()
        .module_args([
            "channel-prefix",
            "my_prefix",
            "publish",
            "no",
            "max-waiters-per-key",
            "0",
            "max-waiters",
            "0",
        ])
        .start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "o", 1000), Reply::Int(1));
}
