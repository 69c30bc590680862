//! The reference model of the contract, written from the contract (`lock_core::contract`) alone, and the
//! property that runs random operation sequences against it.
//!
//! Time is real (a server backend cannot fake it), so the model tracks, for every record, the
//! window in which the backend applied the operation that set it: from just before the
//! request was sent to just after the answer came back. For each new operation it works out
//! which phases the record can be in (live, expired within its grace, past its grace) and
//! accepts exactly the outcomes those phases allow. Where timing is truly ambiguous more than
//! one outcome is allowed, and the outcome observed decides which branch the model follows.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockBackend;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use tokio::time::Instant;

use crate::harness::{ms, Owner};
use crate::{CaseResult, Failure, Suite};

pub(crate) mod reference;
use reference::{KeyModel, Model, Observed, Window};

/// Owners and keys in every sequence.
const OWNERS: usize = 3;
/// Keys chosen to be awkward for key mappings.
const KEYS: [&str; 2] = ["model/../a:{1}*", "modèle b"];
/// Clock granularity the model forgives (millisecond storage, timer slack).
pub(crate) const SLACK: Duration = Duration::from_millis(15);

/// A ttl or cooldown class: short ones expire within a sequence, long ones never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    Short,
    Long,
}

impl Span {
    pub(crate) fn duration(self) -> Duration {
        match self {
            Span::Short => ms(150),
            Span::Long => Duration::from_secs(30),
        }
    }
}

/// One step of a sequence.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Obtain {
        owner: usize,
        key: usize,
        ttl: Span,
    },
    Prolong {
        owner: usize,
        key: usize,
        ttl: Span,
    },
    Release {
        owner: usize,
        key: usize,
        delay: Option<Span>,
    },
    Inspect {
        key: usize,
    },
    ForceRelease {
        key: usize,
    },
    Sleep {
        millis: u64,
    },
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Obtain { owner, key, ttl } => {
                write!(f, "obtain(owner {owner}, key {key}, {ttl:?})")
            }
            Op::Prolong { owner, key, ttl } => {
                write!(f, "prolong(owner {owner}, key {key}, {ttl:?})")
            }
            Op::Release { owner, key, delay } => {
                write!(f, "release(owner {owner}, key {key}, delay {delay:?})")
            }
            Op::Inspect { key } => write!(f, "inspect(key {key})"),
            Op::ForceRelease { key } => write!(f, "force_release(key {key})"),
            Op::Sleep { millis } => write!(f, "sleep({millis} ms)"),
        }
    }
}

fn op_strategy() -> impl Strategy<Value = Op> {
    // Skewed towards owner 0 and key 0, so that re-obtains, reentrant releases and steals
    // on one key come up often in short sequences.
    let owner = prop_oneof![2 => Just(0usize), 1 => Just(1), 1 => Just(2)];
    let key = prop_oneof![2 => Just(0usize), 1 => Just(1)];
    let ttl = prop_oneof![3 => Just(Span::Short), 1 => Just(Span::Long)];
    let delay =
        prop_oneof![3 => Just(None), 1 => Just(Some(Span::Short)), 1 => Just(Some(Span::Long))];
    prop_oneof![
        5 => (owner.clone(), key.clone(), ttl.clone()).prop_map(|(owner, key, ttl)| Op::Obtain { owner, key, ttl }),
        3 => (owner.clone(), key.clone(), ttl).prop_map(|(owner, key, ttl)| Op::Prolong { owner, key, ttl }),
        3 => (owner, key.clone(), delay).prop_map(|(owner, key, delay)| Op::Release { owner, key, delay }),
        1 => key.clone().prop_map(|key| Op::Inspect { key }),
        1 => key.prop_map(|key| Op::ForceRelease { key }),
        2 => prop_oneof![Just(60u64), Just(200), Just(400)].prop_map(|millis| Op::Sleep { millis }),
    ]
}

