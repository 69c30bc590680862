//! Who holds what: the locks under a prefix, page by page, across every process that uses
//! the backend.
//!
//! [`list`] asks the backend for a page of key names ([`LockBackend::list_keys`]) and
//! inspects each ([`LockBackend::inspect`]), so what it shows of a key is what `inspect`
//! shows: mode, every hold (holder, fencing token, remaining time, reentrant count,
//! weight), a cooldown, a waiting writer's marker. Never an owner token: a listing cannot
//! be used to release or prolong someone else's hold. Keys with nothing live (a record
//! kept for late detection) are left out.
//!
//! ```
//! use lock_core::backend::KeysRequest;
//! use lock_core::{listing, Key, Locker, LockState, MemoryBackend, Ttl};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! let backend = MemoryBackend::new();
//! let locker = Locker::new(backend.clone());
//! let _report = locker.try_lock("jobs/report", Ttl::secs(30)).await?.expect("free");
//! let _other = locker.try_lock("cache/warm", Ttl::secs(30)).await?.expect("free");
//!
//! let page = listing::list(&backend, KeysRequest { prefix: "jobs/", cursor: None, limit: 100 })
//!     .await?;
//! assert_eq!(page.locks.len(), 1);
//! assert_eq!(page.locks[0].key, Key::new("jobs/report")?);
//! assert!(matches!(page.locks[0].state, LockState::Held { .. }));
//! assert!(page.next.is_none(), "one page held them all");
//! # Ok(()) }
//! ```
//!
//! To walk every key, call again with the page's `next` until it is `None`: memory stays
//! bounded by the limit whatever the number of keys. Each page is a snapshot of its own;
//! see [`Listing`](crate::backend::Listing) for what a walk promises while keys come and go.

use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde::Serialize;
use tracing::Instrument;

use crate::backend::{Cursor, KeysRequest};
use crate::{Key, LockBackend, LockState, Result};

/// How many keys of a page are inspected at once.
pub const INSPECT_CONCURRENCY: usize = 16;

/// One key of a listing and its state, as [`LockBackend::inspect`] answered it.
///
/// Serializes as the key beside its state:
/// `{"key":"jobs/report","state":"held","holder":{...},"fencing":7,"remaining_ms":2900,"holds":1}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    /// The key.
    pub key: Key,
    /// What holds it (never [`LockState::Free`] in a listing).
    #[serde(flatten)]
    pub state: LockState,
}

/// A page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// The keys of the page with something live (a hold, a cooldown, a waiting writer), in
    /// the backend's order.
    pub locks: Vec<Listed>,
    /// Where the next page starts; `None` when the walk is over. A page may hold no lock
    /// and still have a `next`.
    pub next: Option<Cursor>,
}

/// One page of the locks under `req.prefix`: key names from the backend, each inspected.
///
/// # Errors
/// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) when the backend cannot list
/// ([`Capabilities::listing`](crate::backend::Capabilities::listing)), saying so;
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a limit of 0 or over
/// [`KeysRequest::MAX_LIMIT`]; otherwise the first error of the listing or of an
/// inspection (each call bounded by the backend's own deadline).
///
/// # Cancel safety
/// It only reads: dropping the future leaves every lock as it was.
pub async fn list<B: LockBackend + ?Sized>(backend: &B, req: KeysRequest<'_>) -> Result<ListPage> {
    req.validate()?;
    let span = tracing::debug_span!("lock.list", backend = backend.name(), prefix = req.prefix);
    async {
        let page = backend.list_keys(req).await?;
        let states: Vec<(Key, LockState)> = stream::iter(page.keys)
            .map(|key| async move {
                let state = backend.inspect(&key).await?;
                Ok::<_, crate::Error>((key, state))
            })
            .buffered(INSPECT_CONCURRENCY)
            .try_collect()
            .await?;
        let locks = states
            .into_iter()
            .filter(|(_, state)| !matches!(state, LockState::Free))
            .map(|(key, state)| Listed { key, state })
            .collect();
        Ok(ListPage {
            locks,
            next: page.next,
        })
    }
    .instrument(span)
    .await
}
