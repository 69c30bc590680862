//! How much one key and one backend take: a key held by many readers at once keeps every
//! operation working; nothing the contract does not name is left behind.

use lock_core::Mode;

use super::*;
use crate::cases::shared::keeps_shared;

/// How many readers [`a_key_takes_a_thousand_readers`] admits: 1,000 unless
/// `LOCK_CONFORMANCE_READERS` says otherwise (more, to find a backend's limit).
fn readers() -> usize {
    std::env::var("LOCK_CONFORMANCE_READERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000)
}

/// A read lock admits any number of readers (the contract bounds them by the capacity,
/// `Mode::UNBOUNDED` for a read lock, and by `Capabilities::holds_per_key` where a backend
/// declares one): 1,000 readers (or the declared most) of one key are each admitted with a
/// growing fencing token, and then a reader's prolong, another's release, `inspect` and
/// `force_release` each work and answer as the rules say; a writer then gets the key.
/// (etcd once refused the 65th reader: every decision compared two keys per hold, past
/// etcd's 128 operations per transaction, and the key wedged for everyone.)
pub async fn a_key_takes_a_thousand_readers(suite: &Suite) -> CaseResult {
    let Some(backend) = keeps_shared(suite, "a_key_takes_a_thousand_readers").await else {
        return Ok(());
    };
    let n = match backend.capabilities().holds_per_key {
        Some(most) => readers().min(most),
        None => readers(),
    };
    // Long enough that the first reader is still live when the last is admitted, on a
    // slow backend under CI's load.
    let ttl = LONG * 8;
    let first = Owner::new(&backend, "readers", "reader 0");
    let mut owners = vec![first.clone()];
    owners.extend((1..n).map(|i| first.fresh(&format!("reader {i}"))));
    let mut last = Fencing(0);
    for (i, owner) in owners.iter().enumerate() {
        let outcome = owner.obtain_as(ttl, Mode::READ, false).await?;
        let fencing = acquired(outcome, &format!("reader {i} of {n}"))?;
        ensure!(
            fencing > last,
            "reader {i}: fencing token {fencing} after {last}"
        );
        last = fencing;
    }
    match first.inspect().await? {
        LockState::Shared { holds, .. } => ensure!(
            holds.len() == n,
            "inspect lists {} holds of {n}",
            holds.len()
        ),
        other => return Err(Failure(format!("inspect with {n} readers: {other:?}"))),
    }
    let prolonged = first.prolong(ttl).await?;
    ensure!(
        prolonged == ProlongOutcome::Prolonged,
        "the first reader's prolong among {n}: {prolonged:?}"
    );
    let middle = &owners[n / 2];
    let released = middle.release(None).await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "a reader's release among {n}: {released:?}"
    );
    let writer = Owner::new(&backend, "readers", "writer");
    let busy = writer.obtain(LONG).await?;
    ensure!(
        matches!(busy, ObtainOutcome::Busy(_)),
        "a writer among {} readers: {busy:?}",
        n - 1
    );
    match backend.force_release(&first.key).await? {
        LockState::Shared { holds, .. } => ensure!(
            holds.len() == n - 1,
            "force_release broke {} holds of {}",
            holds.len(),
            n - 1
        ),
        other => return Err(Failure(format!("force_release broke {other:?}"))),
    }
    let gone = owners[n - 1].prolong(ttl).await?;
    ensure!(
        gone == ProlongOutcome::Lost,
        "a reader's prolong after force_release: {gone:?}"
    );
    let fencing = acquired(writer.obtain(LONG).await?, "the writer after force_release")?;
    ensure!(
        fencing > last,
        "the writer's token {fencing} after the readers' {last}"
    );
    let released = writer.release(None).await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "the writer's release: {released:?}"
    );
    Ok(())
}

/// How many keys [`keys_taken_and_released_leave_nothing_behind`] takes: 2,000 unless
/// `LOCK_CONFORMANCE_KEYS` says otherwise (a record kept per key shows as thousands at
/// any count; more, to load a backend's sweep).
fn keys() -> usize {
    std::env::var("LOCK_CONFORMANCE_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000)
}

/// How many tasks take the keys at once.
const TAKERS: usize = 16;

/// A backend's storage is bounded by the keys in use: 2,000 keys each taken (exclusively,
/// or every other one by a reader where the backend has shared holds) and released leave no
/// record that nothing removes on its own (`Harness::lasting_records`): no counter, no
/// free row, no file per key kept for ever. A backend that declares
/// `Capabilities::fence_per_key` keeps at most one record per key, its last fencing token.
/// (The file backend kept a file per key ever locked, so a directory of per-job locks
/// grew without bound.) Skipped, with a line on stderr, when the harness cannot count.
pub async fn keys_taken_and_released_leave_nothing_behind(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let Some(before) = suite.harness.lasting_records().await else {
        super::report(format_args!(
            "{}: keys_taken_and_released_leave_nothing_behind: skipped, the harness cannot \
             count the backend's records (Harness::lasting_records)",
            suite.name
        ));
        return Ok(());
    };
    let n = keys();
    let shared = backend.capabilities().shared;
    let takers: Vec<_> = (0..TAKERS)
        .map(|t| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move {
                for i in (t..n).step_by(TAKERS) {
                    let owner = Owner::new(&backend, &format!("many/{i}"), "taker");
                    let mode = match shared && i % 2 == 1 {
                        true => Mode::READ,
                        false => Mode::Exclusive,
                    };
                    let got = owner.obtain_as(LONG, mode, false).await?;
                    acquired(got, &format!("key {i} of {n}"))?;
                    let released = owner.release(None).await?;
                    ensure!(
                        released == ReleaseOutcome::Released,
                        "key {i}'s release: {released:?}"
                    );
                }
                Ok::<(), Failure>(())
            })
        })
        .collect();
    for taker in takers {
        taker
            .await
            .map_err(|e| Failure(format!("a taker panicked: {e}")))??;
    }
    let after = suite.harness.lasting_records().await.unwrap_or(before);
    let left = after.saturating_sub(before);
    let fence_per_key = backend.capabilities().fence_per_key;
    let allowed = if fence_per_key { n as u64 } else { 0 };
    ensure!(
        left <= allowed,
        "{n} keys taken and released left {left} records that nothing removes on its own \
         ({}): a backend's storage must be bounded by the keys in use",
        match fence_per_key {
            true => "at most one per key, its fencing token, was declared",
            false => "none was expected: Capabilities::fence_per_key is not declared",
        }
    );
    Ok(())
}
