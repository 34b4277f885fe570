//! Blocking facade for threads without async: the same locks, reentrant **per thread**
//! like Redisson (owner `<prefix>:<thread number>`).
//!
//! The facade runs its own small tokio runtime (2 worker threads) for the connection and
//! the watchdog. Do not call it from inside an async task (it blocks the thread).
//!
//! It mirrors the async API: [`Client`], [`Lock`] and [`RwLock`] handles, [`MultiLock`],
//! [`RedLock`], and [`Node`] for servers that may be down.
//!
//! ```no_run
//! use std::time::Duration;
//! let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
//! let lock = client.lock("nightly-report");
//! let g = lock.acquire()?;                     // this thread's owner
//! let again = lock.try_acquire()?.unwrap();    // reentrant on the same thread
//! assert_eq!(again.hold_count(), 2);
//! again.release()?;
//! g.release()?;
//! # Ok::<(), dlock_client::Error>(())
//! ```

use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

mod semaphore;
pub use semaphore::{Semaphore, SemaphoreGuard};

use crate::backend::Wait;
use crate::multilock::GroupLost;
use crate::node::Member;
use crate::owner::next_owner_number;
use crate::{ClientBuilder, LockKind, LostReason, LostSignal, Owner, Result};

/// A blocking client: wraps an async [`crate::Client`] and its own runtime.
///
/// ```no_run
/// let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    inner: crate::Client,
    rt: Arc<tokio::runtime::Runtime>,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("dlock-client")
        .enable_all()
        .build()
        .map_err(|e| crate::Error::Config(format!("cannot start a runtime: {e}")))
}

impl Client {
    /// Connect with default settings.
    pub fn open(url: impl Into<String>) -> Result<Client> {
        Client::build(crate::Client::builder(url))
    }

    /// Connect with an async [`ClientBuilder`]'s settings.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let b = dlock_client::Client::builder("redis://127.0.0.1:6379/").lease(Duration::from_secs(5));
    /// let c = dlock_client::blocking::Client::build(b)?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn build(builder: ClientBuilder) -> Result<Client> {
        let rt = Arc::new(runtime()?);
        let inner = rt.block_on(builder.build())?;
        Ok(Client { inner, rt })
    }

    /// The async client underneath (shares connection and watchdog).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert!(client.async_client().watched_locks() == 0);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn async_client(&self) -> &crate::Client {
        &self.inner
    }

    /// A lock handle on `name`; its owner is the calling thread's at each call.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let lock = client.lock("k");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            client: self.clone(),
            name: name.into(),
            fence: false,
            kind: LockKind::Exclusive,
        }
    }

    /// A read-write lock handle on `name` (`DLOCK.RWLOCK`); its owner is the calling
    /// thread's at each call, so a thread that writes may also read.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let config = client.rwlock("config");
    /// let r = config.read().acquire()?;
    /// r.release()?;
    /// let w = config.write().acquire()?;
    /// w.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock {
            client: self.clone(),
            name: name.into(),
        }
    }

    /// The owner the calling thread uses: `<prefix>:<thread number>`.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let me = client.thread_owner();
    /// let g = client.lock("k").acquire()?;
    /// assert_eq!(g.owner_id(), me.id());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn thread_owner(&self) -> Owner {
        self.inner.owner_numbered(thread_number())
    }
}

/// The calling thread's number in owner ids (`<prefix>:<thread number>`), the same for every
/// client and lock of this process.
fn thread_number() -> u64 {
    thread_local! {
        static N: OnceLock<u64> = const { OnceLock::new() };
    }
    N.with(|n| *n.get_or_init(next_owner_number))
}

/// A blocking lock handle (Redisson's `RLock`).
///
/// ```no_run
/// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// use std::time::Duration;
/// let lock = client.lock("stock");
/// match lock.try_acquire_for(Duration::from_millis(100), Some(Duration::from_secs(2)))? {
///     Some(g) => { g.release()?; }
///     None => println!("busy"),
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    client: Client,
    name: String,
    fence: bool,
    kind: LockKind,
}

