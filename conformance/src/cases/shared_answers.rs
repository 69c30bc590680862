//! The answers of shared holds beside admission: the capacity a key keeps, what a `Busy`
//! names, and what `inspect` shows. Each rule of the contract's "Shared holds" here had no
//! named case before, and a backend breaking it passed the suite.

use lock_core::{BusyReason, Mode};

use super::*;
use crate::cases::shared::{keeps_shared, permits};
use crate::pace::Pace;

/// The capacity is fixed by the first shared hold while any shared hold is remembered,
/// an expired one within its grace included: another capacity is `InvalidInput` naming
/// both, and changes nothing. Once the key is free (its shares released), another
/// capacity starts afresh; a cooldown keeps none either.
pub async fn a_capacity_holds_while_any_share_is_remembered(suite: &Suite) -> CaseResult {
    let case = "a_capacity_holds_while_any_share_is_remembered";
    let Some(backend) = keeps_shared(suite, case).await else {
        return Ok(());
    };
    let t = Pace::of(&*backend, case);
    let [first, other] = ["first", "other"].map(|w| Owner::new(&backend, "capacity", w));
    acquired(
        first.obtain_as(t.ms(1_000), permits(2, 1), false).await?,
        "the first share fixes a capacity of 2",
    )?;
    let refused_while = |what: &'static str| {
        let other = other.clone();
        async move {
            match other.obtain_as(LONG, permits(5, 1), false).await {
                Err(e) if e.kind() == ErrorKind::InvalidInput => {
                    let text = e.to_string();
                    ensure!(
                        text.contains('2') && text.contains('5'),
                        "{what}: the refusal names both capacities: {text}"
                    );
                    Ok(())
                }
                other => Err(Failure(format!(
                    "{what}: a capacity of 5 on a key of 2: expected InvalidInput, got {other:?}"
                ))),
            }
        }
    };
    refused_while("beside a live share").await?;
    // Past the share's ttl, well inside its grace: it is remembered, and so is its capacity.
    tokio::time::sleep(t.ms(1_400)).await;
    refused_while("beside a share expired within its grace").await?;
    let late = first.prolong(LONG).await?;
    ensure!(
        late == ProlongOutcome::ProlongedLate,
        "the expired share, still remembered after the refusals: {late:?}"
    );
    let released = first.release(Some(t.ms(500))).await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "the share's release: {released:?}"
    );
    tokio::time::sleep(t.longest(t.ms(500)) + t.ms(200)).await;
    acquired(
        other.obtain_as(LONG, permits(5, 1), false).await?,
        "a capacity of 5 once the key is free again, after its cooldown",
    )?;
    let _ = other.release(None).await?;
    Ok(())
}

/// A `Busy` on a key held shared names the hold whose end opens room for this request,
/// and the time until then: for a shared request, the earliest end after which its weight
/// fits (a weight of 1 waits for the shorter share; a weight of 2 for the longer one); for
/// an exclusive request, the last live hold's end. It counts the live holds.
pub async fn busy_names_the_hold_that_opens_room(suite: &Suite) -> CaseResult {
    let case = "busy_names_the_hold_that_opens_room";
    let Some(backend) = keeps_shared(suite, case).await else {
        return Ok(());
    };
    let [long, short, asking] =
        ["long", "short", "asking"].map(|w| Owner::new(&backend, "room", w));
    // A semaphore of 3: `long` takes 2 for a long time, `short` 1 for half of it.
    acquired(
        long.obtain_as(LONG * 2, permits(3, 2), false).await?,
        "the long share",
    )?;
    acquired(
        short.obtain_as(LONG, permits(3, 1), false).await?,
        "the short share",
    )?;
    let slack = Duration::from_secs(5);
    let check =
        |outcome: ObtainOutcome, reason: BusyReason, who: &str, about: Duration, what: &str| {
            match outcome {
                ObtainOutcome::Busy(busy) => {
                    let named = busy.holder.as_ref().and_then(|h| h.metadata.as_deref());
                    ensure!(
                        busy.reason == reason,
                        "{what}: reason {:?}, not {reason:?}",
                        busy.reason
                    );
                    ensure!(
                        busy.holders == 2,
                        "{what}: {} live holds counted, not 2",
                        busy.holders
                    );
                    ensure!(
                        named == Some(who),
                        "{what}: names {named:?}, not the {who} share"
                    );
                    ensure!(
                        busy.remaining <= about && busy.remaining + slack >= about,
                        "{what}: remaining {:?}, not about {about:?} (the {who} share's)",
                        busy.remaining
                    );
                    Ok(())
                }
                other => Err(Failure(format!(
                    "{what}: expected Busy({reason:?}), got {other:?}"
                ))),
            }
        };
    check(
        asking.obtain_as(LONG, permits(3, 1), false).await?,
        BusyReason::Full,
        "short",
        LONG,
        "a weight of 1 on a full semaphore",
    )?;
    check(
        asking.obtain_as(LONG, permits(3, 2), false).await?,
        BusyReason::Full,
        "long",
        LONG * 2,
        "a weight of 2 on a full semaphore",
    )?;
    check(
        asking.obtain(LONG).await?,
        BusyReason::Shared,
        "long",
        LONG * 2,
        "an exclusive request",
    )?;
    for owner in [&long, &short] {
        let _ = owner.release(None).await?;
    }
    Ok(())
}

/// `inspect` shows a waiting writer's marker only beside shared holds: a marker left on a
/// key whose last share went is not shown (the key reads `Free`), and a marker beside a
/// share is (`writer_waiting`).
pub async fn inspect_shows_a_marker_only_beside_shares(suite: &Suite) -> CaseResult {
    let case = "inspect_shows_a_marker_only_beside_shares";
    let Some(backend) = keeps_shared(suite, case).await else {
        return Ok(());
    };
    let [reader, writer] = ["reader", "writer"].map(|w| Owner::new(&backend, "marker-shown", w));
    acquired(
        reader.obtain_as(LONG, Mode::READ, false).await?,
        "the reader",
    )?;
    let queued = writer.obtain_as(LONG, Mode::Exclusive, true).await?;
    ensure!(
        matches!(&queued, ObtainOutcome::Busy(b) if b.reason == BusyReason::Shared),
        "the writer beside a reader: {queued:?}"
    );
    match reader.inspect().await? {
        LockState::Shared {
            holds,
            writer_waiting: Some(left),
            ..
        } => ensure!(
            holds.len() == 1 && left <= LONG,
            "beside the reader: {} holds, a marker of {left:?}",
            holds.len()
        ),
        other => {
            return Err(Failure(format!(
                "a reader and a writer's marker: expected Shared with writer_waiting, got {other:?}"
            )))
        }
    }
    let _ = reader.release(None).await?;
    let state = reader.inspect().await?;
    ensure!(
        state == LockState::Free,
        "the marker alone, its key free of holds: expected Free, got {state:?}"
    );
    let _ = writer.release(None).await?;
    Ok(())
}
