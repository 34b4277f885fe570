//! What the server says about the DLOCK commands, as for a core command: COMMAND DOCS
//! (summary, since, complexity, arguments with tokens), COMMAND INFO (arity, key spec with its
//! access flags, ACL categories), and ACL users granted by category.

use crate::common;
use common::*;
use dlock_testutil::{server_version, skip};

/// Every command with the arity it must report (command name included; negative: at least).
/// Written here, not taken from the module, so a wrong table fails.
const ARITY: &[(&str, i64)] = &[
    ("dlock.acquire", -4),
    ("dlock.rwlock", -5),
    ("dlock.semaphore", -5),
    ("dlock.release", -3),
    ("dlock.renew", -4),
    ("dlock.info", 2),
    ("dlock.waiters", -2),
    ("dlock.redisson", -3),
];

/// The command the module renames Redisson's scripts to: EVALSHA's shape (script, numkeys,
/// keys...), its keys found from numkeys, not from fixed positions.
const SCRIPT_COMMAND: &str = "dlock.redisson";

/// A flat `[k1, v1, k2, v2...]` array (RESP2) or a map, as (key, value) pairs.
fn pairs(r: &Reply) -> Vec<(String, Reply)> {
    match r {
        Reply::Map(m) => m.iter().map(|(k, v)| (k.str(), v.clone())).collect(),
        Reply::Arr(a) => a.chunks(2).map(|p| (p[0].str(), p[1].clone())).collect(),
        other => panic!("expected a map, got {other:?}"),
    }
}

fn field(r: &Reply, name: &str) -> Option<Reply> {
    pairs(r)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// The commands the loaded module registered.
fn module_commands(c: &mut Connection) -> Vec<String> {
    let list = cmd(c, &["COMMAND", "LIST", "FILTERBY", "MODULE", "dlock"]).arr();
    let mut names: Vec<String> = list.iter().map(Reply::str).collect();
    names.sort();
    names
}

/// COMMAND INFO of one command: [name, arity, flags, first, last, step, acl, tips, key specs, subs].
fn command_info(c: &mut Connection, name: &str) -> Vec<Reply> {
    let info = cmd(c, &["COMMAND", "INFO", name]).arr();
    assert_eq!(info.len(), 1, "{name}");
    info[0].arr()
}

#[test]
fn every_command_has_docs_arity_and_a_key_spec() {
    let srv = Server::start();
    let mut c = srv.connection();
    let names = module_commands(&mut c);
    assert!(names.contains(&"dlock.acquire".to_string()), "{names:?}");
    for name in &names {
        let expected = ARITY
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| {
                panic!("{name}: add it to ARITY (and declare its Command::SPEC beside its handler)")
            })
            .1;
        let info = command_info(&mut c, name);
        assert_eq!(info[1], Reply::Int(expected), "{name}: arity");
        let script = name == SCRIPT_COMMAND;
        assert_eq!(
            (info[3].int(), info[4].int(), info[5].int()),
            if script { (0, 0, 0) } else { (1, 1, 1) },
            "{name}: first/last/step key"
        );
        let specs = info[8].arr();
        assert_eq!(
            specs.len(),
            1,
            "{name}: one key spec (the fence key is internal)"
        );
        let flags: Vec<String> = field(&specs[0], "flags")
            .unwrap()
            .arr()
            .iter()
            .map(Reply::str)
            .collect();
        let readonly = name == "dlock.info" || name == "dlock.waiters";
        if readonly {
            assert!(flags.contains(&"RO".into()), "{name}: {flags:?}");
            assert!(flags.contains(&"access".into()), "{name}: {flags:?}");
        } else {
            assert!(flags.contains(&"RW".into()), "{name}: {flags:?}");
            assert!(
                ["update", "insert", "delete"]
                    .iter()
                    .any(|f| flags.contains(&f.to_string())),
                "{name}: a writer says how it writes: {flags:?}"
            );
        }

        let docs = cmd(&mut c, &["COMMAND", "DOCS", name]);
        let doc = field(&docs, name).unwrap_or_else(|| panic!("{name}: no docs {docs:?}"));
        for f in ["summary", "since", "complexity"] {
            let v = field(&doc, f).unwrap_or_else(|| panic!("{name}: no {f} in {doc:?}"));
            assert!(!v.str().is_empty(), "{name}: empty {f}");
        }
        assert_eq!(field(&doc, "module").map(|m| m.str()), Some("dlock".into()));
        let args = field(&doc, "arguments")
            .unwrap_or_else(|| panic!("{name}: no arguments"))
            .arr();
        let first = &args[usize::from(script) * 2];
        assert_eq!(field(first, "name").unwrap().str(), "key", "{name}");
        assert_eq!(field(first, "type").unwrap().str(), "key", "{name}");
    }
}