/// A blocking read-write lock handle: [`read`](RwLock::read) and [`write`](RwLock::write)
/// give [`Lock`] handles with the whole lock API (try, wait, lease or watchdog, `lost()`,
/// fencing on `write`).
/// ```no_run
/// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// let w = client.rwlock("config").write().acquire()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: Client,
    name: String,
}

impl RwLock {
    /// The read side (shared).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let r = client.rwlock("config").read().acquire()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn read(&self) -> Lock {
        self.side(LockKind::Read)
    }

    /// The write side (exclusive).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let w = client.rwlock("config").write().acquire()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn write(&self) -> Lock {
        self.side(LockKind::Write)
    }

    fn side(&self, kind: LockKind) -> Lock {
        Lock {
            client: self.client.clone(),
            name: self.name.clone(),
            fence: false,
            kind,
        }
    }
}

impl Lock {
    fn handle(&self) -> crate::Lock {
        let owner = self.client.thread_owner();
        let name = self.name.clone();
        let l = match self.kind {
            LockKind::Exclusive => self.client.inner.lock_as(name, &owner),
            LockKind::Read => self.client.inner.rwlock_as(name, &owner).read(),
            LockKind::Write => self.client.inner.rwlock_as(name, &owner).write(),
            LockKind::Semaphore => unreachable!("semaphores have their own handle"),
        };
        if self.fence {
            l.fenced()
        } else {
            l
        }
    }
    fn run(&self, wait: Wait, lease: Option<Duration>) -> Result<Option<LockGuard>> {
        let h = self.handle();
        let g = self
            .client
            .rt
            .block_on(async move { h.acquire_impl(wait, lease).await })?;
        Ok(g.map(|g| LockGuard {
            inner: Some(g),
            rt: self.client.rt.clone(),
        }))
    }
    /// The lock key.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.lock("k").name(), "k");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Ask for fencing tokens (native backend).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").fenced().acquire()?;
    /// println!("token {:?}", g.fencing_token());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn fenced(mut self) -> Lock {
        self.fence = true;
        self
    }
    /// Wait as long as it takes; watchdog on.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn acquire(&self) -> Result<LockGuard> {
        let h = self.handle();
        let g = self.client.rt.block_on(async move { h.acquire().await })?;
        Ok(LockGuard {
            inner: Some(g),
            rt: self.client.rt.clone(),
        })
    }
    /// One attempt; watchdog on when granted.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// if let Some(g) = client.lock("k").try_acquire()? { g.release()?; }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.run(Wait::No, None)
    }
    /// Wait up to `wait`; with `lease`, no watchdog.
    pub fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        if lease.is_some_and(|l| l.is_zero()) {
            return Err(crate::Error::Config("lease must be > 0".into()));
        }
        self.run(Wait::from_duration(wait), lease)
    }
    /// Delete the lock whoever holds it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// client.lock("stuck").force_unlock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        let h = self.handle();
        self.client
            .rt
            .block_on(async move { h.force_unlock().await })
    }
    /// Whether anyone holds it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// println!("{}", client.lock("k").is_locked()?);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        let h = self.handle();
        self.client.rt.block_on(async move { h.is_locked().await })
    }
    /// Whether the calling thread holds it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let lock = client.lock("k");
    /// let _g = lock.acquire()?;
    /// assert!(lock.is_held_by_current_thread()?);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        let h = self.handle();
        self.client
            .rt
            .block_on(async move { h.is_held_by_owner().await })
    }
    /// Remaining lease (`PTTL`), `None` when not locked.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// println!("{:?}", client.lock("k").remaining_lease()?);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        let h = self.handle();
        self.client
            .rt
            .block_on(async move { h.remaining_lease().await })
    }
}

