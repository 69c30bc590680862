//! What the broken-backend tests share: running one case of the suite on a runtime of its
//! own, within a bound.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use lock_conformance::{CaseResult, Suite};

/// One test: the named case must fail on the bug; the healthy memory backend passes it
/// (the case is not simply failing). Expects `BrokenHarness(Bug)` where it is used.
#[allow(unused_macros)]
macro_rules! catches_where_memory_passes {
    ($test:ident, $bug:ident, $case:ident) => {
        #[test]
        fn $test() {
            broken_support::caught_where_memory_passes(
                BrokenHarness(Bug::$bug),
                &Bug::$bug,
                stringify!($case),
                |s| Box::pin(cases::$case(s)),
            );
        }
    };
}

/// A case of the suite, as `cases::*` functions coerce to.
// Not every test binary that shares this module names a case.
#[allow(dead_code)]
pub(crate) type Case =
    for<'a> fn(&'a Suite) -> Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

/// Runs `f` on a multi-threaded runtime of its own; a case that does not end within two
/// minutes panics, naming nothing it did not finish.
pub(crate) fn run(f: impl Future<Output = CaseResult>) -> CaseResult {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(120), f)
                .await
                .expect("the case ended within two minutes")
        })
}

/// The healthy memory backend, which every case passes.
// Not every test binary that shares this module compares with it.
#[allow(dead_code)]
pub(crate) struct Healthy;

#[lock_conformance::async_trait]
impl lock_conformance::Harness for Healthy {
    async fn backend(&self) -> std::sync::Arc<dyn lock_core::LockBackend> {
        std::sync::Arc::new(lock_core::MemoryBackend::new())
    }
}

/// `case` (named `named`) fails on `broken`, which breaks `bug`, and passes on the healthy
/// memory backend: the case catches the bug rather than simply failing.
#[allow(dead_code)]
pub(crate) fn caught_where_memory_passes(
    broken: impl lock_conformance::Harness,
    bug: &dyn std::fmt::Debug,
    named: &str,
    case: Case,
) {
    let result = run(case(&Suite::new("broken", broken)));
    assert!(result.is_err(), "{named} did not catch {bug:?}");
    println!("{named} caught {bug:?}: {}", result.unwrap_err());
    run(case(&Suite::new("memory", Healthy))).expect("the healthy memory backend passes");
}
