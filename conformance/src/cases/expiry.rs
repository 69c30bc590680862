//! Time: expiry, prolongation, late calls, grace, cooldown, fencing, force release.

use super::*;
use crate::pace::Pace;

/// An unprolonged lock is Busy to others before its ttl (less a margin) and free after it.
pub async fn unprolonged_lock_expires_after_its_ttl(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "expiry").await;
    let t = Pace::of(&*backend, "unprolonged_lock_expires_after_its_ttl");
    let ttl = t.ms(600);
    let sent = Instant::now();
    let first = acquired(a.obtain(ttl).await?, "obtain")?;
    let answered = Instant::now();
    tokio::time::sleep(t.ms(100)).await;
    let early = b.obtain(ttl).await?;
    if Instant::now() < sent + ttl {
        ensure!(busy(&early), "before the ttl: expected Busy, got {early:?}");
    }
    tokio::time::sleep_until(answered + ttl + t.ms(100)).await;
    let second = acquired(b.obtain(ttl).await?, "after the ttl")?;
    ensure!(
        second > first,
        "fencing after expiry {second} does not exceed {first}"
    );
    Ok(())
}

/// Prolonging to a longer ttl keeps the lock past the original ttl; remaining after a prolong
/// lies within (0, ttl]; then, unprolonged, it expires.
pub async fn prolong_extends_the_lock(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "prolong").await;
    let t = Pace::of(&*backend, "prolong_extends_the_lock");
    acquired(a.obtain(t.ms(400)).await?, "obtain")?;
    let p = a.prolong(t.ms(2_000)).await?;
    ensure!(
        p == ProlongOutcome::Prolonged,
        "prolong of a live lock: expected Prolonged, got {p:?}"
    );
    let after = Instant::now();
    match a.inspect().await? {
        LockState::Held { remaining, .. } => ensure!(
            remaining > Duration::ZERO && remaining <= t.longest(t.ms(2_000)),
            "remaining after prolong {remaining:?} not in (0, {:?}]",
            t.longest(t.ms(2_000))
        ),
        other => return Err(Failure(format!("inspect after prolong: {other:?}"))),
    }
    tokio::time::sleep_until(after + t.ms(800)).await;
    ensure!(
        busy(&b.obtain(LONG).await?),
        "past the original ttl the prolonged lock must still be held"
    );
    tokio::time::sleep_until(after + t.ms(2_300)).await;
    acquired(b.obtain(LONG).await?, "after the prolonged ttl")?;
    Ok(())
}

/// Late prolong and late release when nobody took the lock: ProlongedLate (same fencing,
/// same holds) and ReleasedLate (freed whatever the hold count).
pub async fn late_calls_when_untaken_are_late(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "late").await;
    let t = Pace::of(&*backend, "late_calls_when_untaken_are_late");
    // Each late call lands 120 ms after the ttl, 480 ms before the grace (the ttl) ends:
    // room for a loaded machine.
    let fencing = acquired(a.obtain(t.ms(600)).await?, "obtain")?;
    let _ = a.obtain(t.ms(600)).await?;
    let answered = Instant::now();
    tokio::time::sleep_until(answered + t.ms(720)).await;
    let p = a.prolong(t.ms(600)).await?;
    ensure!(
        p == ProlongOutcome::ProlongedLate,
        "late prolong, untaken: expected ProlongedLate, got {p:?}"
    );
    ensure!(
        matches!(a.inspect().await?, LockState::Held { fencing: f, holds: 2, .. } if f == fencing),
        "ProlongedLate must keep fencing and holds"
    );
    let answered = Instant::now();
    tokio::time::sleep_until(answered + t.ms(720)).await;
    let r = a.release(None).await?;
    ensure!(
        r == ReleaseOutcome::ReleasedLate,
        "late release, untaken: expected ReleasedLate, got {r:?}"
    );
    ensure!(
        a.inspect().await? == LockState::Free,
        "ReleasedLate frees the key whatever the hold count"
    );
    acquired(b.obtain(LONG).await?, "obtain after a late release")?;
    Ok(())
}