#[test]
fn arguments_carry_their_tokens_and_optional_flags() {
    let srv = Server::start();
    let mut c = srv.connection();
    let docs = cmd(&mut c, &["COMMAND", "DOCS", "dlock.acquire"]);
    let args = field(&field(&docs, "dlock.acquire").unwrap(), "arguments")
        .unwrap()
        .arr();
    let names: Vec<String> = args
        .iter()
        .map(|a| field(a, "name").unwrap().str())
        .collect();
    assert_eq!(
        names,
        [
            "key",
            "owner",
            "lease-ms",
            "timeout-ms",
            "fence",
            "bind",
            "lock-delay-ms"
        ],
        "in the order of the syntax"
    );
    assert_eq!(field(&args[2], "type").unwrap().str(), "integer");
    assert_eq!(field(&args[3], "token").unwrap().str(), "WAIT");
    assert_eq!(field(&args[4], "type").unwrap().str(), "pure-token");
    assert_eq!(field(&args[4], "token").unwrap().str(), "FENCE");
    for a in &args[3..] {
        let flags = field(a, "flags").expect("optional flag").arr();
        assert!(flags.contains(&Reply::Status("optional".into())), "{a:?}");
    }
    assert_eq!(field(&args[1], "flags"), None, "owner is required");
    // `[BIND [grace-ms]]`: a block after the token, its grace optional.
    assert_eq!(field(&args[5], "type").unwrap().str(), "block");
    assert_eq!(field(&args[5], "token").unwrap().str(), "BIND");
    let grace = &field(&args[5], "arguments").unwrap().arr()[0];
    assert_eq!(field(grace, "name").unwrap().str(), "grace-ms");
    assert_eq!(field(grace, "type").unwrap().str(), "integer");
    let flags = field(grace, "flags").expect("optional flag").arr();
    assert!(
        flags.contains(&Reply::Status("optional".into())),
        "{grace:?}"
    );

    let docs = cmd(&mut c, &["COMMAND", "DOCS", "dlock.rwlock"]);
    let args = field(&field(&docs, "dlock.rwlock").unwrap(), "arguments")
        .unwrap()
        .arr();
    assert_eq!(field(&args[2], "type").unwrap().str(), "oneof");
    let modes: Vec<String> = field(&args[2], "arguments")
        .unwrap()
        .arr()
        .iter()
        .map(|a| field(a, "token").unwrap().str())
        .collect();
    assert_eq!(modes, ["READ", "WRITE"]);

    // Redis itself now refuses a call with too few words, before the module runs.
    assert_err(
        &cmd(&mut c, &["DLOCK.RENEW", "k", "o"]),
        "ERR wrong number of arguments for 'dlock.renew' command",
    );
}

/// ACL categories on the DLOCK commands.
fn categories(c: &mut Connection, name: &str) -> Vec<String> {
    command_info(c, name)[6]
        .arr()
        .iter()
        .map(Reply::str)
        .collect()
}

#[test]
fn acl_categories_grant_writers_and_readers() {
    let srv = Server::start();
    let mut admin = srv.connection();
    let version = server_version();
    if !version.has_module_acl_categories() {
        // Redis 7.0 cannot give module commands categories: they belong to none.
        assert_eq!(
            categories(&mut admin, "dlock.acquire"),
            Vec::<String>::new()
        );
        skip("Redis 7.0 has no RedisModule_SetCommandACLCategories (module commands have no ACL categories)");
        return;
    }
    assert_eq!(
        categories(&mut admin, "dlock.acquire"),
        ["@write", "@slow", "@blocking"]
    );
    assert_eq!(categories(&mut admin, "dlock.release"), ["@write", "@fast"]);
    assert_eq!(categories(&mut admin, "dlock.renew"), ["@write", "@fast"]);
    assert_eq!(categories(&mut admin, "dlock.info"), ["@read", "@fast"]);

    for (user, rules) in [
        ("writer", &["+@write", "+@read"][..]),
        ("reader", &["+@read"][..]),
    ] {
        let mut args = vec!["ACL", "SETUSER", user, "on", "nopass", "~*", "&*"];
        args.extend_from_slice(rules);
        assert_eq!(cmd(&mut admin, &args), Reply::Status("OK".into()));
    }
    let login = |user: &str| {
        let mut c = srv.connection();
        assert_eq!(
            cmd(&mut c, &["AUTH", user, "x"]),
            Reply::Status("OK".into())
        );
        c
    };

    let mut writer = login("writer");
    assert_eq!(acquire(&mut writer, "k", "w", 60_000), Reply::Int(1));
    assert_eq!(renew(&mut writer, "k", "w", 60_000), Reply::Int(1));
    assert_eq!(
        rwlock(&mut writer, "rw", "w", "READ", 60_000),
        Reply::Int(1)
    );
    assert_eq!(dinfo_field(&mut writer, "k", "kind").str(), "lock");
    assert_eq!(release(&mut writer, "k", "w"), Reply::Int(1));
    assert_eq!(acquire(&mut writer, "k", "w", 60_000), Reply::Int(1));

    let mut reader = login("reader");
    assert_eq!(dinfo_field(&mut reader, "k", "kind").str(), "lock");
    for args in [
        vec!["DLOCK.ACQUIRE", "k2", "r", "1000"],
        vec!["DLOCK.RWLOCK", "rw", "r", "READ", "1000"],
        vec!["DLOCK.RENEW", "k", "w", "1000"],
        vec!["DLOCK.RELEASE", "k", "w"],
    ] {
        assert_err(&cmd(&mut reader, &args), "NOPERM");
    }
    assert_eq!(
        hgetall(&mut admin, "k"),
        map(&[("w", "1")]),
        "the reader changed nothing"
    );
    assert!(!exists(&mut admin, "k2"));
}

/// `MODULE LIST` shows the crate's version as modules number theirs: 0.1.0 is `ver 100`.
#[test]
fn module_list_version_is_the_crate_version() {
    let srv = Server::start();
    let mut c = srv.connection();
    let expected = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse::<i64>().unwrap())
        .fold(0, |acc, p| acc * 100 + p);
    let modules = cmd(&mut c, &["MODULE", "LIST"]).arr();
    let dlock = modules
        .iter()
        .map(pairs)
        .find(|m| m.iter().any(|(k, v)| k == "name" && v.str() == "dlock"))
        .expect("dlock in MODULE LIST");
    let ver = dlock.iter().find(|(k, _)| k == "ver").unwrap().1.int();
    assert_eq!(
        ver,
        expected,
        "MODULE LIST ver against {}",
        env!("CARGO_PKG_VERSION")
    );
}
