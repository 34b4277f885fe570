//! The hold: [`LockGuard`], a held lock (Rust's name for the hold the other clients
//! return), and its release.

use std::sync::Arc;

use redis::Value;

use crate::holds::Entry;
use crate::{Client, Error, LostReason, LostSignal, Result};

/// A held lock. Release it with [`release`](LockGuard::release); dropping it releases in the
/// background. While it lives (and was acquired without an explicit lease) the client's
/// watchdog renews the lease.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let lock = client.lock("cron");
/// let g1 = lock.acquire().await?;
/// let g2 = lock.try_acquire().await?.unwrap(); // reentrant: same owner
/// assert_eq!(g2.hold_count(), 2);
/// g2.release().await?;
/// drop(g1); // released in the background
/// # Ok(()) }
/// ```
pub struct LockGuard {
    client: Client,
    entry: Arc<Entry>,
    hold_count: u64,
    token: Option<u64>,
    /// Holds this guard gives back: 1, or a semaphore guard's permits.
    count: u64,
    done: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.entry.key)
            .field("owner", &self.entry.owner)
            .field("hold_count", &self.hold_count)
            .field("token", &self.token)
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        client: Client,
        entry: Arc<Entry>,
        hold_count: u64,
        token: Option<u64>,
        count: u64,
    ) -> LockGuard {
        LockGuard {
            client,
            entry,
            hold_count,
            token,
            count,
            done: false,
        }
    }

    /// The lock key.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// assert_eq!(client.lock("k").acquire().await?.name(), "k");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.entry.key
    }
    /// The owner id that holds it.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert!(g.owner_id().starts_with(client.owner_prefix()));
    /// # Ok(()) }
    /// ```
    pub fn owner_id(&self) -> &str {
        &self.entry.owner
    }
    /// The owner's hold count right after this acquire (1 = fresh grant).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert_eq!(g.hold_count(), 1);
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> u64 {
        self.hold_count
    }
    /// The fencing token, when the lock was acquired [`fenced`](crate::Lock::fenced).
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert_eq!(g.fencing_token(), None); // not fenced
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.token
    }
    /// Whether the watchdog renews this lock.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert!(g.is_watched());
    /// # Ok(()) }
    /// ```
    pub fn is_watched(&self) -> bool {
        self.entry.is_watched()
    }
    /// A signal that resolves when the lock is lost (or released); its
    /// [`check`](LostSignal::check) tells without waiting.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// assert!(g.lost().check().is_none());
    /// let lost = g.lost();
    /// tokio::spawn(async move { eprintln!("lost: {:?}", lost.await) });
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> LostSignal {
        LostSignal {
            entry: self.entry.clone(),
        }
    }

    /// Renew the lease now, at your request (the watchdog does it anyway for watched locks):
    /// the lease becomes the lock's lease again, counted from now, and a bound hold is bound
    /// to the client's shared connection again. `Ok(())` when the server renewed it;
    /// [`Error::NotHeld`] when this owner no longer holds it (deleted, expired, taken
    /// over) or the client already counts it as lost (see [`LostSignal::check`]); then the
    /// hold is lost. A hold acquired with an explicit lease gets that lease again.
    ///
    /// Cancel safety: not cancel-safe in the sense that the renewal may or may not have
    /// reached the server when the future is dropped; dropping it never shortens the lease.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let g = client.lock("k").acquire_with_lease(Duration::from_secs(5)).await?;
    /// g.renew().await?; // 5 s from now
    /// # Ok(()) }
    /// ```
    pub async fn renew(&self) -> Result<()> {
        let inner = &self.client.inner;
        inner
            .within_response_timeout(crate::watchdog::renew_now(
                inner,
                &self.client.backend,
                &self.entry,
            ))
            .await
    }

    /// Release this hold: `Ok(())` when the owner still held the lock (the hold count went
    /// down, and the key is gone if it was the last hold), [`Error::NotHeld`] when it was no
    /// longer held (expired, deleted, taken over), as Redisson's `unlock()`.
    ///
    /// Cancel safety: not cancel-safe in the sense that the release may or may not have
    /// reached the server when the future is dropped; the watchdog has stopped renewing
    /// either way, so the lock is gone at the latest when its lease ends.
    /// ```no_run
    /// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
    /// let g = client.lock("k").acquire().await?;
    /// g.release().await?; // Err(Error::NotHeld(..)) if it had expired
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        release(&self.client, &self.entry, self.count).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            let c = self.client.clone();
            let e = self.entry.clone();
            let count = self.count;
            self.client.runtime().spawn(async move {
                let _ = release(&c, &e, count).await;
            });
        }
    }
}

/// Give back `count` holds of `entry` (1, or a semaphore guard's permits), within one
/// response time-out. A hold the client already counts as lost is still given back on the
/// server (it may not have ended there yet), and answers [`Error::NotHeld`] either way:
/// one answer to releasing what is no longer held.
async fn release(client: &Client, entry: &Arc<Entry>, count: u64) -> Result<()> {
    let lost_before = entry.lost_now().is_some();
    let r = client
        .inner
        .within_response_timeout(release_now(client, entry, count))
        .await;
    match r {
        Ok(()) if lost_before => Err(Error::NotHeld(entry.key.to_string())),
        r => r,
    }
}

async fn release_now(client: &Client, entry: &Arc<Entry>, count: u64) -> Result<()> {
    let inner = &client.inner;
    let _flight = inner
        .in_flight
        .start(&entry.key, &entry.owner, entry.kind)
        .await;
    let last = inner.registry.give_back(entry, count);
    let key = &entry.key;
    let v = client
        .backend
        .release(inner, entry, count)
        .await
        .map_err(|e| Error::from_redis(key, e))?;
    match v {
        Value::Int(1) => {
            // Freed. Other guards of this owner (if any) no longer hold it either.
            if last {
                entry.mark(LostReason::Released);
            } else {
                entry.mark(LostReason::NotHeld);
                inner.registry.forget(entry);
            }
            Ok(())
        }
        Value::Int(0) => {
            if last {
                entry.mark(LostReason::Released);
            }
            Ok(())
        }
        Value::Nil => {
            entry.mark(LostReason::NotHeld);
            inner.registry.forget(entry);
            Err(Error::NotHeld(key.to_string()))
        }
        Value::ServerError(e) => Err(Error::from_server_value(key, e)),
        other => Err(Error::Protocol(format!("release answered {other:?}"))),
    }
}
