//! The whole suite on the reference backend.

use std::sync::Arc;

use lock_conformance::{async_trait, Harness};
use lock_core::{LockBackend, MemoryBackend};

/// One store per test; every backend a fresh namespace of it.
struct Memory(MemoryBackend);

#[async_trait]
impl Harness for Memory {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        let namespace = format!("ns-{:016x}:", fastrand_u64());
        Arc::new(self.0.namespaced(namespace))
    }

    async fn namespaced(&self, namespace: &str) -> Option<Arc<dyn LockBackend>> {
        Some(Arc::new(self.0.namespaced(namespace)))
    }

    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        self.0.simulate_data_loss();
        true
    }
}

fn fastrand_u64() -> u64 {
    let token = lock_core::backend::Token::generate().expect("OS random generator");
    u64::from_le_bytes(token.as_bytes()[..8].try_into().expect("8 bytes"))
}

lock_conformance::suite!("memory", Memory(MemoryBackend::new()));
