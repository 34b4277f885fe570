//! What a Redis Cluster node's error reply asks of a request ([`Redirect`]): go to another
//! node (`MOVED`, `ASK`) or come back a little later (`TRYAGAIN`, `CLUSTERDOWN`), and the
//! bounds a request keeps while it follows them ([`MAX_REDIRECTS`], [`Backoff`]).
//!
//! A waiting `DLOCK.ACQUIRE/RWLOCK/SEMAPHORE ... WAIT` queued on a node that its key
//! leaves (a reshard) is answered with the same errors, so the same rules carry a waiter to
//! the key's new owner.

use std::time::Duration;

/// Where an error reply sends the request next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// The slot belongs to the node at this address (`host:port`) now: the slot map is
    /// stale.
    Moved(String),
    /// This request only: the node at this address, after `ASKING` (the slot is migrating
    /// and the key is not, or no longer, on the node asked).
    Ask(String),
    /// The same node, a little later: `TRYAGAIN` (a slot migrating with the request's keys
    /// on both sides, or the node could not read the cluster's state), `CLUSTERDOWN`, or
    /// the `UNBLOCKED` a master demoted by a failover answers its blocked clients before it
    /// closes their connections (asked again, it redirects to the new master).
    Later,
}

impl Redirect {
    /// The redirect an error reply (its code and the rest) stands for; `None` for any
    /// other error.
    pub(crate) fn of(code: &str, details: Option<&str>) -> Option<Redirect> {
        let target = || {
            // `MOVED <slot> <host>:<port>`
            let addr = details?.split(' ').nth(1)?;
            (!addr.is_empty()).then(|| addr.to_string())
        };
        match code {
            "MOVED" => target().map(Redirect::Moved),
            "ASK" => target().map(Redirect::Ask),
            "TRYAGAIN" | "CLUSTERDOWN" => Some(Redirect::Later),
            // Not `CLIENT UNBLOCK ... ERROR`, which means "stop waiting".
            "UNBLOCKED" if details.is_some_and(|d| d.contains("instance state changed")) => {
                Some(Redirect::Later)
            }
            _ => None,
        }
    }
}

/// An error the client reports for a redirect that the shared (cluster) connection stopped
/// following (redis-rs gives up after a few): `CODE detail` as the server sent it.
pub(crate) fn is_redirect_error(e: &crate::Error) -> bool {
    match e {
        crate::Error::Server(msg) => {
            let (code, details) = msg.split_once(' ').unwrap_or((msg.as_str(), ""));
            Redirect::of(code, Some(details)).is_some()
        }
        _ => false,
    }
}

/// At most this many `MOVED`/`ASK` a request follows (each a reshard step seen, or a slot
/// map that does not settle); past that it fails with
/// [`Error::Redirected`](crate::Error::Redirected).
pub(crate) const MAX_REDIRECTS: u32 = 16;

/// Pauses between tries of a request answered `TRYAGAIN`/`CLUSTERDOWN`: 10 ms doubling up
/// to 200 ms, as cluster clients do, while the request's time allows.
pub(crate) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            next: Duration::from_millis(10),
        }
    }
}

impl Backoff {
    /// The pause before the next try when `left` (the request's time left; `None`: no
    /// limit) is longer than it, else `None`: the time is up.
    pub(crate) fn next_pause(&mut self, left: Option<Duration>) -> Option<Duration> {
        let pause = self.next;
        if left.is_some_and(|l| l <= pause) {
            return None;
        }
        self.next = (self.next * 2).min(Duration::from_millis(200));
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The redirect of an error reply as it comes off the wire.
    fn of(line: &str) -> Option<Redirect> {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap() {
            redis::Value::ServerError(e) => Redirect::of(e.code(), e.details()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn redirects_of_error_replies() {
        assert_eq!(
            of("MOVED 3999 127.0.0.1:7001"),
            Some(Redirect::Moved("127.0.0.1:7001".into()))
        );
        assert_eq!(
            of("ASK 3999 10.0.0.2:6380"),
            Some(Redirect::Ask("10.0.0.2:6380".into()))
        );
        assert_eq!(
            of("TRYAGAIN the cluster is changing, try again"),
            Some(Redirect::Later)
        );
        assert_eq!(of("CLUSTERDOWN The cluster is down"), Some(Redirect::Later));
        assert_eq!(
            of("UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"),
            Some(Redirect::Later)
        );
        assert_eq!(of("UNBLOCKED client unblocked via CLIENT UNBLOCK"), None);
        assert_eq!(of("ERR syntax error"), None);
        // A redirect without a target is no redirect.
        assert_eq!(of("MOVED 3999"), None);
    }

    #[test]
    fn redirect_errors_as_the_client_reports_them() {
        let server = |m: &str| crate::Error::Server(m.into());
        assert!(is_redirect_error(&server("MOVED 7264 127.0.0.1:43351")));
        assert!(is_redirect_error(&server(
            "TRYAGAIN the cluster is changing"
        )));
        assert!(is_redirect_error(&server("CLUSTERDOWN")));
        assert!(!is_redirect_error(&server("ERR syntax error")));
        assert!(!is_redirect_error(&crate::Error::Timeout("t".into())));
    }

    #[test]
    fn backoff_doubles_up_to_200ms_while_time_is_left() {
        let mut b = Backoff::default();
        let pauses: Vec<u64> = std::iter::from_fn(|| b.next_pause(None))
            .take(7)
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 200, 200]);
        let mut b = Backoff::default();
        assert_eq!(
            b.next_pause(Some(Duration::from_millis(15))),
            Some(Duration::from_millis(10))
        );
        // 20 ms next, 15 ms left: the time is up.
        assert_eq!(b.next_pause(Some(Duration::from_millis(15))), None);
        assert_eq!(Backoff::default().next_pause(Some(Duration::ZERO)), None);
    }
}