/// A held lock (blocking). Dropping it releases in the background.
///
/// ```no_run
/// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// let g = client.lock("x").acquire()?;
/// assert!(g.lost().check().is_none());
/// g.release()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
pub struct LockGuard {
    inner: Option<crate::LockGuard>,
    rt: Arc<tokio::runtime::Runtime>,
}

impl LockGuard {
    fn g(&self) -> &crate::LockGuard {
        self.inner.as_ref().expect("guard present until release")
    }
    /// The owner's hold count after this acquire.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.lock("k").acquire()?.hold_count(), 1);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn hold_count(&self) -> u64 {
        self.g().hold_count()
    }
    /// The fencing token, if asked for.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(client.lock("k").acquire()?.fencing_token(), None);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.g().fencing_token()
    }
    /// The owner id holding it.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// assert_eq!(g.owner_id(), client.thread_owner().id());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner_id(&self) -> &str {
        self.g().owner_id()
    }
    /// The lost signal: [`check`](LostSignal::check) it, await it in async code, or use
    /// [`wait_lost`](Self::wait_lost).
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// let signal = g.lost();
    /// std::thread::spawn(move || { /* hand `signal` to async code */ drop(signal) });
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lost(&self) -> LostSignal {
        self.g().lost()
    }
    /// Block up to `timeout` for the lock to be lost; `None` if still held.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        let s = self.lost();
        self.rt
            .block_on(async move { tokio::time::timeout(timeout, s.wait()).await.ok() })
    }
    /// Release this hold: `Ok(())` if it was still held, [`Error::NotHeld`](crate::Error::NotHeld)
    /// if it had been lost.
    /// ```no_run
    /// # let client = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = client.lock("k").acquire()?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn release(mut self) -> Result<()> {
        let g = self.inner.take().expect("guard present");
        self.rt.block_on(g.release())
    }
}

impl Drop for LockGuard {
    /// Outside an async runtime the release is sent before `drop` returns (so it is not lost
    /// if the client and its runtime go away right after); inside one it goes in the background.
    fn drop(&mut self) {
        if let Some(g) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_err() {
                let _ = self.rt.block_on(g.release());
            }
        }
    }
}

/// A server for a blocking [`MultiLock`] or [`RedLock`], up or down (the blocking face of
/// [`crate::Node`]): made without needing the server to answer, tried again whenever a lock
/// needs it.
///
/// ```no_run
/// use dlock_client::{blocking, Client};
/// let nodes: Vec<blocking::Node> = [6379, 6380, 6381]
///     .iter()
///     .map(|p| blocking::Node::connect(Client::builder(format!("redis://127.0.0.1:{p}/"))))
///     .collect::<Result<_, _>>()?;
/// let red = blocking::RedLock::on_nodes(&nodes, "job");
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Node {
    node: crate::Node,
    rt: Arc<tokio::runtime::Runtime>,
}

impl Node {
    /// The server `builder` describes, on a runtime of its own: connected now if it answers,
    /// else down. Errors: only settings that can never work (see [`crate::Node::connect`]).
    /// ```no_run
    /// let n = dlock_client::blocking::Node::connect(dlock_client::Client::builder("redis://127.0.0.1:6379/"))?;
    /// println!("{} up: {}", n.address(), n.is_up());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn connect(builder: ClientBuilder) -> Result<Node> {
        let rt = Arc::new(runtime()?);
        let node = rt.block_on(crate::Node::connect(builder))?;
        Ok(Node { node, rt })
    }
    /// Whether the node has connected.
    /// ```no_run
    /// # fn demo(n: dlock_client::blocking::Node) { println!("{}", n.is_up()); }
    /// ```
    pub fn is_up(&self) -> bool {
        self.node.is_up()
    }
    /// The server's address.
    /// ```no_run
    /// # fn demo(n: dlock_client::blocking::Node) { println!("{}", n.address()); }
    /// ```
    pub fn address(&self) -> &str {
        self.node.address()
    }
}

