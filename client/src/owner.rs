//! Owner identities: reentrancy is per owner.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Numbers the owners of this process (`<prefix>:<n>`).
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// The next owner number of this process.
pub(crate) fn next_owner_number() -> u64 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
}

/// An owner identity: reentrancy is per owner. Cheap to clone and `Send`, so one owner can
/// be handed from task to task; a lock acquired by an owner can be re-acquired (hold count
/// + 1) or released by any task using the same owner.
///
/// ```no_run
/// # async fn demo(client: dlock_client::Client) -> dlock_client::Result<()> {
/// let owner = client.owner();
/// let g1 = client.lock_as("job", &owner).acquire().await?;
/// let o2 = owner.clone();
/// let c2 = client.clone();
/// let g2 = tokio::spawn(async move { c2.lock_as("job", &o2).try_acquire().await })
///     .await.unwrap()?.expect("reentrant");
/// assert_eq!(g2.hold_count(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    id: Arc<str>,
}

impl Owner {
    /// An owner with exactly this id (1..=512 bytes; not `mode`).
    ///
    /// ```
    /// let o = dlock_client::Owner::from_id("abc:1");
    /// assert_eq!(o.id(), "abc:1");
    /// ```
    pub fn from_id(id: impl Into<String>) -> Owner {
        Owner {
            id: Arc::from(id.into()),
        }
    }
    /// The owner string stored in the lock hash.
    /// ```
    /// assert_eq!(dlock_client::Owner::from_id("x:1").id(), "x:1");
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The id, shared.
    pub(crate) fn arc_ref(&self) -> &Arc<str> {
        &self.id
    }
}
