//! Who holds what: the locks under a prefix, page by page, across every process that uses
//! the backend.
//!
//! [`list`] asks the backend for a page of key names ([`LockBackend::list_keys`]) and
//! inspects each ([`LockBackend::inspect`]), so what it shows of a key is what `inspect`
//! shows: mode, every hold (holder, fencing token, remaining time, reentrant count,
//! weight), a cooldown, a waiting writer's marker, and who waits for it (the records of
//! [`crate::waiting`]: tasks and processes). Never an owner token: a listing cannot
//! be used to release or prolong someone else's hold. Keys with nothing live (a record
//! kept for late detection) are left out.
//!
//! ```
//! use std::sync::Arc;
//! use lock_core::backend::KeysRequest;
//! use lock_core::{listing, Key, Locker, LockBackend, LockState, MemoryBackend};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
//! let locker = Locker::new(Arc::clone(&backend));
//! let _report = locker.lock("jobs/report").try_obtain().await?.obtained().expect("free");
//! let _other = locker.lock("cache/warm").try_obtain().await?.obtained().expect("free");
//!
//! let jobs = KeysRequest { prefix: "jobs/", cursor: None, limit: 100 };
//! let page = listing::list(&*backend, jobs).await?;
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
use crate::waiting::record_key;
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
    /// Who waits for it, where waits are recorded ([`crate::waiting`]); `None` when
    /// nobody does, or the backend takes no shared holds to record them with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

/// Who waits for a key: the obtains that have waited at least
/// [`ANNOUNCE_AFTER`](crate::waiting::ANNOUNCE_AFTER) and still do, in every process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Waiting {
    /// Waiting obtains (tasks).
    pub tasks: u32,
    /// The processes they wait in (told apart by host and pid).
    pub processes: u32,
}

impl Waiting {
    /// The waiters a key's waiting record shows: one per hold, processes by holder.
    fn of(record: &LockState) -> Option<Waiting> {
        let LockState::Shared { holds, .. } = record else {
            return None;
        };
        let mut processes: Vec<(&str, u32)> = holds
            .iter()
            .map(|h| (h.holder.host.as_str(), h.holder.pid))
            .collect();
        processes.sort_unstable();
        processes.dedup();
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (!holds.is_empty()).then(|| Waiting {
            tasks: count(holds.len()),
            processes: count(processes.len()),
        })
    }
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
        let recorded = backend.capabilities().shared;
        let listed: Vec<Listed> = stream::iter(page.keys)
            .map(|key| async move {
                let state = backend.inspect(&key).await?;
                let waiting = match recorded && !matches!(state, LockState::Free) {
                    true => Waiting::of(&backend.inspect(&record_key(&key)).await?),
                    false => None,
                };
                Ok::<_, crate::Error>(Listed {
                    key,
                    state,
                    waiting,
                })
            })
            .buffered(INSPECT_CONCURRENCY)
            .try_collect()
            .await?;
        let locks = listed
            .into_iter()
            .filter(|l| !matches!(l.state, LockState::Free))
            .collect();
        Ok(ListPage {
            locks,
            next: page.next,
        })
    }
    .instrument(span)
    .await
}