impl From<Client> for Node {
    /// A node that is up: `client`'s server.
    fn from(c: Client) -> Node {
        Node {
            node: crate::Node::from(c.inner),
            rt: c.rt,
        }
    }
}

/// Run `f` on `rt`, or (no members, so no runtime) right here.
fn block_on<F: std::future::Future>(rt: &Option<Arc<tokio::runtime::Runtime>>, f: F) -> F::Output {
    match rt {
        Some(rt) => rt.block_on(f),
        None => futures::executor::block_on(f),
    }
}

#[derive(Clone, Debug)]
enum Members {
    Locks(Vec<Lock>),
    Nodes(Vec<(crate::Node, String)>),
}

/// A blocking multi-lock (see [`crate::MultiLock`]): all-or-nothing over several locks, in
/// a canonical order; each member's owner is the calling thread's at each call.
///
/// ```no_run
/// let a = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
/// let b = dlock_client::blocking::Client::open("redis://127.0.0.1:6380/")?;
/// let m = dlock_client::blocking::MultiLock::new([a.lock("account:1"), b.lock("account:2")]);
/// let g = m.acquire()?;
/// g.release()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    members: Members,
    rt: Option<Arc<tokio::runtime::Runtime>>,
}

impl MultiLock {
    /// A multi-lock over `locks` (blocking lock handles, possibly of different clients).
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let m = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]);
    /// assert_eq!(m.len(), 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> MultiLock {
        let locks: Vec<Lock> = locks.into_iter().collect();
        MultiLock {
            rt: locks.first().map(|l| l.client.rt.clone()),
            members: Members::Locks(locks),
        }
    }
    /// A multi-lock over the exclusive locks `(node, name)`, whether or not the nodes are up:
    /// a member whose node is down makes an acquire fail with
    /// [`Error::Connect`](crate::Error::Connect) naming it.
    /// ```no_run
    /// # fn demo(a: dlock_client::blocking::Node, b: dlock_client::blocking::Node) -> dlock_client::Result<()> {
    /// let m = dlock_client::blocking::MultiLock::on_nodes([(a, "x"), (b, "y")]);
    /// # let _ = m; Ok(()) }
    /// ```
    pub fn on_nodes<S: Into<String>>(members: impl IntoIterator<Item = (Node, S)>) -> MultiLock {
        let members: Vec<(Node, String)> =
            members.into_iter().map(|(n, s)| (n, s.into())).collect();
        MultiLock {
            rt: members.first().map(|(n, _)| n.rt.clone()),
            members: Members::Nodes(members.into_iter().map(|(n, s)| (n.node, s)).collect()),
        }
    }
    /// Number of members.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(dlock_client::blocking::MultiLock::new([c.lock("a")]).len(), 1);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        match &self.members {
            Members::Locks(l) => l.len(),
            Members::Nodes(n) => n.len(),
        }
    }
    /// True when there are no members.
    /// ```
    /// assert!(dlock_client::blocking::MultiLock::new([]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The async multi-lock acting for the calling thread.
    fn for_thread(&self) -> crate::MultiLock {
        match &self.members {
            Members::Locks(locks) => crate::MultiLock::new(locks.iter().map(Lock::handle)),
            Members::Nodes(nodes) => {
                let n = thread_number();
                crate::MultiLock::of_members(
                    nodes
                        .iter()
                        .map(|(node, name)| {
                            Member::exclusive(node.clone(), name.clone(), node.owner_numbered(n))
                        })
                        .collect(),
                )
            }
        }
    }
    fn guard(&self, g: crate::MultiLockGuard) -> MultiLockGuard {
        MultiLockGuard {
            held: Held::new(g, &self.rt),
        }
    }
    /// Wait as long as it takes for all members; watchdog on.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]).acquire()?;
    /// g.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn acquire(&self) -> Result<MultiLockGuard> {
        let m = self.for_thread();
        let g = block_on(&self.rt, async move { m.acquire().await })?;
        Ok(self.guard(g))
    }
    /// One attempt at each member; all or none.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// if let Some(g) = dlock_client::blocking::MultiLock::new([c.lock("a")]).try_acquire()? { g.release()?; }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_acquire(&self) -> Result<Option<MultiLockGuard>> {
        self.try_acquire_for(Duration::ZERO, None)
    }
    /// Wait up to `wait` in total; with `lease`, no watchdog. `Ok(None)` on time-out.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// use std::time::Duration;
    /// let m = dlock_client::blocking::MultiLock::new([c.lock("a"), c.lock("b")]);
    /// let g = m.try_acquire_for(Duration::from_secs(1), Some(Duration::from_secs(10)))?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        let m = self.for_thread();
        let g = block_on(
            &self.rt,
            async move { m.try_acquire_for(wait, lease).await },
        )?;
        Ok(g.map(|g| self.guard(g)))
    }
}

