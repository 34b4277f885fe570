//! The shared connection to a single node: one multiplexed connection, made again after a
//! failure, whose link is watched as a whole instead of with a timer per request.
//!
//! Why not redis-rs's `ConnectionManager` (which [`Client::connection`](crate::Client::connection)
//! still hands out): it wraps every request in a time-out (a timer registered and cancelled
//! per command), an `ArcSwap` load and a shared future; on the lock's hot path that was a
//! fifth of the client's CPU per acquire+release. Here a request costs a mutex-guarded
//! clone and two counter increments. One task per connection checks, every response
//! time-out, that the requests in flight are being answered, and closes a link that
//! stopped answering: its requests then fail with a connection error, as they would have
//! with a per-request time-out, and the next request connects again.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, Pipeline, RedisResult, Value};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::config::Retry;
use crate::{Error, Result};

pub(crate) struct Single {
    me: Weak<Single>,
    /// Signalled (one stored permit) when a link closes or is dropped: the holds bound to
    /// it must be rebound on a new one (see [`Single::closed`]).
    closed: Arc<tokio::sync::Notify>,
    client: redis::Client,
    timeout: Duration,
    retry: Retry,
    runtime: tokio::runtime::Handle,
    current: Mutex<Option<Link>>,
    /// Held while a new link is being made, so concurrent requests wait for one attempt.
    connecting: tokio::sync::Mutex<()>,
    /// Requests sent and requests finished (answered, failed or dropped): the monitor's view.
    sent: AtomicU64,
    finished: AtomicU64,
    next_link: AtomicU64,
    /// When the latest link was last known open.
    answered: Arc<Answered>,
    /// The client was closed: the link is dropped and no new one is made.
    shut: std::sync::atomic::AtomicBool,
    /// The last link the monitor closed for silence: its requests failed for want of an
    /// answer within the response time-out, and say so (a time-out, not a broken pipe).
    silenced: AtomicU64,
}

/// Which link answered a command, and when the command was sent on it (read after the link
/// was in hand, so the command went on that link): a reply proves the link was open when the
/// command reached the server, which is after that. `link` is `None` where links are not
/// tracked (Sentinel, Cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) link: Option<u64>,
    pub(crate) sent: Instant,
}

impl Stamp {
    /// A command sent at `sent` on a link nobody tracks.
    pub(crate) fn unlinked(sent: Instant) -> Stamp {
        Stamp { link: None, sent }
    }
}

/// The last moment the latest link is known to have been open: the send time of the last
/// command it answered. A link made later starts from nothing, so a reply on it says nothing
/// of an older one.
#[derive(Debug)]
pub(crate) struct Answered {
    state: Mutex<AnsweredState>,
}

#[derive(Debug)]
struct AnsweredState {
    link: u64,
    last: Option<Instant>,
}

impl Answered {
    fn new() -> Answered {
        Answered {
            state: Mutex::new(AnsweredState {
                link: 0,
                last: None,
            }),
        }
    }

    fn new_link(&self, link: u64) {
        *self.state.lock().unwrap() = AnsweredState { link, last: None };
    }

    fn answered(&self, link: u64, sent: Instant) {
        let mut st = self.state.lock().unwrap();
        if st.link == link && st.last.is_none_or(|l| l < sent) {
            st.last = Some(sent);
        }
    }

    /// For a command answered as `stamp` says: the last moment its link is known to have
    /// been open (a later answer on the same link, or the command's own send time).
    pub(crate) fn open_since(&self, stamp: Stamp) -> Instant {
        let st = self.state.lock().unwrap();
        match (stamp.link, st.last) {
            (Some(l), Some(last)) if l == st.link => last.max(stamp.sent),
            _ => stamp.sent,
        }
    }

    /// The send time of the last command the latest link answered.
    pub(crate) fn last(&self) -> Option<Instant> {
        self.state.lock().unwrap().last
    }
}

