//! The fence suite must catch broken fences: each fence below breaks one rule, and the
//! named case must fail on it while the reference passes it.

mod broken_support;

use std::collections::HashMap;
use std::sync::Mutex;

use broken_support::run;
use lock_conformance::fence::{self, FenceHarness, MemoryFenceHarness};
use lock_conformance::{async_trait, CaseResult};
use lock_core::fence::{admits, stale};
use lock_core::{Fencing, Result};

#[derive(Debug, Clone, Copy)]
enum Bug {
    /// No check at all: every token writes.
    AdmitsStale,
    /// An equal token is refused: a holder cannot write twice.
    RefusesEqual,
    /// Tokens kept as signed 32 bits: a clock-valued token wraps around.
    NarrowTokens,
    /// The fence of `r` is kept under `r` cut at its first `.` or `:`: `x.fence` and
    /// `x:fence` share `x`'s fence.
    NamesCut,
    /// The check reads the highest token as the caller's transaction first saw it (a
    /// snapshot read): a newer writer that committed since is not seen.
    SnapshotCheck,
}

#[derive(Debug)]
struct Broken {
    bug: Bug,
    highest: Mutex<HashMap<String, u64>>,
    values: Mutex<HashMap<String, String>>,
}

impl Broken {
    fn new(bug: Bug) -> Self {
        Broken {
            bug,
            highest: Mutex::default(),
            values: Mutex::default(),
        }
    }

    fn fence_of(&self, resource: &str) -> String {
        match self.bug {
            Bug::NamesCut => resource
                .split(['.', ':'])
                .next()
                .unwrap_or(resource)
                .trim_matches(['{', '}'])
                .to_owned(),
            _ => resource.to_owned(),
        }
    }

    /// The fenced write, with the highest token as `seen` says (the store's now, or a
    /// snapshot).
    fn write_seeing(
        &self,
        resource: &str,
        token: Fencing,
        value: &str,
        seen: Option<u64>,
    ) -> Result<()> {
        let fence = self.fence_of(resource);
        let stored = |t: u64| match self.bug {
            Bug::NarrowTokens => u64::from(t as u32),
            _ => t,
        };
        let presented = Fencing(stored(token.0));
        let highest = seen.map(Fencing);
        let ok = match self.bug {
            Bug::AdmitsStale => true,
            Bug::RefusesEqual => highest.is_none_or(|h| presented > h),
            _ => admits(highest, presented),
        };
        if !ok {
            return Err(stale(
                "broken fence",
                resource,
                token,
                highest.unwrap_or(token),
            ));
        }
        self.highest
            .lock()
            .unwrap()
            .insert(fence, presented.0.max(seen.unwrap_or(0)));
        self.values
            .lock()
            .unwrap()
            .insert(resource.to_owned(), value.to_owned());
        Ok(())
    }

    fn now(&self, resource: &str) -> Option<u64> {
        self.highest
            .lock()
            .unwrap()
            .get(&self.fence_of(resource))
            .copied()
    }
}

#[async_trait]
impl FenceHarness for Broken {
    async fn write(&self, resource: &str, token: Fencing, value: &str) -> Result<()> {
        self.write_seeing(resource, token, value, self.now(resource))
    }

    async fn read(&self, resource: &str) -> Result<Option<String>> {
        Ok(self.values.lock().unwrap().get(resource).cloned())
    }

    fn isolation_levels(&self) -> Vec<&'static str> {
        vec!["SNAPSHOT"]
    }

    async fn interleaved(
        &self,
        _: &str,
        resource: &str,
        first: (Fencing, &str),
        second: (Fencing, &str),
    ) -> (Result<()>, Result<()>) {
        let snapshot = self.now(resource);
        let second = self.write(resource, second.0, second.1).await;
        let seen = match self.bug {
            Bug::SnapshotCheck => snapshot,
            _ => self.now(resource),
        };
        (self.write_seeing(resource, first.0, first.1, seen), second)
    }
}

type FenceCase =
    for<'a> fn(
        &'a dyn FenceHarness,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = CaseResult> + Send + 'a>>;

fn caught(bug: Bug, named: &str, case: FenceCase) {
    let broken = Broken::new(bug);
    let result = run(case(&broken));
    assert!(result.is_err(), "{named} did not catch {bug:?}");
    println!("{named} caught {bug:?}: {}", result.unwrap_err());
    let reference = MemoryFenceHarness::default();
    run(case(&reference)).expect("the reference fence passes");
}

macro_rules! catches {
    ($test:ident, $bug:ident, $case:ident) => {
        #[test]
        fn $test() {
            caught(Bug::$bug, stringify!($case), |f| Box::pin(fence::$case(f)));
        }
    };
}

catches!(
    a_fence_that_admits_stale_tokens_is_caught,
    AdmitsStale,
    fence_refuses_a_stale_token
);
catches!(
    a_fence_that_refuses_equal_tokens_is_caught,
    RefusesEqual,
    fence_admits_an_equal_token_again
);
catches!(
    a_fence_that_narrows_tokens_is_caught,
    NarrowTokens,
    fence_admits_the_first_write_with_any_token
);
catches!(
    a_fence_whose_names_collide_is_caught,
    NamesCut,
    fence_resources_that_look_alike_never_collide
);
catches!(
    a_fence_that_checks_a_snapshot_is_caught,
    SnapshotCheck,
    fence_interleaved_writers_keep_the_newer_write
);