/// All members of a blocking [`MultiLock`], held. Dropping it releases them (before `drop`
/// returns, outside an async runtime).
pub struct MultiLockGuard {
    held: Held<crate::MultiLockGuard>,
}

impl MultiLockGuard {
    fn g(&self) -> &crate::MultiLockGuard {
        self.held.g()
    }
    /// The members' fencing tokens.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = dlock_client::blocking::MultiLock::new([c.lock("a").fenced()]).acquire()?;
    /// println!("{:?}", g.fencing_tokens());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.g().fencing_tokens()
    }
    /// Members held.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// assert_eq!(dlock_client::blocking::MultiLock::new([c.lock("a")]).acquire()?.len(), 1);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.g().guards().len()
    }
    /// True when no member is held (an empty multi-lock).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The signal that fires when any member is lost.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = dlock_client::blocking::MultiLock::new([c.lock("a")]).acquire()?;
    /// assert!(g.lost().check().is_none());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lost(&self) -> GroupLost {
        self.g().lost()
    }
    /// Block up to `timeout` for a member to be lost; `None` if all are still held.
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// let g = dlock_client::blocking::MultiLock::new([c.lock("a")]).acquire()?;
    /// assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        self.held.wait_lost(timeout)
    }
    /// Release every member (see [`crate::MultiLockGuard::release`]).
    /// ```no_run
    /// # let c = dlock_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// dlock_client::blocking::MultiLock::new([c.lock("a")]).acquire()?.release()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn release(self) -> Result<()> {
        self.held.release()
    }
}

/// An async group guard (multi-lock or RedLock) as the blocking guards hold it.
trait GroupGuard: Send + 'static {
    fn group_lost(&self) -> GroupLost;
    fn release_all(self) -> impl std::future::Future<Output = Result<()>> + Send;
}

impl GroupGuard for crate::MultiLockGuard {
    fn group_lost(&self) -> GroupLost {
        self.lost()
    }
    fn release_all(self) -> impl std::future::Future<Output = Result<()>> + Send {
        self.release()
    }
}

impl GroupGuard for crate::RedLockGuard {
    fn group_lost(&self) -> GroupLost {
        self.lost()
    }
    fn release_all(self) -> impl std::future::Future<Output = Result<()>> + Send {
        self.release()
    }
}

/// What the blocking group guards share: the async guard and the runtime that runs it;
/// dropped outside an async runtime, it releases before `drop` returns.
struct Held<G: GroupGuard> {
    inner: Option<G>,
    rt: Option<Arc<tokio::runtime::Runtime>>,
}