/// Late prolong and late release after another owner took the lock: Lost, and the new
/// holder is untouched.
pub async fn late_calls_after_steal_are_lost(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "stolen").await;
    let t = Pace::of(&*backend, "late_calls_after_steal_are_lost");
    let old = acquired(a.obtain(t.ms(200)).await?, "obtain")?;
    let answered = Instant::now();
    tokio::time::sleep_until(answered + t.ms(300)).await;
    let new = acquired(b.obtain(LONG).await?, "steal after expiry")?;
    ensure!(new > old, "the thief's fencing {new} must exceed {old}");
    let p = a.prolong(LONG).await?;
    ensure!(
        p == ProlongOutcome::Lost,
        "prolong after steal: expected Lost, got {p:?}"
    );
    let r = a.release(None).await?;
    ensure!(
        r == ReleaseOutcome::Lost,
        "release after steal: expected Lost, got {r:?}"
    );
    ensure!(
        matches!(b.inspect().await?, LockState::Held { holder, fencing, .. } if holder == b.holder && fencing == new),
        "the thief must still hold the lock"
    );
    Ok(())
}

/// `prolongate_many` of every owner's lock to `ttl`: one answer per owner, in order.
async fn prolong_many<'o>(
    backend: &Arc<dyn LockBackend>,
    owners: impl Iterator<Item = &'o Owner>,
    ttl: Duration,
) -> Result<Vec<lock_core::Result<ProlongOutcome>>, Failure> {
    let ttl = ttl_of(ttl);
    let reqs: Vec<ProlongRequest<'_>> = owners
        .map(|o| ProlongRequest {
            key: &o.key,
            token: &o.token,
            ttl,
        })
        .collect();
    let answers = backend.prolongate_many(&reqs).await;
    ensure!(
        answers.len() == reqs.len(),
        "{} answers to {} requests",
        answers.len(),
        reqs.len()
    );
    Ok(answers)
}

