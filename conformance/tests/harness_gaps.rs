//! A harness that leaves a method out skips the cases that need it, unless the backend's
//! capabilities say the case applies: then the case fails, naming the method to implement.

mod broken_support;

use std::sync::Arc;

use broken_support::run;
use lock_conformance::{async_trait, cases, Harness, Suite};
use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::Capabilities;
use lock_core::{LockBackend, MemoryBackend};

/// The memory backend, claiming (or not) to be reached over a network.
#[derive(Debug)]
struct Claims {
    inner: MemoryBackend,
    cross_host: bool,
}

impl Layer for Claims {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().cross_host(self.cross_host)
    }
}

/// A harness of the one required method.
struct OneMethod {
    cross_host: bool,
}

#[async_trait]
impl Harness for OneMethod {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(Layered(Claims {
            inner: MemoryBackend::new(),
            cross_host: self.cross_host,
        }))
    }
}

#[test]
fn a_harness_without_lose_data_skips_the_data_loss_case() {
    let suite = Suite::new("one method", OneMethod { cross_host: false });
    run(cases::data_loss_is_lost_and_fencing_still_grows(&suite)).expect("skipped, green");
}

#[test]
fn a_networked_backend_without_lose_data_fails_the_data_loss_case() {
    let suite = Suite::new("one method", OneMethod { cross_host: true });
    let failure = run(cases::data_loss_is_lost_and_fencing_still_grows(&suite))
        .expect_err("a networked backend must lose its data on purpose");
    assert!(
        failure.to_string().contains("Harness::lose_data"),
        "{failure}"
    );
}
