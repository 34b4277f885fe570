//! Read-write locks: many readers or one writer, each holder with its own lease.
//!
//! On the native backend this is the module's `DLOCK.RWLOCK` (server-side FIFO queue, fair
//! to writers, fencing tokens). On the script backend it is a Lua read-write lock with the
//! same hash layout (see [`scripts::RW_LOCK_BODY`](crate::scripts::RW_LOCK_BODY)); what
//! differs is listed in the crate README (*Read-write locks*).
//!
//! ```no_run
//! # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
//! let rw = client.rwlock("catalog");
//! let r1 = rw.read().acquire().await?;                   // shared
//! let r2 = client.rwlock("catalog").read().try_acquire().await?.unwrap(); // another reader
//! assert!(client.rwlock("catalog").write().try_acquire().await?.is_none()); // writer waits
//! r1.release().await?;
//! r2.release().await?;
//! # Ok(()) }
//! ```

use crate::{Client, Lock, LockKind, Owner, Result};

/// A read-write lock handle on one key for one owner (Redisson's `RReadWriteLock`).
/// [`read`](RwLock::read) and [`write`](RwLock::write) return ordinary [`Lock`] handles,
/// so the guards have the same API as exclusive locks: `acquire`, `try_acquire`,
/// `try_acquire_for(wait, lease)`, the watchdog, `lost()`, and fencing tokens
/// (`write().fenced()`; native backend).
///
/// Rules (both backends): READ is granted when the lock is free, read-locked, or
/// write-locked by this same owner; WRITE when it is free or write-locked by this owner
/// (reentrant). A reader asking for WRITE gets an error (upgrading would deadlock).
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let rw = client.rwlock("config");
/// let w = rw.write().fenced().acquire().await?;
/// let token = w.fencing_token();
/// let r = rw.read().acquire().await?;      // a writer may also read
/// w.release().await?;                     // now read mode
/// r.release().await?;
/// # let _ = token; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    client: Client,
    name: String,
    owner: Owner,
}

impl RwLock {
    pub(crate) fn new(client: Client, name: String, owner: Owner) -> RwLock {
        RwLock {
            client,
            name,
            owner,
        }
    }

    /// The lock key.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.rwlock("k").name(), "k");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner this handle acts for.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let o = client.owner();
    /// assert_eq!(client.rwlock_as("k", &o).owner(), &o);
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The read side: a [`Lock`] whose guards hold a read lock.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.rwlock("k").read().acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> Lock {
        Lock::new(
            self.client.clone(),
            self.name.clone(),
            self.owner.clone(),
            LockKind::Read,
        )
    }

    /// The write side: a [`Lock`] whose guards hold the write lock.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.rwlock("k").write().acquire().await?;
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> Lock {
        Lock::new(
            self.client.clone(),
            self.name.clone(),
            self.owner.clone(),
            LockKind::Write,
        )
    }

    /// The lock's current mode (`HGET key mode`): `Some(Read)`, `Some(Write)` or `None`
    /// when free. A holder whose lease lapsed still counts until the next command on the
    /// key prunes it.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let rw = client.rwlock("k");
    /// let _g = rw.read().acquire().await?;
    /// assert_eq!(rw.mode().await?, Some(dlock_client::LockKind::Read));
    /// # Ok(()) }
    /// ```
    pub async fn mode(&self) -> Result<Option<LockKind>> {
        let mut conn = self.client.inner.link.shared().clone();
        let m: Option<String> = redis::cmd("HGET")
            .arg(&self.name)
            .arg("mode")
            .query_async(&mut conn)
            .await
            .map_err(|e| crate::Error::from_redis(&self.name, e))?;
        Ok(match m.as_deref() {
            Some("read") => Some(LockKind::Read),
            Some("write") => Some(LockKind::Write),
            _ => None,
        })
    }

    /// Delete the lock whoever holds it (every reader and the writer).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// client.rwlock("stuck").force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.read().force_unlock().await
    }

    /// Whether anyone holds it.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert!(!client.rwlock("free").is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.read().is_locked().await
    }
}

impl Client {
    /// A read-write lock handle on `name` with a new owner (see [`RwLock`]).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let rw = client.rwlock("config");
    /// let r = rw.read().acquire().await?;
    /// r.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        self.rwlock_as(name, &self.owner())
    }

    /// A read-write lock handle on `name` acting for `owner`.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let owner = client.owner();
    /// let w = client.rwlock_as("config", &owner).write().acquire().await?;
    /// assert_eq!(w.owner_id(), owner.id());
    /// # Ok(()) }
    /// ```
    pub fn rwlock_as(&self, name: impl Into<String>, owner: &Owner) -> RwLock {
        RwLock::new(self.clone(), name.into(), owner.clone())
    }
}
