//! One case per rule of the contract's "Shared holds" that the broader cases check only in
//! passing: each fails when that one rule is broken (the crate's broken-backend tests
//! break each alone). Ttls that must run out are 1 s, with every check at least 300 ms away
//! from an end it depends on, and every expired hold still within its grace (at least its
//! ttl) when it is asked about.

use std::time::Duration;

use lock_core::{BusyReason, LockState, Mode};

use super::shared::{busy_for, keeps_shared, permits};
use super::*;
use crate::pace::Pace;

/// A ttl the cases let run out (1 s, stretched by the backend's [`Pace`]).
fn short(t: &Pace) -> Duration {
    t.ms(1_000)
}

/// Past [`short`] from the obtains just made, well inside their grace.
fn past_short(t: &Pace) -> Duration {
    t.ms(1_400)
}

/// The fencing tokens of the live holds `inspect` lists, oldest first.
async fn live_fencings(owner: &Owner) -> Result<Vec<Fencing>, Failure> {
    Ok(match owner.inspect().await? {
        LockState::Shared { holds, .. } => holds.iter().map(|h| h.fencing).collect(),
        LockState::Free => Vec::new(),
        other => return Err(Failure(format!("expected shared holds, got {other:?}"))),
    })
}

/// A semaphore admits exactly its capacity, by weight: the hold that fills it is admitted,
/// the one past it is `Busy(Full)` counting the holds, however the weights add up.
pub async fn a_semaphore_admits_exactly_its_capacity(suite: &Suite) -> CaseResult {
    let Some(backend) = keeps_shared(suite, "a_semaphore_admits_exactly_its_capacity").await else {
        return Ok(());
    };
    let owners: Vec<Owner> = (0..4)
        .map(|i| Owner::new(&backend, "exact", &format!("holder {i}")))
        .collect();
    for (i, owner) in owners.iter().take(3).enumerate() {
        acquired(
            owner.obtain_as(LONG, permits(3, 1), false).await?,
            &format!("permit {} of 3", i + 1),
        )?;
    }
    let past = owners[3].obtain_as(LONG, permits(3, 1), false).await?;
    busy_for(&past, BusyReason::Full, "a 4th permit of 3")?;
    if let ObtainOutcome::Busy(b) = &past {
        ensure!(b.holders == 3, "Busy counts 3 holds: {b:?}");
    }
    // By weight: 3 + 2 fill 5 exactly; 1 more does not fit.
    let [a, b, c] = ["a", "b", "c"].map(|who| Owner::new(&backend, "exact-weights", who));
    acquired(a.obtain_as(LONG, permits(5, 3), false).await?, "3 of 5")?;
    acquired(
        b.obtain_as(LONG, permits(5, 2), false).await?,
        "2 more of 5, filling it",
    )?;
    busy_for(
        &c.obtain_as(LONG, permits(5, 1), false).await?,
        BusyReason::Full,
        "1 more of a full 5",
    )?;
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "a releases its 3"
    );
    acquired(
        c.obtain_as(LONG, permits(5, 1), false).await?,
        "1 of 5 once 3 were given back",
    )?;
    for owner in owners.iter().take(3).chain([&b, &c]) {
        let _ = owner.release(None).await?;
    }
    Ok(())
}

/// Expired shares stay in the record, oldest first, while they fit beside the live ones
/// and the new one: of two expired shares with room for one, the older is kept (its late
/// prolong is `ProlongedLate`) and the newer dropped (`Lost`).
pub async fn expired_shares_are_kept_oldest_first(suite: &Suite) -> CaseResult {
    let Some(backend) = keeps_shared(suite, "expired_shares_are_kept_oldest_first").await else {
        return Ok(());
    };
    let t = Pace::of(&*backend, "expired_shares_are_kept_oldest_first");
    let [older, newer, fresh] =
        ["older", "newer", "fresh"].map(|w| Owner::new(&backend, "oldest", w));
    acquired(
        older.obtain_as(short(&t), permits(2, 1), false).await?,
        "the older share",
    )?;
    acquired(
        newer.obtain_as(short(&t), permits(2, 1), false).await?,
        "the newer share",
    )?;
    tokio::time::sleep(past_short(&t)).await;
    // Both expired; the fresh share leaves room for one of them.
    acquired(
        fresh.obtain_as(LONG, permits(2, 1), false).await?,
        "a fresh share",
    )?;
    let n = newer.prolong(LONG).await?;
    ensure!(
        n == ProlongOutcome::Lost,
        "the newer expired share had to be dropped to make room, so its prolong is Lost, got {n:?}"
    );
    let o = older.prolong(LONG).await?;
    ensure!(
        o == ProlongOutcome::ProlongedLate,
        "the older expired share is kept while it fits, so its prolong is ProlongedLate, got {o:?}"
    );
    for owner in [&older, &fresh] {
        let _ = owner.release(None).await?;
    }
    Ok(())
}

