//! A backend whose server keeps holds longer than asked, rounded up as a lease-based store
//! grants them (`Capabilities::expiry`): the model-based property accepts it when it
//! declares how it rounds, and catches it when it does not.
//!
//! The whole suite passes on it when it declares its rounding (each timed case stretches
//! its timeline by the declared expiry), and the timed cases fail when it does not.
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

/// One store per test; every backend a fresh namespace of it, rounded by the wrapper.
struct CoarseHarness {
    declared: Expiry,
    store: MemoryBackend,
}

impl CoarseHarness {
    fn new(declared: Expiry) -> Self {
        CoarseHarness {
            declared,
            store: MemoryBackend::new(),
        }
    }

    fn wrap(&self, namespace: &str) -> Arc<dyn LockBackend> {
        Arc::new(Layered(Coarse {
            inner: self.store.namespaced(namespace),
            declared: self.declared,
        }))
    }
}

#[async_trait]
impl Harness for CoarseHarness {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        let token = lock_core::backend::Token::generate().expect("OS random generator");
        self.wrap(&format!("ns-{}:", token.to_hex()))
    }

    async fn namespaced(&self, namespace: &str) -> Option<Arc<dyn LockBackend>> {
        Some(self.wrap(namespace))
    }

    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        self.store.simulate_data_loss();
        true
    }
}

#[test]
fn the_model_accepts_holds_kept_longer_when_the_backend_says_so() {
    let suite = Suite::new("coarse", CoarseHarness::new(ROUNDING));
    let result = run(cases::model_sequences_with(&suite, case_count(), 16));
    assert!(result.is_ok(), "{}", result.unwrap_err());
}

#[test]
fn the_model_catches_holds_kept_longer_than_the_backend_says() {
    // One seed, the same sequences each run: a catch that never depends on the draw.
    let suite = Suite::new("coarse", CoarseHarness::new(Expiry::EXACT)).with_seed(1);
    let result = run(cases::model_sequences_with(&suite, case_count() * 4, 16));
    let err = result.expect_err("model_sequences did not catch holds kept past their ttl");
    println!("model_sequences caught the undeclared rounding: {err}");
}

/// The named cases that time an expiry catch holds kept longer than the backend declares:
/// undeclared, the 200 ms steps (at least 400 ms) keep a 150 ms or 200 ms hold past the
/// step that expects it over.
#[test]
fn the_timed_cases_catch_holds_kept_longer_than_the_backend_says() {
    let suite = Suite::new("coarse", CoarseHarness::new(Expiry::EXACT));
    let stolen = run(cases::late_calls_after_steal_are_lost(&suite))
        .expect_err("late_calls_after_steal_are_lost missed a hold kept past its ttl");
    println!("late_calls_after_steal_are_lost: {stolen}");
    let fencing = run(cases::fencing_grows_across_everything(&suite))
        .expect_err("fencing_grows_across_everything missed a hold kept past its ttl");
    println!("fencing_grows_across_everything: {fencing}");
}

/// The whole suite on the wrapper that declares its rounding: every named case that times
/// an expiry runs its timeline stretched by the declared expiry and passes.
mod whole_suite {
    use super::*;
    lock_conformance::suite!("coarse", CoarseHarness::new(ROUNDING));
}
