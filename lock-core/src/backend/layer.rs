//! A backend that wraps another: implement [`Layer`] with the one call you change (count
//! it, time it, fail it on purpose) and everything else is forwarded to the inner backend;
//! [`Layered`] makes it a [`LockBackend`].
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! use lock_core::backend::layer::{Layer, Layered};
//! use lock_core::backend::{async_trait, ObtainRequest};
//! use lock_core::{LockBackend, Locker, MemoryBackend, ObtainOutcome, Result};
//!
//! /// Counts obtains; every other call goes straight through.
//! #[derive(Debug)]
//! struct CountObtains {
//!     inner: MemoryBackend,
//!     obtains: AtomicU64,
//! }
//!
//! #[async_trait]
//! impl Layer for CountObtains {
//!     fn inner(&self) -> &dyn LockBackend {
//!         &self.inner
//!     }
//!     async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
//!         self.obtains.fetch_add(1, Ordering::Relaxed);
//!         self.inner.obtain(req).await
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! let counted = Arc::new(Layered(CountObtains {
//!     inner: MemoryBackend::new(),
//!     obtains: AtomicU64::new(0),
//! }));
//! let locker = Locker::new(counted.clone());
//! let guard = locker.lock("job").try_obtain().await?.obtained().expect("free");
//! guard.release().await?;
//! assert_eq!(counted.0.obtains.load(Ordering::Relaxed), 1);
//! # Ok(()) }
//! ```
//!
//! A layer keeps the contract as long as what it changes does: the conformance suite
//! checks a layer as it checks any backend.

use std::fmt;

use super::{
    async_trait, prolongate_each_with, Capabilities, KeyPage, KeysRequest, LockBackend,
    ObtainRequest, ProlongRequest, ReleaseRequest, ReleaseSubscription,
};
use crate::{Key, LockState, ObtainOutcome, ProlongOutcome, ReleaseOutcome, Result};

/// A wrapper around another backend: every method forwards to [`Layer::inner`] unless the
/// layer overrides it. Wrap it in [`Layered`] to use it as a [`LockBackend`].
///
/// [`Layer::prolongate_many`] is the one exception: by default it goes through the layer's
/// own [`Layer::prolongate`], one call per lock (as [`prolongate_each`](super::prolongate_each)), so that a layer
/// that changes `prolongate` changes the watchdog's renewals too. A layer that leaves
/// `prolongate` alone and wants the inner backend's batches overrides it to forward.
#[async_trait]
pub trait Layer: fmt::Debug + Send + Sync + 'static {
    /// The wrapped backend.
    fn inner(&self) -> &dyn LockBackend;

    /// See [`LockBackend::name`]; the inner backend's by default.
    fn name(&self) -> &'static str {
        self.inner().name()
    }

    /// See [`LockBackend::capabilities`]; the inner backend's by default.
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }

    /// See [`LockBackend::obtain`].
    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.inner().obtain(req).await
    }

    /// See [`LockBackend::prolongate`].
    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        self.inner().prolongate(req).await
    }

    /// See [`LockBackend::prolongate_many`]: by default each request through
    /// [`Layer::prolongate`] (see the trait's docs).
    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        prolongate_each_with(reqs, |req| self.prolongate(req)).await
    }

    /// See [`LockBackend::release`].
    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.inner().release(req).await
    }

    /// See [`LockBackend::inspect`].
    async fn inspect(&self, key: &Key) -> Result<LockState> {
        self.inner().inspect(key).await
    }

    /// See [`LockBackend::force_release`].
    async fn force_release(&self, key: &Key) -> Result<LockState> {
        self.inner().force_release(key).await
    }

    /// See [`LockBackend::subscribe`].
    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.inner().subscribe(key).await
    }

    /// See [`LockBackend::list_keys`].
    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        self.inner().list_keys(req).await
    }
}

/// A [`Layer`] as a [`LockBackend`]. The layer is its public field, and its methods are
/// reached through `Deref`.
#[derive(Debug, Clone, Default)]
pub struct Layered<L>(pub L);

impl<L> std::ops::Deref for Layered<L> {
    type Target = L;

    fn deref(&self) -> &L {
        &self.0
    }
}

#[async_trait]
impl<L: Layer> LockBackend for Layered<L> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.0.obtain(req).await
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        self.0.prolongate(req).await
    }

    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        self.0.prolongate_many(reqs).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.0.release(req).await
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        self.0.inspect(key).await
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        self.0.force_release(key).await
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.0.subscribe(key).await
    }

    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        self.0.list_keys(req).await
    }
}