struct Link {
    id: u64,
    conn: MultiplexedConnection,
    /// The task that drives the socket; aborting it fails every request in flight.
    driver: AbortHandle,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Counts a request as finished however its future ends (answered, failed, dropped).
struct Finished<'a>(&'a AtomicU64);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

impl Single {
    /// Connect to `client`'s node (one attempt, so a refused port or a bad host answers at
    /// once, naming the address) and start the link monitor.
    pub(crate) async fn connect(
        client: redis::Client,
        timeout: Duration,
        retry: Retry,
    ) -> Result<Arc<Single>> {
        let addr = client.get_connection_info().addr.to_string();
        let s = Arc::new_cyclic(|me| Single {
            me: me.clone(),
            closed: Arc::default(),
            client,
            timeout,
            retry,
            runtime: tokio::runtime::Handle::current(),
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            sent: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            next_link: AtomicU64::new(1),
            answered: Arc::new(Answered::new()),
            shut: std::sync::atomic::AtomicBool::new(false),
            silenced: AtomicU64::new(0),
        });
        match tokio::time::timeout(timeout, s.client.create_multiplexed_tokio_connection()).await {
            Ok(Ok((conn, driver))) => s.install(conn, driver),
            Ok(Err(e)) => return Err(Error::connect(&addr, e)),
            Err(_) => return Err(Error::connect_timeout(&addr, timeout)),
        };
        tokio::spawn(monitor(Arc::downgrade(&s), timeout));
        Ok(s)
    }

