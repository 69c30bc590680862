//! The whole suite on the reference backend, and the mutex suite again through semaphores
//! of one permit.

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

    async fn lasting_records(&self) -> Option<u64> {
        Some(self.0.records() as u64)
    }
}

fn fastrand_u64() -> u64 {
    let token = lock_core::backend::Token::generate().expect("OS random generator");
    u64::from_le_bytes(token.as_bytes()[..8].try_into().expect("8 bytes"))
}

mod direct {
    use super::*;
    lock_conformance::suite!("memory", Memory(MemoryBackend::new()));
}

/// The mutex suite again, every lock one permit of a semaphore of 1.
mod as_semaphore {
    use super::*;
    lock_conformance::suite!(
        "memory",
        lock_conformance::AsSemaphore(Memory(MemoryBackend::new()))
    );
}

mod memory_fence {
    lock_conformance::fence_suite!(
        "memory fence",
        lock_conformance::fence::MemoryFenceHarness::default()
    );
}
