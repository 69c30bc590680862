//! The fence suite: the rules every fence helper (`lock_core::fence`: a resource that
//! refuses a stale fencing token) must keep, one plain async function per rule, stamped
//! into one `#[test]` each by [`fence_suite!`](crate::fence_suite). A third party's fence
//! runs it by implementing [`FenceHarness`]:
//!
//! ```
//! mod memory_fence {
//!     lock_conformance::fence_suite!(
//!         "memory fence",
//!         lock_conformance::fence::MemoryFenceHarness::default()
//!     );
//! }
//! ```
//!
//! The rules: a token below the highest that wrote is refused (`StaleToken`, naming both)
//! and changes nothing; an equal token writes again; the first write of a resource is
//! admitted whatever its token; resources whose names look alike (`x` and `x.fence`,
//! `x:fence`, `{x}:fence`) never share a fence; and two writers interleaved inside the
//! store's transactions (the older one read first, at every isolation level the store
//! offers) never let the older write land over the newer.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use lock_core::fence::MemoryFence;
use lock_core::{ErrorKind, Fencing, Result};

use crate::{ensure, CaseResult, Failure};

/// How the fence suite reaches a store's fenced writes. One value per test. The cases take
/// their resource names from [`FenceHarness::fresh`] and write to them as they are, so
/// that look-alike names (`x` and `x:fence`) keep their shape in the store.
#[async_trait]
pub trait FenceHarness: Send + Sync {
    /// A resource name no other test uses, from `base`: by default `base` and random hex.
    fn fresh(&self, base: &str) -> String {
        let random = lock_core::backend::Token::generate().expect("OS random generator");
        format!("{base}-{}", &random.to_hex()[..12])
    }

    /// Writes `value` to `resource` if `token` is not stale for it, as one fenced write
    /// (the check and the write together).
    ///
    /// # Errors
    /// The fence's: `StaleToken` when refused, `InvalidInput` for a name or token the
    /// store cannot take.
    async fn write(&self, resource: &str, token: Fencing, value: &str) -> Result<()>;

    /// The value the last admitted write left at `resource`, if any.
    ///
    /// # Errors
    /// The store's.
    async fn read(&self, resource: &str) -> Result<Option<String>>;

    /// The isolation levels of the store's transactions (`SET TRANSACTION ISOLATION
    /// LEVEL` names) at which [`FenceHarness::interleaved`] runs; none (the default) for a
    /// store without transactions.
    fn isolation_levels(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Two fenced writes to `resource`, interleaved: `first`'s transaction (at
    /// `isolation`) reads `resource`'s data, then `second`'s whole write is made and
    /// committed, then `first` checks its token and writes. The results, in that order.
    /// The default, for a store without transactions: `second`'s write, then `first`'s.
    async fn interleaved(
        &self,
        isolation: &str,
        resource: &str,
        first: (Fencing, &str),
        second: (Fencing, &str),
    ) -> (Result<()>, Result<()>) {
        let _ = isolation;
        let second = self.write(resource, second.0, second.1).await;
        let first = self.write(resource, first.0, first.1).await;
        (first, second)
    }
}

/// The fence suite over [`MemoryFence`]: the reference, and the double the suite's own
/// self-test breaks.
#[derive(Debug, Default)]
pub struct MemoryFenceHarness {
    fence: MemoryFence,
    values: Mutex<HashMap<String, String>>,
}

#[async_trait]
impl FenceHarness for MemoryFenceHarness {
    async fn write(&self, resource: &str, token: Fencing, value: &str) -> Result<()> {
        self.fence.write(resource, token, || {
            self.values
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(resource.to_owned(), value.to_owned());
        })
    }