/// `prolongate_many` answers each request as `prolongate` would, in order: on time, late,
/// stolen, never held, another's, the same key twice, across more than one pipeline or
/// statement of the backend's (1,010 locks); and an empty batch answers nothing.
pub async fn prolong_many_answers_each_as_prolong_would(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "many-live").await;
    let t = Pace::of(&*backend, "prolong_many_answers_each_as_prolong_would");
    ensure!(
        backend.prolongate_many(&[]).await.is_empty(),
        "an empty batch answers nothing"
    );
    let bulk: Vec<Owner> = (0..1_004)
        .map(|i| a.on(&format!("many-bulk-{i}")))
        .collect();
    // The bulk must outlast its own obtains and the stretched wait below: on a backend
    // whose timeline runs 20 times slower (etcd), the wait alone is 8 s, and 1,004 obtains
    // on three members under a loaded CI took over 22 s, which ended the first bulk holds
    // of a 30 s ttl before the batch.
    let bulk_ttl = LONG + t.ms(5_000);
    for owner in &bulk {
        acquired(owner.obtain(bulk_ttl).await?, "obtain bulk")?;
    }
    let live = a.clone();
    // Long enough to outlast the whole batch on a loaded machine (three statements of a
    // SQL backend with fsync took over 1.1 s once): its check below reads its remaining ttl
    // instead of waiting for the first one to end.
    acquired(live.obtain(t.ms(5_000)).await?, "obtain live")?;
    let late = a.on("many-late");
    let late_fencing = acquired(late.obtain(t.ms(300)).await?, "obtain late")?;
    let stolen = a.on("many-stolen");
    acquired(stolen.obtain(t.ms(300)).await?, "obtain stolen")?;
    let never = a.on("many-never");
    let others = b.on("many-other");
    acquired(others.obtain(LONG).await?, "obtain another's")?;
    let theirs = a.on("many-other");
    // Past the 300 ms ttl, well inside the grace (at least the ttl again).
    tokio::time::sleep(t.ms(400)).await;
    let thief = b.on("many-stolen");
    let thief_fencing = acquired(thief.obtain(LONG).await?, "steal")?;

    // Six kinds, spread over the batch (and over its first and last pipeline); the late
    // one first, while its grace lasts.
    let mut owners: Vec<(&Owner, ProlongOutcome, &str)> = Vec::new();
    let mut specials = [
        (&late, ProlongOutcome::ProlongedLate, "expired, untaken"),
        (&stolen, ProlongOutcome::Lost, "expired, taken by another"),
        (&live, ProlongOutcome::Prolonged, "held, on time"),
        (&never, ProlongOutcome::Lost, "never held"),
        (&theirs, ProlongOutcome::Lost, "another owner's"),
        (&live, ProlongOutcome::Prolonged, "the same key again"),
    ]
    .into_iter();
    for (i, owner) in bulk.iter().enumerate() {
        if i % 200 == 0 {
            owners.extend(specials.next());
        }
        owners.push((owner, ProlongOutcome::Prolonged, "held, in bulk"));
    }
    owners.extend(specials);
    let answers = prolong_many(&backend, owners.iter().map(|(o, _, _)| *o), LONG).await?;
    for (i, ((owner, expected, what), answer)) in owners.iter().zip(answers).enumerate() {
        let answer = answer?;
        ensure!(
            answer == *expected,
            "request {i} ({what}, key {}): expected {expected:?}, got {answer:?}",
            owner.key
        );
    }
    // What the answers claim is what the records say.
    ensure!(
        matches!(late.inspect().await?, LockState::Held { fencing, remaining, .. } if fencing == late_fencing && remaining > ms(20_000)),
        "ProlongedLate in a batch must keep the fencing and extend the lock"
    );
    ensure!(
        matches!(thief.inspect().await?, LockState::Held { fencing, holder, .. } if fencing == thief_fencing && holder == b.holder),
        "a Lost prolong in a batch must leave the new holder untouched"
    );
    ensure!(
        matches!(others.inspect().await?, LockState::Held { holder, .. } if holder == b.holder),
        "another owner's lock must stay theirs"
    );
    ensure!(
        never.inspect().await? == LockState::Free,
        "a prolong of a lock never held must not create it"
    );
    ensure!(
        matches!(live.inspect().await?, LockState::Held { remaining, .. } if remaining > ms(20_000)),
        "a Prolonged answer in a batch must extend the lock to the new ttl"
    );
    ensure!(
        busy(&b.obtain(LONG).await?),
        "the lock prolonged in a batch must still be held"
    );
    for owner in &bulk {
        let _ = owner.release(None).await?;
    }
    Ok(())
}

/// `prolongate_many` at the largest records the contract allows: 250 keys of 1,024 bytes,
/// held by holders with 4 KiB of metadata (on a backend with shared holds, each key read by
/// three of them, whose shares share its record), renewed in one call spanning more than
/// one of the backend's transactions or pipelines: every answer is `Prolonged` (a batch
/// written in one message once went past MariaDB's `max_allowed_packet` and failed whole).
pub async fn prolong_many_renews_the_largest_records(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let shared = backend.capabilities().shared;
    let holder = HolderInfo::current()
        .with_metadata("m".repeat(4096))
        .map_err(|e| Failure(format!("4 KiB of metadata: {e}")))?;
    let mode = if shared {
        lock_core::Mode::READ
    } else {
        lock_core::Mode::Exclusive
    };
    let holders_per_key = if shared { 3 } else { 1 };
    // The first holds must outlast the obtains of all the others: 750 shared obtains with
    // 4 KiB of metadata on three etcd members under a loaded CI took over 30 s once, and
    // the first answer was ProlongedLate.
    let ttl = LONG * 4;
    let mut owners = Vec::new();
    for i in 0..250 {
        let name = format!("largest-{i:03}-");
        let key = format!("{name}{}", "k".repeat(1024 - name.len()));
        for h in 0..holders_per_key {
            let owner = Owner {
                holder: holder.clone(),
                ..Owner::new(&backend, &key, "largest")
            };
            acquired(
                owner.obtain_as(ttl, mode, false).await?,
                &format!("holder {h} of key {i}"),
            )?;
            if h == 0 {
                owners.push(owner);
            }
        }
    }
    let answers = prolong_many(&backend, owners.iter(), LONG).await?;
    for (i, answer) in answers.into_iter().enumerate() {
        let answer = answer?;
        ensure!(
            answer == ProlongOutcome::Prolonged,
            "request {i} of the largest records: expected Prolonged, got {answer:?}"
        );
    }
    Ok(())
}