    fn install(
        &self,
        conn: MultiplexedConnection,
        driver: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> (u64, MultiplexedConnection) {
        let id = self.next_link.fetch_add(1, Relaxed);
        // The driver ends when the server closes the socket (`CLIENT KILL`, a restart):
        // drop the link at once, so the next request (the watchdog's rebind) connects again.
        let me = self.me.clone();
        let driver = self
            .runtime
            .spawn(async move {
                driver.await;
                if let Some(s) = me.upgrade() {
                    s.drop_link(id);
                }
            })
            .abort_handle();
        let out = (id, conn.clone());
        *self.current.lock().unwrap() = Some(Link { id, conn, driver });
        self.answered.new_link(id);
        out
    }

    /// Close the link (its requests fail) and make no new one; the monitor ends.
    pub(crate) fn close(&self) {
        self.shut.store(true, Relaxed);
        let link = self.current.lock().unwrap().take();
        drop(link);
    }

    fn is_shut(&self) -> bool {
        self.shut.load(Relaxed)
    }

    /// The current link, or a new one (with the retry policy's back-off between attempts).
    async fn link(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if self.is_shut() {
            return Err(closed_error());
        }
        if let Some(l) = self.current.lock().unwrap().as_ref() {
            return Ok((l.id, l.conn.clone()));
        }
        let _one = self.connecting.lock().await;
        if let Some(l) = self.current.lock().unwrap().as_ref() {
            return Ok((l.id, l.conn.clone()));
        }
        if self.is_shut() {
            return Err(closed_error());
        }
        let mut n = 0;
        loop {
            let attempt = tokio::time::timeout(
                self.timeout,
                self.client.create_multiplexed_tokio_connection(),
            )
            .await;
            let err = match attempt {
                // Closed while connecting: this link is not kept.
                Ok(Ok(_)) if self.is_shut() => return Err(closed_error()),
                Ok(Ok((conn, driver))) => return Ok(self.install(conn, driver)),
                Ok(Err(e)) => e,
                Err(_) => redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{}: no connection within {:?}", self.addr(), self.timeout),
                )),
            };
            if n >= self.retry.attempts() {
                return Err(err);
            }
            tokio::time::sleep(self.retry.delay(n)).await;
            n += 1;
        }
    }

    /// After a request sent at `sent` on link `id`: an answer says the link was open; a
    /// broken link is dropped, so the next request connects again.
    fn after<T>(&self, id: u64, sent: Instant, r: &RedisResult<T>) {
        match r {
            Ok(_) => self.answered.answered(id, sent),
            Err(e)
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() =>
            {
                self.drop_link(id)
            }
            // An error reply is an answer too.
            Err(e) if e.code().is_some() => self.answered.answered(id, sent),
            Err(_) => {}
        }
    }

    fn drop_link(&self, id: u64) {
        let mut cur = self.current.lock().unwrap();
        if cur.as_ref().is_some_and(|l| l.id == id) {
            *cur = None;
            self.closed.notify_one();
        }
    }

    /// Signalled when a link closed or was dropped since the last wait on it.
    pub(crate) fn closed(&self) -> Arc<tokio::sync::Notify> {
        self.closed.clone()
    }

    /// When the latest link was last known open (see [`Answered`]).
    pub(crate) fn answered(&self) -> Arc<Answered> {
        self.answered.clone()
    }

    pub(crate) async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        self.command_stamped(cmd).await.0
    }

    /// [`command`](Self::command), and (when answered) which link answered it.
    pub(crate) async fn command_stamped(&self, cmd: &Cmd) -> (RedisResult<Value>, Option<Stamp>) {
        self.send(|mut c| async move { c.send_packed_command(cmd).await })
            .await
    }

    pub(crate) async fn pipeline(
        &self,
        pipe: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.pipeline_stamped(pipe, offset, count).await.0
    }

    /// [`pipeline`](Self::pipeline), and (when answered) which link answered it.
    pub(crate) async fn pipeline_stamped(
        &self,
        pipe: &Pipeline,
        offset: usize,
        count: usize,
    ) -> (RedisResult<Vec<Value>>, Option<Stamp>) {
        self.send(|mut c| async move { c.send_packed_commands(pipe, offset, count).await })
            .await
    }

    /// Sends one request on the current link (opened if none is): counted as out until it
    /// finishes, and its outcome tells the link's health (see [`after`](Self::after)).
    async fn send<T, F>(
        &self,
        request: impl FnOnce(MultiplexedConnection) -> F,
    ) -> (RedisResult<T>, Option<Stamp>)
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let (id, c) = match self.link().await {
            Ok(l) => l,
            Err(e) => return (Err(e), None),
        };
        let sent = Instant::now();
        self.sent.fetch_add(1, Relaxed);
        let _f = Finished(&self.finished);
        let r = match request(c).await {
            Err(e)
                if self.silenced.load(Relaxed) == id
                    && e.kind() != redis::ErrorKind::ResponseError =>
            {
                Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{}: no answer within {:?}", self.addr(), self.timeout),
                )))
            }
            r => r,
        };
        self.after(id, sent, &r);
        let stamp = r.is_ok().then_some(Stamp {
            link: Some(id),
            sent,
        });
        (r, stamp)
    }

    /// `host:port`, for messages.
    fn addr(&self) -> String {
        self.client.get_connection_info().addr.to_string()
    }

    pub(crate) fn db(&self) -> i64 {
        self.client.get_connection_info().redis.db
    }
}

/// What a request on a closed client's connection fails with.
fn closed_error() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::ClientError, "the dlock client is closed"))
}

/// Every `every`: when nothing was answered since the last look although a request sent
/// before it is still out, the link has been silent for at least `every` with work
/// pending: close it (its requests fail with a connection error).
async fn monitor(weak: Weak<Single>, every: Duration) {
    let (mut last_sent, mut last_finished) = (0, 0);
    loop {
        tokio::time::sleep(every).await;
        let Some(s) = weak.upgrade() else { return };
        if s.is_shut() {
            return;
        }
        let (sent, finished) = (s.sent.load(Relaxed), s.finished.load(Relaxed));
        if finished == last_finished && finished < last_sent {
            let id = s.current.lock().unwrap().as_ref().map(|l| l.id);
            if let Some(id) = id {
                s.silenced.store(id, Relaxed);
                s.drop_link(id);
            }
        }
        (last_sent, last_finished) = (sent, finished);
    }
}
