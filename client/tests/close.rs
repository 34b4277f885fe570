//! The client contract's rules 6 and 7 (docs/CLIENTS.md) seen from the Rust API: every call
//! is bounded when the server hangs (SIGSTOP of a server this test started), and closed is
//! closed (`Error::Closed`, `LostReason::Closed`, every connection ended).

use std::process::Command;
use std::time::{Duration, Instant};

use dlock_client::{Backend, Client, ConnectReason, Error, LostReason};

use crate::support::{self, exists, raw, server, wait_for, Server};

/// How many connections the server lists (`CLIENT LIST`), the asking one not counted.
fn clients_of(s: &Server) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut s.connection())
        .expect("CLIENT LIST");
    list.lines().count() - 1
}

async fn close_ends_everything(backend: Backend) {
    let srv = server(backend);
    let mut r = raw(&srv).await;
    let before = clients_of(&srv);
    let client = support::client(&srv, backend).await;
    let held = client.lock("k").acquire().await.expect("acquire");
    let waiting = {
        let lock = client.lock("k");
        tokio::spawn(async move { lock.acquire().await })
    };
    wait_for(Duration::from_secs(5), "the second acquire to wait", || {
        (clients_of(&srv) > before + 2).then_some(())
    });
    let t0 = Instant::now();
    client.close().await;
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "close sends nothing"
    );
    // The pending wait ends with Closed.
    let pending = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("the wait ended")
        .expect("task");
    assert!(matches!(pending, Err(Error::Closed)), "{pending:?}");
    // Holds are reported lost; every call answers Closed; closing again is harmless.
    assert_eq!(held.lost().check(), Some(LostReason::Closed));
    assert!(client.is_closed());
    let again = client.lock("k2").try_acquire().await;
    assert!(matches!(again, Err(Error::Closed)), "{again:?}");
    assert!(matches!(held.renew().await, Err(Error::Closed)));
    assert!(matches!(client.connection(), Err(Error::Closed)));
    client.close().await;
    assert!(matches!(held.release().await, Err(Error::Closed)));
    // Every connection the client opened is gone from the server's list.
    let end = Instant::now() + Duration::from_secs(5);
    while clients_of(&srv) != before {
        if Instant::now() > end {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut srv.connection())
                .expect("CLIENT LIST");
            panic!("connections left open ({before} before):\n{list}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Nothing renews the hold any more: the server lets it lapse.
    let end = Instant::now() + Duration::from_secs(5);
    while exists(&mut r, "k").await {
        assert!(
            Instant::now() < end,
            "the closed client's hold was still renewed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

both_backends!(close_ends_everything);

/// Stops a server (SIGSTOP) until dropped (SIGCONT), also when the test fails.
struct Hung(u32);

impl Hung {
    fn stop(s: &Server) -> Hung {
        signal("STOP", s.pid());
        Hung(s.pid())
    }
}

impl Drop for Hung {
    fn drop(&mut self) {
        signal("CONT", self.0);
    }
}

fn signal(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}

/// Answered within `bound` plus a slack for a loaded machine.
fn within(t0: Instant, bound: Duration) {
    let took = t0.elapsed();
    assert!(
        took < bound + Duration::from_millis(700),
        "took {took:?}, bound {bound:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_bounded_when_the_server_hangs() {
    let srv = server(Backend::Native);
    let rt = Duration::from_millis(500);
    let client = support::builder(&srv, Backend::Native)
        .lease(Duration::from_secs(30))
        .renew_interval(Duration::from_secs(10))
        .no_bind()
        .build()
        .await
        .expect("client");
    let held = client.lock("k").acquire().await.expect("acquire");
    let hung = Hung::stop(&srv);

    let wait = Duration::from_secs(1);
    let t0 = Instant::now();
    let r = client.lock("k").try_acquire_for(wait, None).await;
    assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
    assert!(t0.elapsed() >= wait, "gave up before its time-out");
    within(t0, wait + rt);
    assert!(
        r.unwrap_err().to_string().contains(&srv.port().to_string()),
        "names the server"
    );

    let t0 = Instant::now();
    let r = client.lock("k3").try_acquire().await;
    assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
    within(t0, rt);

    let t0 = Instant::now();
    let r = held.renew().await;
    assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
    within(t0, rt);

    let t0 = Instant::now();
    let r = Client::builder(srv.url())
        .response_timeout(rt)
        .build()
        .await;
    assert!(
        matches!(
            r,
            Err(Error::Connect {
                reason: ConnectReason::Timeout,
                ..
            })
        ),
        "{r:?}"
    );
    within(t0, rt);

    let t0 = Instant::now();
    let r = held.release().await;
    assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
    within(t0, rt);

    let t0 = Instant::now();
    client.close().await;
    within(t0, Duration::ZERO);
    drop(hung);
}
