//! The adapter's loop: conflicts, the one deadline, the pauses between tries.

use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::backend::codec::AsIs;
use crate::backend::Token;
use crate::HolderInfo;

/// A storage whose every write loses to a concurrent writer: it runs the step, then
/// answers a conflict and stores nothing. Each transaction takes `slow` (a round trip),
/// and the calls have `timeout` as their one deadline, if set.
#[derive(Debug, Default)]
struct AlwaysConflicts {
    transactions: AtomicU32,
    slow: Duration,
    timeout: Option<Duration>,
}

impl Storage for AlwaysConflicts {
    type Codec = AsIs;
    const NAME: &'static str = "always-conflicts";

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
    }
    fn conflicts_within(&self) -> Duration {
        Duration::from_millis(50)
    }
    fn call_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    async fn transact(
        &self,
        _: &Key,
        _: Operation,
        decide: &mut Decide<'_, Token, HolderInfo>,
    ) -> Result<Commit> {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.slow).await;
        decide(Snapshot {
            record: None,
            clock: Clock::millis(1_000),
            fencing_floor: 1,
        })?;
        Ok(Commit::Conflict)
    }
}

/// A call that loses every transaction gives up once `conflicts_within` has passed,
/// with a retry-safe error that says nothing was written, rather than an outcome the
/// storage never stored or a loop without end.
#[tokio::test]
async fn a_call_that_always_conflicts_gives_up_retry_safe() {
    let storage = AlwaysConflicts::default();
    let (key, token) = (Key::new("k").unwrap(), Token::generate().unwrap());
    let holder = HolderInfo::current();
    let ttl = Ttl::from_millis(30_000).unwrap();
    let started = std::time::Instant::now();
    let call = obtain(&storage, ObtainRequest::new(&key, &token, ttl, &holder));
    let err = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call gave up in time")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retry_safe(), "{err}");
    assert!(err.to_string().contains("nothing was written"), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert!(
        storage.transactions.load(Ordering::Relaxed) > 1,
        "the step ran again after a conflict"
    );
}

/// One deadline per call: transactions of 7 ms that keep losing, with a timeout of
/// 30 ms, end by the timeout (not by `conflicts_within`, 50 ms, counted from the first
/// conflict, nor a fresh deadline per transaction), and a transaction that is still
/// running at the deadline is cut there.
#[tokio::test(start_paused = true)]
async fn a_call_under_contention_ends_by_its_one_deadline() {
    for (slow, timeout) in [(7, 30), (100, 30), (29, 30)] {
        let storage = AlwaysConflicts {
            slow: Duration::from_millis(slow),
            timeout: Some(Duration::from_millis(timeout)),
            ..AlwaysConflicts::default()
        };
        let (key, token) = (Key::new("k").unwrap(), Token::generate().unwrap());
        let holder = HolderInfo::current();
        let ttl = Ttl::from_millis(30_000).unwrap();
        let started = tokio::time::Instant::now();
        let err = obtain(&storage, ObtainRequest::new(&key, &token, ttl, &holder))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(err.to_string().contains("deadline of 30ms"), "{err}");
        assert!(
            took <= Duration::from_millis(timeout),
            "transactions of {slow} ms: the call took {took:?}"
        );
    }
}

#[test]
fn conflict_pauses_grow_with_jitter_and_stay_under_the_cap() {
    let cap = Duration::from_millis(20);
    for conflicts in 0..100 {
        let ceiling = Duration::from_micros(100 << conflicts.min(16)).min(cap);
        for _ in 0..50 {
            assert!(conflict_pause(conflicts) <= ceiling);
        }
    }
    // Jittered: not every pause after many conflicts is the same.
    let pauses: std::collections::HashSet<Duration> = (0..50).map(|_| conflict_pause(30)).collect();
    assert!(pauses.len() > 1);
}
