//! The wait-time distribution of `INFO dlock` (`dlock_wait_{p50,p99,p999,max}_us`): zeros
//! before the first waited grant, direct grants not counted, known waits land where expected.

use crate::common;
use common::*;
use std::time::Duration;

fn wait_fields(c: &mut Connection) -> [i64; 4] {
    let info = info_dlock(c);
    [
        "dlock_wait_p50_us",
        "dlock_wait_p99_us",
        "dlock_wait_p999_us",
        "dlock_wait_max_us",
    ]
    .map(|f| {
        *info
            .get(f)
            .unwrap_or_else(|| panic!("INFO dlock has no {f}"))
    })
}

#[test]
fn percentiles_after_known_waits() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(wait_fields(&mut c), [0; 4], "zeros before any waited grant");

    // Direct grants (no queue) are not waits.
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    assert_eq!(release(&mut c, "k", "h"), Reply::Int(1));
    assert_eq!(
        wait_fields(&mut c),
        [0; 4],
        "a direct grant records nothing"
    );

    // Three waits held for at least 60, 150 and 300 ms: the waiter joins the queue, the
    // holder keeps the lock that long, then releases (the hand-off is inside the RELEASE).
    let holds = [60u64, 150, 300];
    let mut seen = vec![];
    for (i, hold) in holds.iter().enumerate() {
        let holder = format!("h{i}");
        let waiter = format!("w{i}");
        assert_eq!(acquire(&mut c, "k", &holder, 60_000), Reply::Int(1));
        let p = enqueue(
            &srv,
            &mut c,
            "k",
            &["DLOCK.ACQUIRE", "k", &waiter, "60000", "WAIT", "0"],
            1,
        );
        std::thread::sleep(Duration::from_millis(*hold));
        assert_eq!(release(&mut c, "k", &holder), Reply::Int(1));
        let (r, took) = p.wait(5 * SEC);
        assert_eq!(r, Reply::Int(1), "{waiter} granted");
        assert_eq!(release(&mut c, "k", &waiter), Reply::Int(1));
        seen.push(took.as_micros() as i64);
    }
    let [p50, p99, p999, max] = wait_fields(&mut c);
    // Each server-side wait lies between the hold and what the waiting client saw.
    assert!(
        (150_000..=seen[1] + 1_000).contains(&p50),
        "p50 {p50} µs: the middle wait (>= 150 ms, <= {} µs)",
        seen[1]
    );
    for (name, v) in [("p99", p99), ("p999", p999), ("max", max)] {
        assert!(
            (300_000..=seen[2] + 1_000).contains(&v),
            "{name} {v} µs: the longest wait (>= 300 ms, <= {} µs)",
            seen[2]
        );
    }
    assert!(p50 <= p99 && p99 <= p999 && p999 <= max);
}

#[test]
fn timed_out_waits_are_not_counted() {
    let srv = Server::start();
    let mut c = srv.connection();
    assert_eq!(acquire(&mut c, "k", "h", 60_000), Reply::Int(1));
    let p = enqueue(
        &srv,
        &mut c,
        "k",
        &["DLOCK.ACQUIRE", "k", "w", "60000", "WAIT", "50"],
        1,
    );
    assert!(p.reply().is_nil(), "time-out answers null");
    wait_waiters(&mut c, "k", 0);
    assert_eq!(
        wait_fields(&mut c),
        [0; 4],
        "only granted waits are in the distribution"
    );
}