/// A waiting writer's marker lives for its request's ttl from its *last* busy attempt: a
/// live waiter's later attempt renews it (readers stay out past the first attempt's ttl),
/// and once the waiter stops asking it lapses (readers get in).
pub async fn a_writers_marker_lives_from_its_last_busy_attempt(suite: &Suite) -> CaseResult {
    let Some(backend) =
        keeps_shared(suite, "a_writers_marker_lives_from_its_last_busy_attempt").await
    else {
        return Ok(());
    };
    let t = Pace::of(
        &*backend,
        "a_writers_marker_lives_from_its_last_busy_attempt",
    );
    let [reader, writer, late] =
        ["reader", "writer", "late reader"].map(|w| Owner::new(&backend, "marker", w));
    let ttl = t.ms(1_500);
    acquired(reader.obtain_as(LONG, Mode::READ, false).await?, "a reader")?;
    busy_for(
        &writer.obtain_as(ttl, Mode::Exclusive, true).await?,
        BusyReason::Shared,
        "the writer's first attempt",
    )?;
    tokio::time::sleep(t.ms(800)).await;
    busy_for(
        &writer.obtain_as(ttl, Mode::Exclusive, true).await?,
        BusyReason::Shared,
        "the writer's second attempt",
    )?;
    // 1.9 s after the first attempt, 1.1 s after the second: the marker lives.
    tokio::time::sleep(t.ms(1_100)).await;
    busy_for(
        &late.obtain_as(LONG, Mode::READ, false).await?,
        BusyReason::WriterWaiting,
        "a new reader past the first attempt's ttl but inside the second's",
    )?;
    // The writer asks no more: past the second attempt's ttl, readers come in.
    tokio::time::sleep(t.ms(1_000)).await;
    acquired(
        late.obtain_as(LONG, Mode::READ, false).await?,
        "a new reader once the dead writer's marker lapsed",
    )?;
    for owner in [&reader, &late] {
        let _ = owner.release(None).await?;
    }
    Ok(())
}

/// A downgrade wakes every waiter of the key, not one: readers may all come in now, and
/// the longest waiter may be a writer that still cannot. The waiters are another
/// process's where the backend notifies across processes (a downgrade deletes no key, and
/// rewrites the hold: a notification that follows deletions alone misses it).
pub async fn a_downgrade_wakes_every_waiter(suite: &Suite) -> CaseResult {
    let case = "a_downgrade_wakes_every_waiter";
    if keeps_shared(suite, case).await.is_none() {
        return Ok(());
    }
    let Some(two) = super::wakes::Two::of(suite, case, "downgrade-wakes").await? else {
        return Ok(());
    };
    let writer = Owner::new(&two.deciding, "downgrade-wakes", "writer");
    acquired(writer.obtain(LONG).await?, "the writer")?;
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let sub = two.waiting.subscribe(&writer.key).await?;
        waiting.push(sub.ok_or_else(|| Failure("subscribe answered None".into()))?);
    }
    tokio::time::sleep(super::wakes::SETTLE).await;
    let down = writer.obtain_as(LONG, Mode::READ, false).await?;
    ensure!(
        matches!(down, ObtainOutcome::Acquired { .. }),
        "the downgrade: {down:?}"
    );
    for (i, sub) in waiting.iter_mut().enumerate() {
        ensure!(
            sub.released_within(super::wakes::WOKEN).await,
            "waiter {} of 3 was not woken by the downgrade",
            i + 1
        );
    }
    let _ = writer.release(None).await?;
    Ok(())
}