impl<G: GroupGuard> Held<G> {
    fn new(g: G, rt: &Option<Arc<tokio::runtime::Runtime>>) -> Held<G> {
        Held {
            inner: Some(g),
            rt: rt.clone(),
        }
    }
    fn g(&self) -> &G {
        self.inner.as_ref().expect("guard present until release")
    }
    /// Block up to `timeout` for the group to count as lost.
    fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        let lost = self.g().group_lost();
        match &self.rt {
            Some(rt) => {
                rt.block_on(async move { tokio::time::timeout(timeout, lost.wait()).await.ok() })
            }
            None => lost.check(),
        }
    }
    fn release(mut self) -> Result<()> {
        let g = self.inner.take().expect("guard present");
        block_on(&self.rt, g.release_all())
    }
}

impl<G: GroupGuard> Drop for Held<G> {
    fn drop(&mut self) {
        if let Some(g) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_err() {
                let _ = block_on(&self.rt, g.release_all());
            }
        }
    }
}

/// A blocking RedLock (see [`crate::RedLock`]): one lock over N independent servers, held
/// on a majority; its owner is the calling thread's (the same id on every server).
///
/// ```no_run
/// use std::time::Duration;
/// let clients: Vec<dlock_client::blocking::Client> = [6379, 6380, 6381]
///     .iter()
///     .map(|p| dlock_client::blocking::Client::open(format!("redis://127.0.0.1:{p}/")))
///     .collect::<Result<_, _>>()?;
/// let red = dlock_client::blocking::RedLock::on(&clients, "job");
/// if let Some(g) = red.try_acquire(Duration::from_secs(10))? {
///     println!("valid for {:?}", g.validity());
///     g.release()?;
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    red: crate::RedLock,
    /// Names the thread's owner (its prefix, when up).
    first: Option<crate::Node>,
    rt: Option<Arc<tokio::runtime::Runtime>>,
}

impl RedLock {
    /// A RedLock on key `name` over `clients`.
    /// ```no_run
    /// # fn demo(clients: Vec<dlock_client::blocking::Client>) {
    /// let red = dlock_client::blocking::RedLock::on(&clients, "k");
    /// # }
    /// ```
    pub fn on(clients: &[Client], name: &str) -> RedLock {
        let nodes: Vec<Node> = clients.iter().cloned().map(Node::from).collect();
        RedLock::on_nodes(&nodes, name)
    }
    /// A RedLock on key `name` over `nodes`, up or down: a node that is down is a failed
    /// vote, and is used again once it answers.
    /// ```no_run
    /// # fn demo(nodes: Vec<dlock_client::blocking::Node>) {
    /// let red = dlock_client::blocking::RedLock::on_nodes(&nodes, "k");
    /// # }
    /// ```
    pub fn on_nodes(nodes: &[Node], name: &str) -> RedLock {
        let async_nodes: Vec<crate::Node> = nodes.iter().map(|n| n.node.clone()).collect();
        let first = async_nodes.first().cloned();
        let owner = first
            .as_ref()
            .map(|n| n.owner_numbered(thread_number()))
            .unwrap_or_else(|| Owner::from_id("redlock"));
        RedLock {
            red: crate::RedLock::on_nodes_as(&async_nodes, name, &owner),
            first,
            rt: nodes.first().map(|n| n.rt.clone()),
        }
    }
    /// Time-out of one server's answer (see [`crate::RedLock::node_timeout`]).
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) {
    /// let red = red.node_timeout(std::time::Duration::from_millis(20));
    /// # }
    /// ```
    pub fn node_timeout(mut self, t: Duration) -> RedLock {
        self.red = self.red.node_timeout(t);
        self
    }
    /// Upper bound of the random delay between attempts.
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) {
    /// let red = red.retry_delay(std::time::Duration::from_millis(50));
    /// # }
    /// ```
    pub fn retry_delay(mut self, t: Duration) -> RedLock {
        self.red = self.red.retry_delay(t);
        self
    }
    /// Clock drift allowance as a fraction of the lease.
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) {
    /// let red = red.drift_factor(0.02);
    /// # }
    /// ```
    pub fn drift_factor(mut self, f: f64) -> RedLock {
        self.red = self.red.drift_factor(f);
        self
    }
    /// Number of servers.
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) { println!("{}", red.len()); }
    /// ```
    pub fn len(&self) -> usize {
        self.red.len()
    }
    /// True when there is no server.
    /// ```
    /// assert!(dlock_client::blocking::RedLock::on(&[], "k").is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.red.is_empty()
    }
    /// Grants needed: `N/2 + 1`.
    /// ```
    /// assert_eq!(dlock_client::blocking::RedLock::on(&[], "k").quorum(), 1);
    /// ```
    pub fn quorum(&self) -> usize {
        self.red.quorum()
    }
    /// The async RedLock acting for the calling thread.
    fn for_thread(&self) -> crate::RedLock {
        match &self.first {
            Some(n) => self.red.with_owner(&n.owner_numbered(thread_number())),
            None => self.red.clone(),
        }
    }
    fn guard(&self, g: crate::RedLockGuard) -> RedLockGuard {
        RedLockGuard {
            held: Held::new(g, &self.rt),
        }
    }
    /// One attempt with lease `lease`; `Ok(None)` without a quorum (nothing left held).
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) -> dlock_client::Result<()> {
    /// if let Some(g) = red.try_acquire(std::time::Duration::from_secs(5))? { g.release()?; }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self, lease: Duration) -> Result<Option<RedLockGuard>> {
        let red = self.for_thread();
        let g = block_on(&self.rt, async move { red.try_acquire(lease).await })?;
        Ok(g.map(|g| self.guard(g)))
    }
    /// Retry until a quorum grants it or `wait` has passed.
    /// ```no_run
    /// # fn demo(red: dlock_client::blocking::RedLock) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let g = red.try_acquire_for(Duration::from_secs(2), Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_for(&self, wait: Duration, lease: Duration) -> Result<Option<RedLockGuard>> {
        let red = self.for_thread();
        let g = block_on(
            &self.rt,
            async move { red.try_acquire_for(wait, lease).await },
        )?;
        Ok(g.map(|g| self.guard(g)))
    }
}

