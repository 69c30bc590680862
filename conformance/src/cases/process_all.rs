//! `Locker::lock_all` from several OS processes: overlapping sets taken in random orders
//! never deadlock, never let two processes into one key, and leave nothing held.
//!
//! A `lock-all` worker (in [`process`](super::process), with the other workers) logs one
//! line per key of each set it held: `key fencing start_ns end_ns`, the same critical
//! section for every key of the set.

use std::collections::BTreeMap;
use std::path::Path;

use lock_core::{Fencing, Key, LockState};

use super::process::{find_overlap, shared_config, Job, Section};
use crate::worker::run_workers;
use crate::{ensure, CaseResult, Failure, Suite};

fn parse(path: &Path, into: &mut BTreeMap<String, Vec<Section>>) -> CaseResult {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure(format!("worker log {}: {e}", path.display())))?;
    for line in text.lines() {
        let mut parts = line.split(' ');
        let key = parts.next().unwrap_or_default();
        let mut numbers = parts.map(str::parse::<u128>);
        let (Some(Ok(f)), Some(Ok(start)), Some(Ok(end))) =
            (numbers.next(), numbers.next(), numbers.next())
        else {
            return Err(Failure(format!("bad worker log line {line:?}")));
        };
        into.entry(key.to_owned()).or_default().push(Section {
            fencing: Fencing(f as u64),
            start,
            end,
        });
    }
    Ok(())
}

/// Four OS processes take overlapping sets of three of four keys with `lock_all`, each set
/// in a new random order every round, ten rounds each: every process finishes (no
/// deadlock: 300 s at most per process), no two critical sections of one key overlap and its fencing
/// order is time order, and every key is free at the end.
pub async fn multiprocess_lock_all_never_deadlocks_nor_overlaps(suite: &Suite) -> CaseResult {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 10;
    let Some(config) = shared_config(suite).await? else {
        return Ok(());
    };
    let keys: Vec<String> = (0..PROCESSES).map(|i| format!("all-mp-{i}")).collect();
    let dir = tempfile::tempdir().map_err(|e| Failure(format!("tempdir: {e}")))?;
    let jobs = (0..PROCESSES).map(|i| Job {
        config: config.clone(),
        key: String::new(),
        keys: (0..3).map(|k| keys[(i + k) % PROCESSES].clone()).collect(),
        mode: "lock-all".into(),
        rounds: ROUNDS,
        ttl_ms: 30_000,
        out: dir.path().join(format!("worker-{i}.log")),
        history: None,
    });
    let mut sections = BTreeMap::new();
    for out in run_workers(suite, jobs).await? {
        parse(&out, &mut sections)?;
    }
    for key in &keys {
        let held = sections.get(key).map_or(&[][..], Vec::as_slice);
        // Each key is in the sets of three processes.
        ensure!(
            held.len() == 3 * ROUNDS,
            "{key}: {} critical sections logged, expected {}",
            held.len(),
            3 * ROUNDS
        );
        if let Some((a, b)) = find_overlap(held) {
            return Err(Failure(format!(
                "two processes held {key} at once: {a:?} and {b:?}"
            )));
        }
    }
    let backend = suite.harness.connect(&config).await;
    for key in &keys {
        let state = backend.inspect(&Key::new(key.as_str())?).await?;
        ensure!(
            state == LockState::Free,
            "{key} is still held after every lock_all was released: {state:?}"
        );
    }
    Ok(())
}