/// A late release of one share ends that share only: the other shares stay, live and
/// untouched.
pub async fn a_late_release_of_one_share_leaves_the_others_alone(suite: &Suite) -> CaseResult {
    let Some(backend) =
        keeps_shared(suite, "a_late_release_of_one_share_leaves_the_others_alone").await
    else {
        return Ok(());
    };
    let t = Pace::of(
        &*backend,
        "a_late_release_of_one_share_leaves_the_others_alone",
    );
    let [late, live] = ["late", "live"].map(|w| Owner::new(&backend, "late-share", w));
    acquired(
        late.obtain_as(short(&t), permits(3, 1), false).await?,
        "the share that expires",
    )?;
    let kept = acquired(
        live.obtain_as(LONG, permits(3, 1), false).await?,
        "the share that lives",
    )?;
    tokio::time::sleep(past_short(&t)).await;
    let r = late.release(None).await?;
    ensure!(
        r == ReleaseOutcome::ReleasedLate,
        "the expired share's release: expected ReleasedLate, got {r:?}"
    );
    let left = live_fencings(&live).await?;
    ensure!(
        left == [kept],
        "after a late release of another share, the live share ({kept}) must be all that is left, got {left:?}"
    );
    let p = live.prolong(LONG).await?;
    ensure!(
        p == ProlongOutcome::Prolonged,
        "the live share prolongs: {p:?}"
    );
    let _ = live.release(None).await?;
    Ok(())
}

/// A share's prolong renews that share only: the other shares keep their own ttl and
/// expire by it.
pub async fn a_shares_prolong_renews_that_share_only(suite: &Suite) -> CaseResult {
    let Some(backend) = keeps_shared(suite, "a_shares_prolong_renews_that_share_only").await else {
        return Ok(());
    };
    let t = Pace::of(&*backend, "a_shares_prolong_renews_that_share_only");
    let [renewed, other] = ["renewed", "other"].map(|w| Owner::new(&backend, "prolong-share", w));
    let kept = acquired(
        renewed.obtain_as(short(&t), Mode::READ, false).await?,
        "a share",
    )?;
    acquired(
        other.obtain_as(short(&t), Mode::READ, false).await?,
        "another share",
    )?;
    let p = renewed.prolong(LONG).await?;
    ensure!(p == ProlongOutcome::Prolonged, "the prolong: {p:?}");
    tokio::time::sleep(past_short(&t)).await;
    let left = live_fencings(&renewed).await?;
    ensure!(
        left == [kept],
        "past the other share's ttl only the prolonged share ({kept}) may live, got {left:?}"
    );
    let _ = renewed.release(None).await?;
    Ok(())
}

/// A release that leaves live shares ignores its `delay_after`: new shares are admitted at
/// once; the release that leaves none starts the cooldown.
pub async fn a_release_leaving_live_shares_starts_no_cooldown(suite: &Suite) -> CaseResult {
    let Some(backend) =
        keeps_shared(suite, "a_release_leaving_live_shares_starts_no_cooldown").await
    else {
        return Ok(());
    };
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|w| Owner::new(&backend, "share-cooldown", w));
    acquired(a.obtain_as(LONG, permits(4, 1), false).await?, "a")?;
    acquired(b.obtain_as(LONG, permits(4, 1), false).await?, "b")?;
    let r = a.release(Some(LONG)).await?;
    ensure!(r == ReleaseOutcome::Released, "a's release: {r:?}");
    acquired(
        c.obtain_as(LONG, permits(4, 1), false).await?,
        "a share after a release with a delay that left b's share live",
    )?;
    for (who, owner) in [("b", &b), ("c", &c)] {
        let r = owner.release(Some(LONG)).await?;
        ensure!(r == ReleaseOutcome::Released, "{who}'s release: {r:?}");
    }
    busy_for(
        &d.obtain_as(LONG, permits(4, 1), false).await?,
        BusyReason::Cooling,
        "a share after the last share's release with a delay",
    )?;
    Ok(())
}