async fn run_sequence(backend: Arc<dyn LockBackend>, ops: &[Op]) -> Result<(), String> {
    // Keys of their own per sequence: one backend serves them all (a server backend's pool
    // per sequence would run the server out of connections when the cases are raised).
    let run = lock_core::backend::Token::generate().map_err(|e| e.to_string())?;
    let keys: Vec<String> = KEYS
        .iter()
        .map(|k| format!("{k} {}", &run.to_hex()[..12]))
        .collect();
    let owners: Vec<Vec<Owner>> = (0..OWNERS)
        .map(|o| {
            let first = Owner::new(&backend, &keys[0], &format!("owner {o}"));
            keys.iter().map(|k| first.on(k)).collect()
        })
        .collect();
    let mut model = Model {
        keys: vec![KeyModel::Free; KEYS.len()],
        last_fencing: vec![None; KEYS.len()],
        holders: owners.iter().map(|o| o[0].holder.clone()).collect(),
        expiry: backend.capabilities().expiry,
    };
    for (step, &op) in ops.iter().enumerate() {
        let sent = Instant::now();
        let observed = match op {
            Op::Obtain { owner, key, ttl } => owners[owner][key]
                .obtain(ttl.duration())
                .await
                .map(Observed::Obtain),
            Op::Prolong { owner, key, ttl } => owners[owner][key]
                .prolong(ttl.duration())
                .await
                .map(Observed::Prolong),
            Op::Release { owner, key, delay } => owners[owner][key]
                .release(delay.map(Span::duration))
                .await
                .map(Observed::Release),
            Op::Inspect { key } => owners[0][key].inspect().await.map(Observed::State),
            Op::ForceRelease { key } => backend
                .force_release(&owners[0][key].key)
                .await
                .map(Observed::State),
            Op::Sleep { millis } => {
                tokio::time::sleep(ms(millis)).await;
                continue;
            }
        };
        let at = Window {
            sent,
            answered: Instant::now(),
        };
        let observed = observed.map_err(|e| format!("step {step} {op:?}: error {e}"))?;
        model
            .apply(op, &observed, at)
            .map_err(|why| format!("step {step} {op:?} answered {observed:?}: {why}"))?;
    }
    Ok(())
}

/// Case counts: `LOCK_CONFORMANCE_CASES` raises them for deep runs (default 24).
pub fn case_count() -> u32 {
    std::env::var("LOCK_CONFORMANCE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// Random sequences of obtain, re-obtain, prolong, release (with and without cooldown),
/// inspect, force release and sleeps, over 3 owners and 2 keys, each step checked against the
/// reference model; a failure is shrunk to a minimal sequence.
pub async fn model_sequences(suite: &Suite) -> CaseResult {
    model_sequences_with(suite, case_count(), 200).await
}

/// [`model_sequences`] with an explicit number of sequences and of shrink steps.
pub async fn model_sequences_with(suite: &Suite, cases: u32, shrink_iters: u32) -> CaseResult {
    let backend = suite.harness.backend().await;
    let strategy = proptest::collection::vec(op_strategy(), 1..24);
    let seed = suite.sequence_seed();
    run_sequences(
        cases,
        shrink_iters,
        seed,
        strategy,
        backend,
        |backend, ops| async move { run_sequence(backend, &ops).await },
    )
    .map_err(|e| Failure(format!("model-based sequence failed: {e}")))
}

/// Runs `cases` random sequences from `strategy` through `run`, all on one backend (each
/// sequence on keys of its own: a backend per sequence would exhaust a server's
/// connections at high case counts), shrinking a failure in up to `shrink_iters` steps.
/// The sequences are drawn from `seed`; a failure names it, with the environment variable
/// that runs the same sequences again. Called from a multi-threaded runtime.
pub(crate) fn run_sequences<O, F, Fut>(
    cases: u32,
    shrink_iters: u32,
    seed: u64,
    strategy: impl Strategy<Value = Vec<O>>,
    backend: Arc<dyn LockBackend>,
    run: F,
) -> Result<(), String>
where
    O: fmt::Debug,
    F: Fn(Arc<dyn LockBackend>, Vec<O>) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: shrink_iters,
        max_shrink_time: 120_000,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        runner.run(&strategy, |ops| {
            let sequence = run(Arc::clone(&backend), ops);
            handle.block_on(async { sequence.await.map_err(TestCaseError::fail) })
        })
    })
    .map_err(|e: TestError<Vec<O>>| {
        format!("{e} (seed {seed}: LOCK_CONFORMANCE_SEED={seed} runs the same sequences)")
    })
}