/// After the grace period the record may vanish: a late call then answers Lost, or Late if
/// the record is still there, never Prolonged.
pub async fn calls_past_grace_are_never_on_time(suite: &Suite) -> CaseResult {
    let (backend, a, _) = pair(suite, "grace").await;
    let t = Pace::of(&*backend, "calls_past_grace_are_never_on_time");
    acquired(a.obtain(t.ms(100)).await?, "obtain")?;
    tokio::time::sleep(t.ms(450)).await;
    let p = a.prolong(t.ms(100)).await?;
    ensure!(
        p != ProlongOutcome::Prolonged,
        "prolong past the grace period answered Prolonged"
    );
    Ok(())
}

/// A release with a cooldown blocks every obtain, the former holder's too, with no holder
/// named; prolong and release by the former holder are Lost; then the key is free.
pub async fn cooldown_blocks_everyone_then_frees(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "cooldown").await;
    let t = Pace::of(&*backend, "cooldown_blocks_everyone_then_frees");
    acquired(a.obtain(LONG).await?, "obtain")?;
    let delay = t.ms(700);
    let sent = Instant::now();
    ensure!(
        a.release(Some(delay)).await? == ReleaseOutcome::Released,
        "release with cooldown"
    );
    let answered = Instant::now();
    for (who, owner) in [("former holder", &a), ("other owner", &b)] {
        match owner.obtain(LONG).await? {
            ObtainOutcome::Busy(busy) if Instant::now() < sent + delay => {
                ensure!(
                    busy.holder.is_none(),
                    "{who}: cooldown Busy must name no holder, got {:?}",
                    busy.holder
                );
                ensure!(
                    busy.remaining <= t.longest(delay),
                    "{who}: cooldown remaining {:?} > {:?}",
                    busy.remaining,
                    t.longest(delay)
                );
            }
            other => {
                return Err(Failure(format!(
                    "{who} during cooldown: expected Busy, got {other:?}"
                )))
            }
        }
    }
    ensure!(
        matches!(a.inspect().await?, LockState::Cooling { .. }),
        "inspect during cooldown"
    );
    ensure!(
        a.prolong(LONG).await? == ProlongOutcome::Lost,
        "former holder's prolong during cooldown must be Lost"
    );
    ensure!(
        a.release(None).await? == ReleaseOutcome::Lost,
        "former holder's release during cooldown must be Lost"
    );
    tokio::time::sleep_until(answered + delay + t.ms(100)).await;
    acquired(b.obtain(LONG).await?, "obtain after the cooldown")?;
    Ok(())
}

/// A decrementing release ignores the cooldown.
pub async fn decrement_ignores_cooldown(suite: &Suite) -> CaseResult {
    let (_, a, _) = pair(suite, "decrement-cooldown").await;
    acquired(a.obtain(LONG).await?, "obtain")?;
    let _ = a.obtain(LONG).await?;
    let d = a.release(Some(LONG)).await?;
    ensure!(
        d == ReleaseOutcome::Decremented { holds: 1 },
        "expected Decremented, got {d:?}"
    );
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "the last release frees, no cooldown pending"
    );
    ensure!(
        a.inspect().await? == LockState::Free,
        "no cooldown may be left from the decrement"
    );
    Ok(())
}

