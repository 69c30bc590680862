//! A backend whose server keeps holds longer than asked, rounded up as a lease-based store
//! grants them (`Capabilities::expiry`): the model-based property accepts it when it
//! declares how it rounds, and catches it when it does not.
//!
//! The wrapper rounds every ttl and cooldown up to a multiple of 200 ms, at least 400 ms,
//! and answers `Acquired` with the ttl asked (the client's validity is always the ttl it
//! asked for). That is what an etcd backend does with whole-second leases, scaled down.

mod broken_support;

use std::sync::Arc;
use std::time::Duration;

use broken_support::run;
use lock_conformance::{async_trait, case_count, cases, Harness, Suite};
use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{Capabilities, Expiry, ObtainRequest, ProlongRequest, ReleaseRequest};
use lock_core::{
    LockBackend, MemoryBackend, ObtainOutcome, ProlongOutcome, ReleaseOutcome, Result, Ttl,
};

/// How the wrapper rounds.
const ROUNDING: Expiry = Expiry {
    granularity: Duration::from_millis(200),
    minimum: Duration::from_millis(400),
    lag: Duration::ZERO,
};

fn rounded(ttl: Ttl) -> Ttl {
    Ttl::new(ROUNDING.longest(ttl.as_duration())).expect("a rounded ttl is a ttl")
}

#[derive(Debug)]
struct Coarse {
    inner: MemoryBackend,
    /// What the wrapper says of its expiry.
    declared: Expiry,
}

#[async_trait]
impl Layer for Coarse {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn name(&self) -> &'static str {
        "coarse"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().expiry(self.declared)
    }

    async fn obtain(&self, mut req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let asked = req.ttl;
        req.ttl = rounded(asked);
        Ok(match self.inner.obtain(req).await? {
            ObtainOutcome::Acquired { fencing, .. } => ObtainOutcome::Acquired {
                fencing,
                ttl: asked,
            },
            other => other,
        })
    }

    async fn prolongate(&self, mut req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        req.ttl = rounded(req.ttl);
        self.inner.prolongate(req).await
    }

    async fn release(&self, mut req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        req.delay_after = req.delay_after.map(rounded);
        self.inner.release(req).await
    }
}

struct CoarseHarness(Expiry);

#[async_trait]
impl Harness for CoarseHarness {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(Layered(Coarse {
            inner: MemoryBackend::new(),
            declared: self.0,
        }))
    }
}

#[test]
fn the_model_accepts_holds_kept_longer_when_the_backend_says_so() {
    let suite = Suite::new("coarse", CoarseHarness(ROUNDING));
    let result = run(cases::model_sequences_with(&suite, case_count(), 16));
    assert!(result.is_ok(), "{}", result.unwrap_err());
}

#[test]
fn the_model_catches_holds_kept_longer_than_the_backend_says() {
    let suite = Suite::new("coarse", CoarseHarness(Expiry::EXACT));
    let result = run(cases::model_sequences_with(&suite, case_count() * 4, 16));
    let err = result.expect_err("model_sequences did not catch holds kept past their ttl");
    println!("model_sequences caught the undeclared rounding: {err}");
}
