//! tests/conformance.rs: the whole suite on my backend (distlock with the `conformance` feature).
use distlock::conformance::{async_trait, Harness};
use distlock::LockBackend;
use std::sync::Arc;

struct Mine;

#[async_trait]
impl Harness for Mine {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        // Yours, on a namespace of its own: MyBackend::connect_in_fresh_namespace().await
        Arc::new(distlock::MemoryBackend::new())
    }
}

distlock::conformance::suite!("memory", Mine);
