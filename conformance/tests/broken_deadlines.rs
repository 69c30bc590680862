//! The suite must catch a backend whose calls outlive their deadline under contention (each
//! retry after a conflict given a fresh deadline, as etcd's were): the memory backend
//! "behind faults", with a layer that takes four times the deadline on a contended obtain.

mod broken_support;

use std::sync::Arc;
use std::time::Duration;

use broken_support::run;
use lock_conformance::{async_trait, cases, Faulty, Harness, NetworkFaults, Suite};
use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::ObtainRequest;
use lock_core::{LockBackend, MemoryBackend, ObtainOutcome, Result};

const DEADLINE: Duration = Duration::from_millis(300);

/// No network to fault: the case only slows replies, which this backend has none of.
struct NoNetwork;

impl NetworkFaults for NoNetwork {
    fn freeze(&self) {}
    fn delay_replies(&self, _: Duration) {}
    fn cut(&self) {}
    fn heal(&self) {}
}

/// Busy obtains take four times the deadline before they answer when `slow`, as rounds of
/// retries after conflicts would with a fresh deadline each.
#[derive(Debug)]
struct Contended {
    inner: Arc<MemoryBackend>,
    slow: bool,
}

#[async_trait]
impl Layer for Contended {
    fn inner(&self) -> &dyn LockBackend {
        &*self.inner
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let outcome = self.inner.obtain(req).await?;
        if self.slow && matches!(outcome, ObtainOutcome::Busy(_)) {
            tokio::time::sleep(DEADLINE * 4).await;
        }
        Ok(outcome)
    }
}

struct BehindFaults {
    slow: bool,
}

#[async_trait]
impl Harness for BehindFaults {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(MemoryBackend::new())
    }

    async fn behind_faults(&self) -> Option<Faulty> {
        let inner = Arc::new(MemoryBackend::new());
        Some(Faulty {
            backend: Arc::new(Layered(Contended {
                inner: Arc::clone(&inner),
                slow: self.slow,
            })),
            direct: inner,
            faults: Box::new(NoNetwork),
            deadline: DEADLINE,
        })
    }
}

#[test]
fn calls_that_outlive_their_deadline_under_contention_are_caught() {
    let suite = Suite::new("contended", BehindFaults { slow: true });
    let failure = run(cases::calls_under_contention_end_by_their_deadline(&suite))
        .expect_err("a busy obtain took four times its deadline");
    println!("caught: {failure}");
}

#[test]
fn calls_within_their_deadline_pass() {
    let suite = Suite::new("contended", BehindFaults { slow: false });
    run(cases::calls_under_contention_end_by_their_deadline(&suite)).expect("within the deadline");
}