/// A share that expired, asked for again by its token (nobody took its room), is a fresh
/// hold: `Acquired` with a fresh fencing token and one hold, never `Reacquired`.
pub async fn an_expired_share_asked_again_is_a_fresh_hold(suite: &Suite) -> CaseResult {
    let Some(backend) = keeps_shared(suite, "an_expired_share_asked_again_is_a_fresh_hold").await
    else {
        return Ok(());
    };
    let t = Pace::of(&*backend, "an_expired_share_asked_again_is_a_fresh_hold");
    let owner = Owner::new(&backend, "share-again", "holder");
    let first = acquired(
        owner.obtain_as(short(&t), permits(2, 1), false).await?,
        "a share",
    )?;
    tokio::time::sleep(past_short(&t)).await;
    let again = owner.obtain_as(LONG, permits(2, 1), false).await?;
    let fresh = acquired(again, "the same token again, its share expired")?;
    ensure!(
        fresh > first,
        "a fresh hold gets a fresh fencing token above {first}, got {fresh}"
    );
    match owner.inspect().await? {
        LockState::Shared { holds, .. } if holds.len() == 1 && holds[0].holds == 1 => {}
        other => {
            return Err(Failure(format!(
                "one fresh hold counted once, got {other:?}"
            )))
        }
    }
    let _ = owner.release(None).await?;
    Ok(())
}

/// A mode change ([`ObtainRequest::change`](lock_core::backend::ObtainRequest::change))
/// changes the caller's own live hold, the one with the fencing token it names, or nothing:
/// a share that is gone (force-released, and a writer held the key in between) is `Lost`
/// to its upgrade, never granted the write lock afresh, and nothing is written; so is a
/// change naming another fencing token, and a downgrade of an exclusive hold that is gone.
pub async fn a_mode_change_of_a_hold_that_is_gone_is_lost(suite: &Suite) -> CaseResult {
    let Some(backend) = keeps_shared(suite, "a_mode_change_of_a_hold_that_is_gone_is_lost").await
    else {
        return Ok(());
    };
    let [reader, writer] = ["reader", "writer"].map(|w| Owner::new(&backend, "gone-change", w));
    let lost = |o: &ObtainOutcome, what: &str| -> CaseResult {
        ensure!(
            *o == ObtainOutcome::Lost,
            "{what}: expected Lost, got {o:?}"
        );
        Ok(())
    };
    // A live share, and a change that names another fencing token: Lost, the share kept.
    let share = acquired(
        reader.obtain_as(LONG, Mode::READ, false).await?,
        "a read hold",
    )?;
    let wrong = Fencing(share.0.wrapping_add(1));
    lost(
        &reader.change_to(LONG, Mode::Exclusive, wrong).await?,
        "an upgrade naming another fencing token",
    )?;
    ensure!(
        live_fencings(&reader).await? == vec![share],
        "a change answered Lost writes nothing: the read hold stays"
    );
    // The share force-released, and a writer in and out in between: the upgrade is Lost.
    let _ = backend.force_release(&reader.key).await?;
    acquired(
        writer.obtain(LONG).await?,
        "a writer, once the share was force-released",
    )?;
    ensure!(
        writer.release(None).await? == ReleaseOutcome::Released,
        "the writer releases"
    );
    lost(
        &reader.change_to(LONG, Mode::Exclusive, share).await?,
        "an upgrade of a share that was force-released",
    )?;
    let state = reader.inspect().await?;
    ensure!(
        state == LockState::Free,
        "an upgrade answered Lost writes nothing: the key stays free, got {state:?}"
    );
    // A downgrade of an exclusive hold that was force-released: Lost, nothing written.
    let held = acquired(writer.obtain(LONG).await?, "the writer again")?;
    let _ = backend.force_release(&writer.key).await?;
    lost(
        &writer.change_to(LONG, Mode::READ, held).await?,
        "a downgrade of a hold that was force-released",
    )?;
    let state = writer.inspect().await?;
    ensure!(
        state == LockState::Free,
        "a downgrade answered Lost writes nothing: the key stays free, got {state:?}"
    );
    // Its own live share: upgraded, with a fresh fencing token.
    let share = acquired(
        reader.obtain_as(LONG, Mode::READ, false).await?,
        "a read hold",
    )?;
    let up = acquired(
        reader.change_to(LONG, Mode::Exclusive, share).await?,
        "an upgrade of the caller's live share, alone on the key",
    )?;
    ensure!(
        up > share,
        "the upgrade's fencing token {up} is above {share}"
    );
    let _ = reader.release(None).await?;
    Ok(())
}
