//! Building a client: refused settings, honest connection errors, backend detection for
//! restricted ACL users, and `Duration::MAX` accepted everywhere as "no limit".

use crate::support;

use std::time::Duration;

use dlock_client::{Backend, Client, ConnectReason, Error, MultiLock, RedLock};
use support::*;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_port_fails_fast_naming_address_and_cause() {
    let port = dlock_testutil::free_port();
    let t = Instant::now();
    let e = Client::builder(format!("redis://127.0.0.1:{port}/"))
        .build()
        .await
        .unwrap_err();
    let el = t.elapsed();
    assert!(el < Duration::from_secs(1), "took {el:?}");
    let text = e.to_string();
    assert!(
        matches!(&e, Error::Connect { reason: ConnectReason::Refused, addr, .. } if addr.contains(&port.to_string())),
        "{e:?}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{port}")) && text.contains("refused"),
        "{text}"
    );
    assert!(e.is_connection());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_host_names_dns() {
    let e = Client::builder("redis://no-such-host.invalid:6390/")
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Connect { reason: ConnectReason::Dns, addr, .. } if addr.contains("no-such-host.invalid")),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_settings_refused_by_build() {
    let s = server(Backend::Native);
    let plain = server(Backend::Script);
    let config_err = |r: dlock_client::Result<Client>, what: &str| match r {
        Err(Error::Config(m)) => m,
        other => panic!("{what}: expected a configuration error, got {other:?}"),
    };
    config_err(
        Client::builder(s.url()).lease(Duration::ZERO).build().await,
        "lease 0",
    );
    let m = config_err(
        Client::builder(s.url())
            .lease(Duration::from_secs(1))
            .renew_interval(Duration::from_secs(1))
            .build()
            .await,
        "renew = lease",
    );
    assert!(m.contains("renew"), "{m}");
    config_err(
        Client::builder(s.url())
            .lease(Duration::from_secs(1))
            .renew_interval(Duration::from_secs(5))
            .build()
            .await,
        "renew > lease",
    );
    config_err(
        Client::builder(s.url())
            .response_timeout(Duration::ZERO)
            .build()
            .await,
        "response time-out 0",
    );
    config_err(
        Client::builder(s.url())
            .min_replicas(1, Duration::from_secs(10))
            .build()
            .await,
        "min_replicas time-out beyond the response time-out",
    );
    let m = config_err(
        Client::builder(plain.url())
            .backend(Backend::Native)
            .build()
            .await,
        "Backend::Native without the module",
    );
    assert!(m.contains("module"), "{m}");
    // A zero lease on a call is refused too (not sent as 1 ms).
    let c = client(&s, Backend::Native).await;
    assert!(matches!(
        c.lock("z")
            .try_acquire_for(Duration::ZERO, Some(Duration::ZERO))
            .await,
        Err(Error::Config(_))
    ));
    assert!(matches!(
        c.lock("z").acquire_with_lease(Duration::ZERO).await,
        Err(Error::Config(_))
    ));
}

/// A user allowed everything but admin commands (no MODULE LIST) still gets the native
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_without_admin_gets_native() {
    let s = server(Backend::Native);
    let mut r = raw(&s).await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-@admin",
        ])
        .query_async(&mut r)
        .await
        .unwrap();
    let url = format!("redis://app:secret@127.0.0.1:{}/", s.port());
    let c = Client::builder(url.as_str()).build().await.unwrap();
    assert!(c.is_native(), "auto-detection fell back to scripts");
    let g = c.lock("acl").fenced().acquire().await.unwrap();
    assert!(g.fencing_token().is_some());
    g.release().await.unwrap();
    // The same user on a plain server gets the script backend.
    let plain = server(Backend::Script);
    let mut pr = raw(&plain).await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-@admin",
        ])
        .query_async(&mut pr)
        .await
        .unwrap();
    let url = format!("redis://app:secret@127.0.0.1:{}/", plain.port());
    let c = Client::builder(url.as_str()).build().await.unwrap();
    assert!(!c.is_native());
    // A wrong password names the cause.
    let url = format!("redis://app:wrong@127.0.0.1:{}/", s.port());
    let e = Client::builder(url.as_str()).build().await.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Connect {
                reason: ConnectReason::Auth,
                ..
            }
        ),
        "{e:?}"
    );
}

async fn duration_max_means_no_limit(b: Backend) {
    let s = server(b);
    let c = builder(&s, b)
        .lease(Duration::MAX)
        .renew_interval(Duration::from_millis(100))
        .response_timeout(Duration::MAX)
        .build()
        .await
        .unwrap();
    let mut r = raw(&s).await;
    let g = c
        .lock("m")
        .try_acquire_for(Duration::MAX, Some(Duration::MAX))
        .await
        .unwrap()
        .expect("free");
    assert!(
        pttl(&mut r, "m").await > 1_000_000_000,
        "lease is the maximum"
    );
    // A wait without limit on a held lock: still waiting after a while, no panic.
    let other = c.lock("m");
    assert!(tokio::time::timeout(
        Duration::from_millis(300),
        other.try_acquire_for(Duration::MAX, None)
    )
    .await
    .is_err());
    g.release().await.unwrap();
    let w = c.lock("m").acquire().await.unwrap(); // watchdog with the maximum lease
    w.release().await.unwrap();
    let m = MultiLock::new([c.lock("m1"), c.lock("m2")]);
    let g = m
        .try_acquire_for(Duration::MAX, Some(Duration::MAX))
        .await
        .unwrap()
        .expect("free");
    g.release().await.unwrap();
    let red = RedLock::on(std::slice::from_ref(&c), "r")
        .node_timeout(Duration::MAX)
        .retry_delay(Duration::MAX);
    let g = red
        .try_acquire_for(Duration::MAX, Duration::MAX)
        .await
        .unwrap()
        .expect("free");
    g.release().await.unwrap();
    assert!(red.drift(Duration::MAX) > Duration::ZERO);
}

both_backends!(duration_max_means_no_limit);
