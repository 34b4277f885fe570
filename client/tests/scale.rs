//! One client's single watchdog task keeps 10 000 locks alive.

use crate::support;

use std::time::Duration;

use dlock_client::Backend;
use futures::StreamExt;
use support::*;

const N: usize = 10_000;

async fn ten_thousand_locks(b: Backend) {
    let s = server(b);
    let lease = Duration::from_millis(1500);
    let c = builder(&s, b)
        .lease(lease)
        .renew_interval(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let guards: Vec<_> = futures::stream::iter(0..N)
        .map(|i| {
            let c = c.clone();
            async move {
                c.lock(format!("many:{i}"))
                    .try_acquire()
                    .await
                    .unwrap()
                    .expect("free")
            }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    assert_eq!(guards.len(), N);
    assert_eq!(c.watched_locks(), N);
    tokio::time::sleep(lease * 3).await; // time passing is what is tested
    assert!(
        guards.iter().all(|g| g.lost().check().is_none()),
        "a lock was lost"
    );
    let mut r = raw(&s).await;
    let mut pipe = redis::pipe();
    for i in 0..N {
        pipe.cmd("PTTL").arg(format!("many:{i}"));
    }
    let ttls: Vec<i64> = pipe.query_async(&mut r).await.unwrap();
    let dead = ttls.iter().filter(|&&t| t <= 0).count();
    assert_eq!(dead, 0, "{dead} locks expired");
    let released: Vec<bool> = futures::stream::iter(guards)
        .map(|g| async move { g.release().await.is_ok() })
        .buffer_unordered(256)
        .collect()
        .await;
    assert!(released.iter().all(|&x| x));
    assert_eq!(c.watched_locks(), 0);
    let n: i64 = redis::cmd("DBSIZE").query_async(&mut r).await.unwrap();
    assert_eq!(n, 0);
}

both_backends!(ten_thousand_locks);
