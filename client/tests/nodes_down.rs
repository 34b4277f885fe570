//! Multi-locks and RedLocks over servers that are down when they are built: a RedLock
//! counts them as failed votes and uses them again once they are back; a multi-lock fails
//! naming the node, and works once it is back.

use crate::support;

use std::time::Duration;

use dlock_client::{Backend, ConnectReason, Error, MultiLock, Node, RedLock};
use dlock_testutil::servers_holding;
use support::*;

async fn nodes(servers: &[Server]) -> Vec<Node> {
    let mut v = Vec::new();
    for s in servers {
        v.push(
            Node::connect(builder(s, Backend::Native))
                .await
                .expect("a server that is down is not an error"),
        );
    }
    v
}

fn addr(s: &Server) -> String {
    format!("127.0.0.1:{}", s.port())
}

/// A server started again on `old`'s port, with the module.
fn restart(old: &mut Server) {
    *old = Server::builder().port(old.port()).start();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_builds_with_nodes_down_and_uses_them_when_back() {
    let mut servers: Vec<Server> = (0..5).map(|_| server(Backend::Native)).collect();
    // Two of five stopped (by PID) before anything connects.
    servers[0].kill();
    servers[1].kill();
    let nodes = nodes(&servers).await;
    let up: Vec<bool> = nodes.iter().map(Node::is_up).collect();
    assert_eq!(up, [false, false, true, true, true]);
    assert_eq!(nodes[0].address(), addr(&servers[0]));

    let red = RedLock::on_nodes(&nodes, "job").node_timeout(Duration::from_millis(300));
    assert_eq!(red.quorum(), 3);
    let lease = Duration::from_secs(5);
    let g = red
        .try_acquire(lease)
        .await
        .unwrap()
        .expect("3 of 5 is a quorum: the down nodes are failed votes");
    assert_eq!(g.granted(), 3);
    assert_eq!(servers_holding(&mut servers, "job"), 3);
    g.release().await.unwrap();
    assert_eq!(servers_holding(&mut servers, "job"), 0);

    // A third one stopped (it was up): no quorum, and nothing left on the two that granted.
    servers[2].kill();
    assert!(red.try_acquire(lease).await.unwrap().is_none());
    assert_eq!(servers_holding(&mut servers, "job"), 0);

    // All three back on their ports: every node is used again (the two never connected
    // connect in the background; the third's client reconnects).
    for s in servers.iter_mut().take(3) {
        restart(s);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(g) = red.try_acquire(lease).await.unwrap() {
            let granted = g.granted();
            g.release().await.unwrap();
            if granted == 5 {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the nodes that came back were not used again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(red.nodes().all(Node::is_up));
    assert_eq!(servers_holding(&mut servers, "job"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multilock_with_a_node_down_fails_naming_it_and_works_when_back() {
    let mut servers: Vec<Server> = (0..3).map(|_| server(Backend::Native)).collect();
    servers[1].kill();
    let nodes = nodes(&servers).await;
    assert!(!nodes[1].is_up());
    let m = MultiLock::on_nodes(nodes.iter().cloned().zip(["a", "b", "c"]));
    assert_eq!(m.len(), 3);

    for attempt in 0..2 {
        let r = if attempt == 0 {
            m.acquire().await.map(|_| ())
        } else {
            m.try_acquire().await.map(|_| ())
        };
        match r {
            Err(Error::Connect {
                addr: a, reason, ..
            }) => {
                assert_eq!(a, addr(&servers[1]));
                assert_eq!(reason, ConnectReason::Refused);
            }
            other => panic!("expected a connect error naming the node, got {other:?}"),
        }
        // Nothing left held on the nodes that are up.
        for key in ["a", "b", "c"] {
            assert_eq!(servers_holding(&mut servers, key), 0, "{key} left held");
        }
    }

    restart(&mut servers[1]);
    let g = m.acquire().await.expect("the node is back");
    assert_eq!(g.guards().len(), 3);
    assert!(nodes[1].is_up());
    g.release().await.unwrap();

    // A node that was up and stopped: the error names it too, and nothing is left held.
    servers[2].kill();
    match m.try_acquire().await {
        Err(Error::Connect { addr: a, .. }) => assert_eq!(a, addr(&servers[2])),
        other => panic!("expected a connect error naming the node, got {other:?}"),
    }
    for key in ["a", "b", "c"] {
        assert_eq!(servers_holding(&mut servers, key), 0, "{key} left held");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_settings_that_cannot_work_is_an_error() {
    let s = server(Backend::Native);
    let bad = builder(&s, Backend::Native).lease(Duration::ZERO);
    assert!(matches!(Node::connect(bad).await, Err(Error::Config(_))));
    let plain = Server::builder().without_module().start();
    let native_on_plain = builder(&plain, Backend::Native);
    assert!(matches!(
        Node::connect(native_on_plain).await,
        Err(Error::Config(_))
    ));
}