    async fn read(&self, resource: &str) -> Result<Option<String>> {
        Ok(self
            .values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(resource)
            .cloned())
    }
}

/// Whether `result` is the refusal of `presented` with `highest` named.
fn refused(result: Result<()>, presented: u64, highest: u64, what: &str) -> Result<(), Failure> {
    match result {
        Err(e) if e.kind() == ErrorKind::StaleToken => {
            let tokens = e.stale_token().ok_or_else(|| {
                Failure(format!(
                    "{what}: a StaleToken error without its tokens: {e}"
                ))
            })?;
            ensure!(
                (tokens.presented, tokens.highest) == (Fencing(presented), Fencing(highest)),
                "{what}: the refusal names {} and {}, not {presented} and {highest}",
                tokens.presented,
                tokens.highest
            );
            Ok(())
        }
        other => Err(Failure(format!(
            "{what}: expected StaleToken ({presented} below {highest}), got {other:?}"
        ))),
    }
}

async fn value(fence: &dyn FenceHarness, resource: &str) -> Result<Option<String>, Failure> {
    Ok(fence.read(resource).await?)
}

/// A token below the highest that wrote is refused, naming both tokens, and the resource
/// keeps the newer write; the refused writer's value never lands.
pub async fn fence_refuses_a_stale_token(fence: &dyn FenceHarness) -> CaseResult {
    let account = fence.fresh("account");
    fence.write(&account, Fencing(7), "old holder").await?;
    fence.write(&account, Fencing(9), "new holder").await?;
    refused(
        fence.write(&account, Fencing(7), "late").await,
        7,
        9,
        "the old holder after the new one",
    )?;
    refused(
        fence.write(&account, Fencing(8), "between").await,
        8,
        9,
        "a token between",
    )?;
    let now = value(fence, &account).await?;
    ensure!(
        now.as_deref() == Some("new holder"),
        "the resource after refused writes: {now:?}"
    );
    Ok(())
}

/// An equal token writes again (one holder writes as often as it likes), and a higher one
/// after it.
pub async fn fence_admits_an_equal_token_again(fence: &dyn FenceHarness) -> CaseResult {
    let report = fence.fresh("report");
    fence.write(&report, Fencing(5), "first").await?;
    fence.write(&report, Fencing(5), "second").await?;
    let now = value(fence, &report).await?;
    ensure!(
        now.as_deref() == Some("second"),
        "after an equal token: {now:?}"
    );
    fence.write(&report, Fencing(6), "third").await?;
    let now = value(fence, &report).await?;
    ensure!(
        now.as_deref() == Some("third"),
        "after a higher token: {now:?}"
    );
    Ok(())
}

/// The first write of a resource is admitted whatever its token (the smallest, a clock
/// value as the backends hand out, the largest a signed 64-bit column holds); a token past
/// what the store keeps may be refused as `InvalidInput`, never admitted and lost; every
/// admitted token then keeps older ones out.
pub async fn fence_admits_the_first_write_with_any_token(fence: &dyn FenceHarness) -> CaseResult {
    for (i, token) in [1, 1_800_000_000_000_000, i64::MAX as u64]
        .into_iter()
        .enumerate()
    {
        let resource = fence.fresh(&format!("first-{i}"));
        fence.write(&resource, Fencing(token), "first").await?;
        let now = value(fence, &resource).await?;
        ensure!(
            now.as_deref() == Some("first"),
            "the first write of token {token}: {now:?}"
        );
        refused(
            fence.write(&resource, Fencing(token - 1), "older").await,
            token - 1,
            token,
            "a lower token after the first write",
        )?;
    }
    let max = fence.fresh("first-max");
    match fence.write(&max, Fencing(u64::MAX), "max").await {
        Ok(()) => refused(
            fence.write(&max, Fencing(u64::MAX - 1), "older").await,
            u64::MAX - 1,
            u64::MAX,
            "below u64::MAX",
        )?,
        Err(e) if e.kind() == ErrorKind::InvalidInput => {
            let now = value(fence, &max).await?;
            ensure!(now.is_none(), "a refused u64::MAX token wrote {now:?}");
        }
        Err(e) => return Err(Failure(format!("token u64::MAX: {e}"))),
    }
    Ok(())
}

/// Resources whose names look like another's fence (`x.fence`, `x:fence`, `{x}:fence`,
/// the files beside a fenced file) never share its fence: each is its own resource, or is
/// refused (`InvalidInput`); `x` still refuses a stale token and keeps its value.
pub async fn fence_resources_that_look_alike_never_collide(fence: &dyn FenceHarness) -> CaseResult {
    let x = fence.fresh("x");
    fence.write(&x, Fencing(9), "x's").await?;
    let alike = [
        format!("{x}.fence"),
        format!("{x}.fence.lock"),
        format!("{x}.fence.tmp"),
        format!("{x}.fence-write"),
        format!("{x}:fence"),
        format!("{{{x}}}:fence"),
        format!("{x}:fence:fence"),
        x.to_uppercase(),
        format!("{x} "),
    ];
    let mut admitted = Vec::new();
    for name in &alike {
        match fence.write(name, Fencing(1), name).await {
            Ok(()) => admitted.push(name),
            Err(e) if e.kind() == ErrorKind::InvalidInput => {}
            Err(e) => {
                return Err(Failure(format!(
                    "{name:?} after {x:?}: expected its own first write or InvalidInput, got {e}"
                )))
            }
        }
    }
    refused(
        fence.write(&x, Fencing(5), "late").await,
        5,
        9,
        "x after look-alike names were written",
    )?;
    let now = value(fence, &x).await?;
    ensure!(
        now.as_deref() == Some("x's"),
        "{x:?} after look-alike names: {now:?}"
    );
    for name in admitted {
        let now = value(fence, name).await?;
        ensure!(
            now.as_deref() == Some(name.as_str()),
            "{name:?} reads {now:?}"
        );
        fence.write(name, Fencing(2), name).await?;
    }
    Ok(())
}

/// Two writers interleaved inside the store's transactions, at every isolation level it
/// offers: the older (token 5) reads first, the newer (7) writes and commits, then the
/// older's check refuses it (its transaction's snapshot must not hide the newer token);
/// and the other way round, the older's write landing first, the newer's after it (or, on
/// a store that fails it as a serialization failure, its retry). The resource keeps the
/// newer write both times.
pub async fn fence_interleaved_writers_keep_the_newer_write(
    fence: &dyn FenceHarness,
) -> CaseResult {
    let mut levels = fence.isolation_levels();
    if levels.is_empty() {
        levels.push("");
    }
    for (i, level) in levels.into_iter().enumerate() {
        for seeded in [false, true] {
            let resource = fence.fresh(&format!("interleaved-{i}-{seeded}"));
            if seeded {
                fence.write(&resource, Fencing(3), "seed").await?;
            }
            let (older, newer) = fence
                .interleaved(
                    level,
                    &resource,
                    (Fencing(5), "older"),
                    (Fencing(7), "newer"),
                )
                .await;
            newer.map_err(|e| Failure(format!("{level}: the newer write: {e}")))?;
            ensure!(
                older.is_err(),
                "{level} (a fence written before: {seeded}): the older writer read first, the \
                 newer committed, and the older was admitted"
            );
            let now = value(fence, &resource).await?;
            ensure!(
                now.as_deref() == Some("newer"),
                "{level}: the resource: {now:?}"
            );

            let resource = fence.fresh(&format!("interleaved-{i}-{seeded}-reverse"));
            if seeded {
                fence.write(&resource, Fencing(3), "seed").await?;
            }
            let (newer, older) = fence
                .interleaved(
                    level,
                    &resource,
                    (Fencing(7), "newer"),
                    (Fencing(5), "older"),
                )
                .await;
            older.map_err(|e| Failure(format!("{level}: the older write, first to land: {e}")))?;
            match newer {
                Ok(()) => {}
                // A store may fail the newer transaction as a serialization failure
                // (Postgres at REPEATABLE READ): never as stale, and its retry lands.
                Err(e) if e.kind() != ErrorKind::StaleToken => fence
                    .write(&resource, Fencing(7), "newer")
                    .await
                    .map_err(|e| {
                        Failure(format!(
                            "{level}: the newer write, retried after the older: {e}"
                        ))
                    })?,
                Err(e) => {
                    return Err(Failure(format!(
                        "{level}: the newer write (7) refused as stale after the older (5): {e}"
                    )))
                }
            }
            let now = value(fence, &resource).await?;
            ensure!(
                now.as_deref() == Some("newer"),
                "{level}, reversed: the resource: {now:?}"
            );
        }
    }
    Ok(())
}

/// Calls `$callback!($($args)*; case, ...)` with every case of the fence suite.
#[macro_export]
macro_rules! for_each_fence_case {
    ($callback:path; $($args:tt)*) => {
        $callback! {
            $($args)*
            fence_refuses_a_stale_token,
            fence_admits_an_equal_token_again,
            fence_admits_the_first_write_with_any_token,
            fence_resources_that_look_alike_never_collide,
            fence_interleaved_writers_keep_the_newer_write
        }
    };
}

/// Stamps the fence suite into the enclosing module: one `#[test]` per case, each on a
/// [`FenceHarness`] that `$harness` builds (evaluated once per test, so each test has its
/// own resources). `$name` names the fence in failures.
#[macro_export]
macro_rules! fence_suite {
    ($name:expr, $harness:expr) => {
        $crate::for_each_fence_case!($crate::__fence_cases; $name, $harness;);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __fence_cases {
    ($name:expr, $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::fence::run_fence_case($name, stringify!($case), async {
                    let harness = $harness;
                    $crate::fence::$case(&harness).await
                });
            }
        )*
    };
}

/// Runs one fence case on a runtime of its own, within two minutes, panicking with its
/// failure.
#[doc(hidden)]
pub fn run_fence_case(name: &str, case: &str, body: impl std::future::Future<Output = CaseResult>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime
        .block_on(async { tokio::time::timeout(std::time::Duration::from_secs(120), body).await });
    match result {
        Ok(Ok(())) => {}
        Ok(Err(failure)) => panic!("[{name}] {case}: {failure}"),
        Err(_) => panic!("[{name}] {case}: did not finish within 120 s"),
    }
}
