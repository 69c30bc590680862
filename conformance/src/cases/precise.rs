//! The contract's numbers, checked exactly rather than by chance: `Busy`'s remaining time
//! from both sides, the hold count `inspect` reports, the ttl a reentrant obtain resets,
//! the cooldown a late release starts, and an `inspect` that changes nothing before a late
//! call. The model-based property bounds these loosely (it must allow any timing); each
//! rule here gets a case that fails on the first backend that breaks it.

use std::time::Duration;

use lock_core::{LockState, ObtainOutcome, ProlongOutcome, ReleaseOutcome};
use tokio::time::Instant;

use crate::harness::{ms, Owner};
use crate::pace::Pace;
use crate::{ensure, CaseResult, Failure, Suite};

/// Rounding to whole milliseconds on either side (a backend may round up).
const ROUNDING: Duration = Duration::from_millis(5);

async fn pair(suite: &Suite, key: &str, case: &str) -> (Owner, Owner, Pace) {
    let backend = suite.harness.backend().await;
    let pace = Pace::of(&*backend, case);
    (
        Owner::new(&backend, key, "owner a"),
        Owner::new(&backend, key, "owner b"),
        pace,
    )
}

fn busy_remaining(outcome: ObtainOutcome, what: &str) -> Result<(bool, Duration), Failure> {
    match outcome {
        ObtainOutcome::Busy(busy) => Ok((busy.holder.is_some(), busy.remaining)),
        other => Err(Failure(format!("{what}: expected Busy, got {other:?}"))),
    }
}

/// Checks `remaining` of a lock of `length` taken at `start` (sent) and known to have been
/// in place since `since` (answered), seen by a request answered at `now`: at least
/// `length - (now - start)`, at most `length - (asked - since)` where `asked` is when the
/// second request was sent. On a backend whose server keeps holds longer than asked (and
/// cannot tell how long ago one was set), at most the longest the hold may last.
fn within(
    pace: &Pace,
    remaining: Duration,
    length: Duration,
    lower_elapsed: Duration,
    upper_elapsed: Duration,
    what: &str,
) -> Result<(), Failure> {
    let most = if pace.is_exact() {
        length.saturating_sub(lower_elapsed) + ROUNDING
    } else {
        pace.longest(length) + ROUNDING
    };
    let least = length
        .saturating_sub(upper_elapsed)
        .saturating_sub(ROUNDING);
    ensure!(
        remaining <= most && remaining >= least,
        "{what}: remaining {remaining:?} outside [{least:?}, {most:?}]"
    );
    Ok(())
}

/// `Busy` carries the holder's remaining ttl, or the remaining cooldown, exactly: never more
/// than what is left after the time known to have passed, never less than what is left
/// after all the time that may have passed.
pub async fn busy_remaining_is_exact_both_ways(suite: &Suite) -> CaseResult {
    let (a, b, t) = pair(suite, "remaining", "busy_remaining_is_exact_both_ways").await;
    let length = t.ms(2_000);
    let sent = Instant::now();
    ensure!(
        matches!(a.obtain(length).await?, ObtainOutcome::Acquired { .. }),
        "a free key"
    );
    let answered = Instant::now();
    tokio::time::sleep(t.ms(400)).await;
    let asked = Instant::now();
    let (named, remaining) = busy_remaining(b.obtain(length).await?, "held")?;
    ensure!(named, "a held lock's Busy names its holder");
    within(
        &t,
        remaining,
        length,
        asked - answered,
        sent.elapsed(),
        "held",
    )?;

    let sent = Instant::now();
    ensure!(
        a.release(Some(length)).await? == ReleaseOutcome::Released,
        "release with a cooldown"
    );
    let answered = Instant::now();
    tokio::time::sleep(t.ms(400)).await;
    let asked = Instant::now();
    let (named, remaining) = busy_remaining(b.obtain(length).await?, "cooling")?;
    ensure!(!named, "a cooldown's Busy names nobody");
    within(
        &t,
        remaining,
        length,
        asked - answered,
        sent.elapsed(),
        "cooling",
    )
}