/// Fencing tokens strictly increase across release, expiry, re-obtain by the same token,
/// cooldown and out-of-band deletion; a stale holder's token is lower.
pub async fn fencing_grows_across_everything(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "fencing").await;
    let t = Pace::of(&*backend, "fencing_grows_across_everything");
    let mut seen = vec![acquired(a.obtain(LONG).await?, "obtain")?];
    let _ = a.release(None).await?;
    seen.push(acquired(b.obtain(t.ms(150)).await?, "after release")?);
    tokio::time::sleep(t.ms(250)).await;
    seen.push(acquired(
        b.obtain(t.ms(150)).await?,
        "same token after expiry",
    )?);
    tokio::time::sleep(t.ms(250)).await;
    seen.push(acquired(a.obtain(LONG).await?, "other token after expiry")?);
    let _ = a.release(Some(t.ms(150))).await?;
    tokio::time::sleep(t.ms(250)).await;
    seen.push(acquired(b.obtain(LONG).await?, "after cooldown")?);
    let _ = backend.force_release(&b.key).await?;
    seen.push(acquired(
        a.obtain(LONG).await?,
        "after out-of-band deletion",
    )?);
    ensure!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must strictly increase: {seen:?}"
    );
    Ok(())
}

/// How far a backend's clock may be from the test machine's for
/// [`fencing_tokens_count_wall_clock_microseconds`]: a server's clock on another machine, kept
/// by NTP, is within it; a token on another scale (a counter, a revision, nanoseconds) is
/// not, by years.
pub const FENCING_CLOCK_SKEW: Duration = Duration::from_secs(600);

/// The wall clock of the test machine in microseconds since the Unix epoch.
fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Fencing tokens are on one scale on every backend: a fresh key's first token is the
/// backend's wall clock in microseconds since the Unix epoch, within
/// [`FENCING_CLOCK_SKEW`] of the test machine's. So a job that moves to another backend,
/// later in time, keeps writing through the fences at its resources; a counter (etcd's
/// revisions were one) would be refused by every fence an earlier backend wrote, and
/// nanoseconds would fence every other backend out.
pub async fn fencing_tokens_count_wall_clock_microseconds(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let a = Owner::new(&backend, "fencing-scale", "a");
    let skew = u64::try_from(FENCING_CLOCK_SKEW.as_micros()).unwrap_or(u64::MAX);
    let before = unix_micros();
    let Fencing(first) = acquired(a.obtain(LONG).await?, "obtain a fresh key")?;
    let after = unix_micros();
    ensure!(
        first >= before.saturating_sub(skew) && first <= after.saturating_add(skew),
        "the first fencing token of a fresh key is {first}: not the wall clock in microseconds \
         since the Unix epoch ({before}..={after} here, give or take {}s); tokens on another \
         scale break every fence when a job moves between backends",
        FENCING_CLOCK_SKEW.as_secs()
    );
    let _ = a.release(None).await?;
    Ok(())
}

/// After an operator breaks a lock and another owner takes it, the old holder's prolong and
/// release are Lost and the new holder stays.
pub async fn force_release_then_retake_fences_the_old_holder(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "force").await;
    let old = acquired(a.obtain(LONG).await?, "obtain")?;
    let broken = backend.force_release(&a.key).await?;
    ensure!(
        matches!(&broken, LockState::Held { holder, .. } if *holder == a.holder),
        "force_release returns what it broke, got {broken:?}"
    );
    ensure!(
        a.inspect().await? == LockState::Free,
        "free after force_release"
    );
    let new = acquired(b.obtain(LONG).await?, "retake")?;
    ensure!(new > old, "fencing after force release must grow");
    ensure!(
        a.release(None).await? == ReleaseOutcome::Lost,
        "old holder's release must be Lost"
    );
    ensure!(
        a.prolong(LONG).await? == ProlongOutcome::Lost,
        "old holder's prolong must be Lost"
    );
    ensure!(
        matches!(b.inspect().await?, LockState::Held { holder, .. } if holder == b.holder),
        "new holder stays"
    );
    Ok(())
}
