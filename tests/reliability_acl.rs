//! Reliability (issue #7), promise 7: ACL users restricted by key pattern or by command.
//!
//! DLOCK.* declare the lock key as their key, so `~app:*` confines a user's locking, releasing,
//! renewing and inspecting to `app:*` (NOPERM elsewhere, nothing changes); `-dlock.release`
//! forbids one command. The fencing counter and the unlock PUBLISH are the module's own and
//! are not checked against the caller's key and channel ACL (docs/BEHAVIOUR.md, *Toward the rest of Redis*).

use crate::common;

use std::time::Duration;

use common::*;

fn login(srv: &Server, user: &str) -> Connection {
    let mut c = srv.connection();
    let r = cmd(&mut c, &["AUTH", user, "pw"]);
    assert_eq!(r, Reply::Status("OK".into()), "AUTH {user}");
    c
}

#[track_caller]
fn assert_noperm(r: &Reply, what: &str) {
    match r {
        Reply::Err(e) if e.starts_with("NOPERM") => {}
        other => panic!("{what}: expected NOPERM, got {other:?}"),
    }
}

#[test]
fn key_pattern_confines_every_command() {
    let srv = Server::start();
    let mut admin = srv.connection();
    // Module commands have no ACL category on Redis 7.0: +@all covers them.
    let r = cmd(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">pw",
            "~app:*",
            "+@all",
            "resetchannels",
        ],
    );
    assert_eq!(r, Reply::Status("OK".into()));
    // Someone else's lock outside the pattern.
    assert_eq!(
        acquire(&mut admin, "other:1", "boss", 60_000),
        Reply::Int(1)
    );
    let before = hgetall(&mut admin, "other:1");
    let mut app = login(&srv, "app");

    let outside: [&[&str]; 8] = [
        &["DLOCK.ACQUIRE", "other:1", "boss", "60000"],
        &["DLOCK.ACQUIRE", "other:2", "me", "60000"],
        &["DLOCK.ACQUIRE", "other:1", "me", "60000", "WAIT", "0"],
        &["DLOCK.RWLOCK", "other:3", "me", "READ", "60000"],
        &["DLOCK.RELEASE", "other:1", "boss"],
        &["DLOCK.RENEW", "other:1", "boss", "1"],
        &["DLOCK.INFO", "other:1"],
        &["DLOCK.ACQUIRE", "dlock:fence:{app:1}", "me", "1000"],
    ];
    for args in outside {
        assert_noperm(&cmd(&mut app, args), &format!("{args:?}"));
    }
    // Nothing changed outside.
    assert_eq!(hgetall(&mut admin, "other:1"), before);
    assert_pttl_about(&mut admin, "other:1", 60_000);
    assert!(!exists(&mut admin, "other:2") && !exists(&mut admin, "other:3"));
    assert_eq!(waiters(&mut admin, "other:1"), 0);

    // Inside the pattern everything works, FENCE included (its counter key is internal).
    assert_eq!(
        cmd(
            &mut app,
            &["DLOCK.ACQUIRE", "app:1", "me", "60000", "FENCE"]
        ),
        Reply::Arr(vec![Reply::Int(1), Reply::Int(1)])
    );
    assert_eq!(renew(&mut app, "app:1", "me", 30_000), Reply::Int(1));
    assert_eq!(
        dinfo_field(&mut app, "app:1", "holders").arr()[0].arr()[0],
        Reply::Bulk("me".into())
    );
    assert_eq!(
        cmd(&mut app, &["DLOCK.RWLOCK", "app:rw", "me", "WRITE", "1000"]),
        Reply::Int(1)
    );
    assert_eq!(
        cmd(&mut app, &["DLOCK.RELEASE", "app:rw", "me"]),
        Reply::Int(1)
    );
    // The release publishes on the unlock channel although the user has no channel permission.
    let mut sub = srv.client().get_connection().unwrap();
    let mut ps = sub.as_pubsub();
    ps.subscribe(channel("app:1")).unwrap();
    ps.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(release(&mut app, "app:1", "me"), Reply::Int(1));
    let msg = ps.get_message().expect("unlock message");
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    // A waiter of the restricted user is handed the lock on release.
    assert_eq!(acquire(&mut app, "app:2", "me", 60_000), Reply::Int(1));
    let mut app2 = login(&srv, "app");
    let waiter = std::thread::spawn(move || {
        cmd(
            &mut app2,
            &["DLOCK.ACQUIRE", "app:2", "you", "60000", "WAIT", "0"],
        )
    });
    wait_waiters(&mut admin, "app:2", 1);
    assert_eq!(release(&mut app, "app:2", "me"), Reply::Int(1));
    assert_eq!(waiter.join().unwrap(), Reply::Int(1));
    assert_eq!(hgetall(&mut admin, "app:2"), map(&[("you", "1")]));
    assert!(!exists(&mut admin, "app:1"));
    assert_eq!(
        get_int(&mut admin, &slot_fence_key("app:1")),
        Some(1),
        "fence counter written although outside ~app:*"
    );
}

#[test]
fn command_restrictions() {
    let srv = Server::start();
    let mut admin = srv.connection();
    for args in [
        &[
            "ACL",
            "SETUSER",
            "norelease",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-dlock.release",
        ][..],
        &[
            "ACL",
            "SETUSER",
            "lockonly",
            "on",
            ">pw",
            "~*",
            "+dlock.acquire",
            "+dlock.info",
        ][..],
        &[
            "ACL",
            "SETUSER",
            "noinfo",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-dlock.info",
        ][..],
    ] {
        assert_eq!(cmd(&mut admin, args), Reply::Status("OK".into()));
    }

    let mut nr = login(&srv, "norelease");
    assert_eq!(acquire(&mut nr, "k1", "nr", 60_000), Reply::Int(1));
    assert_eq!(renew(&mut nr, "k1", "nr", 60_000), Reply::Int(1));
    assert_noperm(&release(&mut nr, "k1", "nr"), "norelease: RELEASE");
    assert_noperm(
        &cmd(&mut nr, &["DLOCK.RELEASE", "k1", "nr", "READ"]),
        "norelease: RELEASE READ",
    );
    assert_eq!(hgetall(&mut admin, "k1"), map(&[("nr", "1")]), "still held");
    assert_eq!(release(&mut admin, "k1", "nr"), Reply::Int(1), "admin may");

    let mut lo = login(&srv, "lockonly");
    assert_eq!(acquire(&mut lo, "k2", "lo", 60_000), Reply::Int(1));
    assert_eq!(
        dinfo_field(&mut lo, "k2", "kind"),
        Reply::Bulk("lock".into())
    );
    assert_noperm(&renew(&mut lo, "k2", "lo", 1), "lockonly: RENEW");
    assert_noperm(&release(&mut lo, "k2", "lo"), "lockonly: RELEASE");
    assert_noperm(
        &rwlock(&mut lo, "k3", "lo", "READ", 1000),
        "lockonly: RWLOCK",
    );
    assert_noperm(&cmd(&mut lo, &["DEL", "k2"]), "lockonly: DEL");
    assert_pttl_about(&mut admin, "k2", 60_000);
    assert!(!exists(&mut admin, "k3"));

    let mut ni = login(&srv, "noinfo");
    assert_noperm(&cmd(&mut ni, &["DLOCK.INFO", "k2"]), "noinfo: INFO");
    assert!(
        acquire(&mut ni, "k2", "ni", 1000).is_nil(),
        "noinfo may try"
    );
}