/// `inspect` changes nothing: an expired record still in its grace period reads Free, and
/// the late prolong and the late release that follow still answer `ProlongedLate` and
/// `ReleasedLate`.
pub async fn inspect_changes_nothing_before_late_calls(suite: &Suite) -> CaseResult {
    let (a, _, t) = pair(
        suite,
        "inspected",
        "inspect_changes_nothing_before_late_calls",
    )
    .await;
    // Grace is the ttl by default: each late call lands between 1 and 2 ttls.
    let ttl = t.ms(600);
    ensure!(
        matches!(a.obtain(ttl).await?, ObtainOutcome::Acquired { .. }),
        "a free key"
    );
    tokio::time::sleep(t.ms(750)).await;
    ensure!(
        a.inspect().await? == LockState::Free,
        "an expired lock reads Free"
    );
    let p = a.prolong(ttl).await?;
    ensure!(
        p == ProlongOutcome::ProlongedLate,
        "inspect must not forget the expired record: the late prolong answered {p:?}"
    );
    tokio::time::sleep(t.ms(750)).await;
    ensure!(
        a.inspect().await? == LockState::Free,
        "expired again, reads Free"
    );
    let r = a.release(None).await?;
    ensure!(
        r == ReleaseOutcome::ReleasedLate,
        "inspect must not forget the expired record: the late release answered {r:?}"
    );
    Ok(())
}

/// `inspect` reports the hold count as reentrant obtains raise it and releases give it back.
pub async fn inspect_counts_reentrant_holds(suite: &Suite) -> CaseResult {
    let (a, _, _) = pair(suite, "holds", "inspect_counts_reentrant_holds").await;
    let long = ms(30_000);
    for expected in 1..=3 {
        let _ = a.obtain(long).await?;
        match a.inspect().await? {
            LockState::Held { holds, .. } => {
                ensure!(
                    holds == expected,
                    "after {expected} obtains inspect says {holds}"
                )
            }
            other => return Err(Failure(format!("held expected, got {other:?}"))),
        }
    }
    for expected in (1..=2).rev() {
        let r = a.release(None).await?;
        ensure!(
            r == ReleaseOutcome::Decremented { holds: expected },
            "decrement to {expected}: {r:?}"
        );
        match a.inspect().await? {
            LockState::Held { holds, .. } => {
                ensure!(holds == expected, "after a decrement inspect says {holds}")
            }
            other => return Err(Failure(format!("held expected, got {other:?}"))),
        }
    }
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "the last hold"
    );
    ensure!(a.inspect().await? == LockState::Free, "free at the end");
    Ok(())
}

/// A reentrant obtain resets the ttl: the lock outlives its first ttl, by the second.
pub async fn reacquire_resets_the_ttl(suite: &Suite) -> CaseResult {
    let (a, b, t) = pair(suite, "reset", "reacquire_resets_the_ttl").await;
    let ttl = t.ms(1_000);
    ensure!(
        matches!(a.obtain(ttl).await?, ObtainOutcome::Acquired { .. }),
        "a free key"
    );
    tokio::time::sleep(t.ms(600)).await;
    let sent = Instant::now();
    let again = a.obtain(ttl).await?;
    let answered = Instant::now();
    ensure!(
        matches!(again, ObtainOutcome::Reacquired { holds: 2 }),
        "the same token again: {again:?}"
    );
    // Past the first ttl, well inside the second.
    tokio::time::sleep(t.ms(600)).await;
    let asked = Instant::now();
    let (_, remaining) = busy_remaining(b.obtain(ttl).await?, "after the reset")?;
    within(
        &t,
        remaining,
        ttl,
        asked - answered,
        sent.elapsed(),
        "after the reset",
    )
}

/// A late release (expired, untaken) with `delay_after` frees the lock into the cooldown it
/// asks for: every obtain, the former holder's too, is Busy with no holder until it ends.
pub async fn late_release_with_delay_starts_the_cooldown(suite: &Suite) -> CaseResult {
    let (a, b, t) = pair(
        suite,
        "late-cooldown",
        "late_release_with_delay_starts_the_cooldown",
    )
    .await;
    // Margins for a loaded machine: the late release lands within the grace (the ttl)
    // with 550 ms to spare, and the cooldown outlasts a slow obtain by far (a run with the
    // whole suite and more in parallel saw a key free again 1.5 s after the release).
    let ttl = t.ms(700);
    ensure!(
        matches!(a.obtain(ttl).await?, ObtainOutcome::Acquired { .. }),
        "a free key"
    );
    tokio::time::sleep(t.ms(850)).await;
    let cooldown = t.ms(4_000);
    let sent = Instant::now();
    let r = a.release(Some(cooldown)).await?;
    let answered = Instant::now();
    ensure!(r == ReleaseOutcome::ReleasedLate, "late release: {r:?}");
    for (who, owner) in [("another owner", &b), ("the former holder", &a)] {
        let asked = Instant::now();
        let (named, remaining) = busy_remaining(owner.obtain(ttl).await?, who)?;
        ensure!(!named, "{who}: a cooldown names no holder");
        within(
            &t,
            remaining,
            cooldown,
            asked - answered,
            sent.elapsed(),
            "the cooldown",
        )?;
    }
    Ok(())
}
