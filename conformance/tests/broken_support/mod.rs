//! What the broken-backend tests share: running one case of the suite on a runtime of its
//! own, within a bound.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use lock_conformance::{CaseResult, Suite};

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
