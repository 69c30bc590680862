//! A backend of your own, checked by the conformance suite.
//!
//! `AuditedBackend` wraps any backend and counts what it is asked: the kind of decorator a
//! team writes for metrics or auditing. It is a `Layer` (the calls it does not change go
//! to the inner backend by themselves) and `Layered` makes it a `LockBackend`, so it must
//! keep the whole contract; the suite checks that it does. (A backend on a storage of your
//! own is `storage_backend.rs`.)
//!
//! ```text
//! cargo run -p examples --example custom_backend      # a few cases, printed
//! cargo test -p examples --example custom_backend     # the whole suite, as tests
//! ```
//!
//! In your own crate, the whole suite is one line in a test file:
//! `distlock::conformance::suite!("audited", MyHarness);` (see this file's `tests` module).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use distlock::backend::layer::{Layer, Layered};
use distlock::backend::{ObtainRequest, ProlongRequest, ReleaseRequest};
use distlock::conformance::{async_trait, cases, Harness, Suite};
use distlock::{
    Key, LockBackend, LockState, MemoryBackend, ObtainOutcome, ProlongOutcome, ReleaseOutcome,
    Result,
};

/// Counts every call, then hands it to the inner backend.
#[derive(Debug)]
struct AuditedBackend<B> {
    inner: B,
    calls: AtomicU64,
}

impl<B> AuditedBackend<B> {
    const NAME: &'static str = "audited";

    fn new(inner: B) -> Self {
        AuditedBackend {
            inner,
            calls: AtomicU64::new(0),
        }
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// A layer: every call it does not override goes straight to `inner` (`subscribe`,
/// `capabilities`), and `prolongate_many` comes through `prolongate`, one lock at a time.
#[async_trait]
impl<B: LockBackend> Layer for AuditedBackend<B> {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn name(&self) -> &'static str {
        Self::NAME
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.count();
        self.inner.obtain(req).await
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        self.count();
        self.inner.prolongate(req).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.count();
        self.inner.release(req).await
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        self.count();
        self.inner.inspect(key).await
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        self.count();
        self.inner.force_release(key).await
    }
}

/// What the suite needs: a fresh backend per call (namespaces that never meet), and, for
/// the fault cases, a way to lose the data.
struct Audited(MemoryBackend);

#[async_trait]
impl Harness for Audited {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        let namespace = format!(
            "ns-{}:",
            distlock::backend::Token::generate().unwrap().to_hex()
        );
        Arc::new(Layered(AuditedBackend::new(self.0.namespaced(namespace))))
    }

    /// The data-loss case needs a way to lose everything, as a server restart would.
    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        self.0.simulate_data_loss();
        true
    }
}

/// Runs every case of the suite, in order, printing each verdict; exits on the first
/// failure. `for_each_case!` hands it the suite's one list of cases.
macro_rules! check_all {
    ($($case:ident),* $(,)?) => {
        async fn check_all(suite: &Suite) {
            $(
                match cases::$case(suite).await {
                    Ok(()) => println!("  ok    {}", stringify!($case)),
                    Err(failure) => {
                        println!("  FAIL  {}: {failure}", stringify!($case));
                        std::process::exit(1);
                    }
                }
            )*
        }
    };
}
distlock::conformance::for_each_case!(check_all;);

#[tokio::main]
async fn main() {
    println!("the conformance suite on AuditedBackend<MemoryBackend>:");
    let suite = Suite::new("audited", Audited(MemoryBackend::new()));
    check_all(&suite).await;
    println!("all passed; `cargo test -p examples --example custom_backend` runs them as tests");
}

#[cfg(test)]
mod tests {
    use super::*;

    distlock::conformance::suite!("audited", Audited(MemoryBackend::new()));
}