/// A blocking RedLock held on a quorum of servers (see [`crate::RedLockGuard`]). Dropping it
/// releases (before `drop` returns, outside an async runtime).
pub struct RedLockGuard {
    held: Held<crate::RedLockGuard>,
}

impl RedLockGuard {
    fn g(&self) -> &crate::RedLockGuard {
        self.held.g()
    }
    /// The validity computed at grant: `lease - elapsed - drift`.
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) { println!("{:?}", g.validity()); }
    /// ```
    pub fn validity(&self) -> Duration {
        self.g().validity()
    }
    /// Still within the validity?
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) { assert!(g.is_valid()); }
    /// ```
    pub fn is_valid(&self) -> bool {
        self.g().is_valid()
    }
    /// How long the validity still lasts (zero once it is over).
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) { println!("{:?}", g.remaining()); }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.g()
            .valid_until()
            .saturating_duration_since(tokio::time::Instant::now())
    }
    /// Servers that granted it.
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) { assert!(g.granted() >= 1); }
    /// ```
    pub fn granted(&self) -> usize {
        self.g().granted()
    }
    /// The per-server fencing tokens.
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) { println!("{:?}", g.fencing_tokens()); }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.g().fencing_tokens()
    }
    /// The signal that fires at the validity deadline or when a quorum is lost.
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) { assert!(g.lost().check().is_none()); }
    /// ```
    pub fn lost(&self) -> GroupLost {
        self.g().lost()
    }
    /// Block up to `timeout` for the lock to count as lost; `None` if still held.
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) {
    /// assert_eq!(g.wait_lost(std::time::Duration::from_millis(10)), None);
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        self.held.wait_lost(timeout)
    }
    /// Release on every server: `Ok(())` if a quorum still held it.
    /// ```no_run
    /// # fn demo(g: dlock_client::blocking::RedLockGuard) -> dlock_client::Result<()> {
    /// g.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Result<()> {
        self.held.release()
    }
}
