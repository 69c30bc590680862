//! The mutex suite again, through semaphores of one permit: [`AsSemaphore`] wraps a harness
//! so that every exclusive obtain its backends receive becomes one permit of a semaphore
//! of 1, and reads the answers back as the mutex's. A backend whose shared holds keep the
//! contract passes the whole mutex suite this way too (madelson/DistributedLock's
//! `TestingSemaphoreAsMutexProvider` is the idea).
//!
//! ```ignore
//! mod as_semaphore {
//!     lock_conformance::suite!("file", lock_conformance::AsSemaphore(Files::new()));
//! }
//! ```

use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{Capabilities, ObtainRequest, ProlongRequest};
use lock_core::{Key, LockBackend, LockState, Mode, ObtainOutcome, ProlongOutcome, Result};

use crate::{Faulty, Harness};

/// A harness whose backends hold every lock as one permit of a semaphore of 1. Their
/// capabilities say no shared holds, so the shared cases (which ran on the backend itself)
/// are skipped.
pub struct AsSemaphore<H>(pub H);

/// One permit of a semaphore of 1 for every exclusive obtain of `inner`.
#[derive(Debug)]
struct SemaphoreOfOne {
    inner: Arc<dyn LockBackend>,
}

const ONE: Mode = Mode::Shared {
    capacity: 1,
    weight: 1,
};

/// A semaphore of 1's state as the mutex's: one live hold is `Held`.
fn as_mutex(state: LockState) -> LockState {
    match state {
        LockState::Shared { holds, .. } => match <[_; 1]>::try_from(holds) {
            Ok([h]) => LockState::Held {
                holder: h.holder,
                fencing: h.fencing,
                remaining: h.remaining,
                holds: h.holds,
            },
            Err(holds) => LockState::Shared {
                capacity: 1,
                holds,
                writer_waiting: None,
            },
        },
        other => other,
    }
}

#[async_trait]
impl Layer for SemaphoreOfOne {
    fn inner(&self) -> &dyn LockBackend {
        &*self.inner
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().shared(false)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let req = match req.mode {
            Mode::Exclusive => req.with_mode(ONE).with_queue(false),
            Mode::Shared { .. } => req,
        };
        self.inner.obtain(req).await
    }

    /// The inner backend's batches: prolongs are not changed.
    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        self.inner.prolongate_many(reqs).await
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        self.inner.inspect(key).await.map(as_mutex)
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        self.inner.force_release(key).await.map(as_mutex)
    }
}

/// The wrapped backends the harness made (by address), with the inner ones its methods
/// need. Weak: an inner backend lives as long as its wrapper, and no longer.
static MADE: Mutex<Vec<(usize, Weak<dyn LockBackend>)>> = Mutex::new(Vec::new());

fn wrap(inner: Arc<dyn LockBackend>) -> Arc<dyn LockBackend> {
    let weak = Arc::downgrade(&inner);
    let outer: Arc<dyn LockBackend> = Arc::new(Layered(SemaphoreOfOne { inner }));
    let id = Arc::as_ptr(&outer).cast::<()>() as usize;
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    // An address may come again once its wrapper is gone: drop what is gone.
    made.retain(|(_, inner)| inner.strong_count() > 0);
    made.push((id, weak));
    outer
}

/// Whether `backend` is one of ours: its exclusive holds are shares, whose release wakes
/// every waiter (the rules: a share's weight is not a waiter's), where a mutex's wakes one.
pub(crate) fn holds_as_shares(backend: &Arc<dyn LockBackend>) -> bool {
    let id = Arc::as_ptr(backend).cast::<()>() as usize;
    MADE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|(made, inner)| *made == id && inner.strong_count() > 0)
}

/// The backend `outer` wraps (itself when it is not one of ours).
fn unwrap(outer: &Arc<dyn LockBackend>) -> Arc<dyn LockBackend> {
    let id = Arc::as_ptr(outer).cast::<()>() as usize;
    MADE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .rev()
        .find(|(made, _)| *made == id)
        .and_then(|(_, inner)| inner.upgrade())
        .unwrap_or_else(|| Arc::clone(outer))
}

#[async_trait]
impl<H: Harness> Harness for AsSemaphore<H> {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        wrap(self.0.backend().await)
    }

    async fn lose_data(&self, backend: &Arc<dyn LockBackend>) -> bool {
        self.0.lose_data(&unwrap(backend)).await
    }

    async fn drop_connections(&self, backend: &Arc<dyn LockBackend>) -> bool {
        self.0.drop_connections(&unwrap(backend)).await
    }

    async fn namespaced(&self, namespace: &str) -> Option<Arc<dyn LockBackend>> {
        self.0.namespaced(namespace).await.map(wrap)
    }

    async fn behind_faults(&self) -> Option<Faulty> {
        let faulty = self.0.behind_faults().await?;
        Some(Faulty {
            backend: wrap(faulty.backend),
            direct: wrap(faulty.direct),
            ..faulty
        })
    }

    async fn shared_config(&self) -> Option<String> {
        self.0.shared_config().await
    }

    async fn lasting_records(&self) -> Option<u64> {
        self.0.lasting_records().await
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        wrap(self.0.connect(config).await)
    }
}
