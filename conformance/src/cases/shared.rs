//! Shared holds: a semaphore's permits, read holds, and the writer's marker, on a backend
//! that declares `Capabilities::shared`; a backend without it is skipped with a line on
//! stderr.

use lock_core::{BusyReason, Mode};

use super::*;
use crate::pace::Pace;

/// Whether the backend keeps shared holds; says on stderr when a case is skipped.
pub(super) async fn keeps_shared(suite: &Suite, case: &str) -> Option<Arc<dyn LockBackend>> {
    let backend = suite.harness.backend().await;
    if backend.capabilities().shared {
        return Some(backend);
    }
    report(format_args!(
        "{}: {case}: skipped, the backend keeps exclusive locks only",
        suite.name
    ));
    None
}

pub(super) fn permits(capacity: u32, weight: u32) -> Mode {
    Mode::Shared { capacity, weight }
}

pub(super) fn busy_for(
    outcome: &ObtainOutcome,
    reason: BusyReason,
    what: &str,
) -> Result<(), Failure> {
    match outcome {
        ObtainOutcome::Busy(b) if b.reason == reason => Ok(()),
        other => Err(Failure(format!(
            "{what}: expected Busy({reason:?}), got {other:?}"
        ))),
    }
}

fn refused(result: lock_core::Result<ObtainOutcome>, what: &str) -> Result<(), Failure> {
    match result {
        Err(e) if e.kind() == ErrorKind::InvalidInput => Ok(()),
        other => Err(Failure(format!(
            "{what}: expected InvalidInput, got {other:?}"
        ))),
    }
}

/// The rules of shared holds through the trait: admission up to the capacity by weight,
/// capacity and weight mismatches refused, reentrancy per hold, a fencing token per
/// admission, inspect listing every hold, readers sharing and excluding a writer, a
/// waiting writer's marker keeping new readers out until it obtains or gives up, late and
/// lost per hold.
pub async fn shared_holds_keep_the_contract(suite: &Suite) -> CaseResult {
    let Some(backend) = keeps_shared(suite, "shared_holds_keep_the_contract").await else {
        return Ok(());
    };
    // A semaphore of 3: a takes 2, b takes 1, c finds it full.
    let a = Owner::new(&backend, "sem", "a");
    let b = Owner::new(&backend, "sem", "b");
    let c = Owner::new(&backend, "sem", "c");
    let fa = acquired(
        a.obtain_as(LONG, permits(3, 2), false).await?,
        "a takes 2 of 3",
    )?;
    let fb = acquired(
        b.obtain_as(LONG, permits(3, 1), false).await?,
        "b takes 1 of 3",
    )?;
    ensure!(
        fb > fa,
        "each admission gets a higher fencing token: {fa} then {fb}"
    );
    let full = c.obtain_as(LONG, permits(3, 1), false).await?;
    busy_for(&full, BusyReason::Full, "c on a full semaphore")?;
    if let ObtainOutcome::Busy(busy) = &full {
        ensure!(busy.holders == 2, "Busy counts 2 holds: {busy:?}");
    }
    refused(
        c.obtain_as(LONG, permits(4, 1), false).await,
        "another capacity",
    )?;
    refused(
        c.obtain_as(LONG, permits(3, 4), false).await,
        "a weight over the capacity",
    )?;
    refused(
        c.obtain_as(LONG, permits(0, 1), false).await,
        "no permits at all",
    )?;
    refused(
        b.obtain_as(LONG, permits(3, 2), false).await,
        "b asks another weight",
    )?;
    busy_for(
        &b.obtain(LONG).await?,
        BusyReason::Shared,
        "b's upgrade while a holds on",
    )?;
    let again = b.obtain_as(LONG, permits(3, 1), false).await?;
    ensure!(
        again == ObtainOutcome::Reacquired { holds: 2 },
        "b again: {again:?}"
    );
    busy_for(
        &c.obtain(LONG).await?,
        BusyReason::Shared,
        "an exclusive obtain",
    )?;
    match a.inspect().await? {
        LockState::Shared {
            capacity: 3, holds, ..
        } => {
            let mut seen: Vec<_> = holds
                .iter()
                .map(|h| (h.weight, h.holds, h.fencing))
                .collect();
            seen.sort();
            ensure!(
                seen == vec![(1, 2, fb), (2, 1, fa)],
                "inspect lists both holds with their weights, counts and tokens: {holds:?}"
            );
        }
        other => return Err(Failure(format!("inspect of the semaphore: {other:?}"))),
    }
    // a's release makes room for c; b's two holds go one at a time.
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "a releases"
    );
    acquired(
        c.obtain_as(LONG, permits(3, 1), false).await?,
        "c after a's release",
    )?;
    ensure!(
        b.release(None).await? == ReleaseOutcome::Decremented { holds: 1 },
        "b gives back one of two holds"
    );
    ensure!(
        b.release(None).await? == ReleaseOutcome::Released,
        "b releases"
    );
    ensure!(
        c.release(None).await? == ReleaseOutcome::Released,
        "c releases"
    );
    ensure!(a.inspect().await? == LockState::Free, "all released: free");

    // Readers share; a writer waits, and its marker keeps new readers out.
    let [r1, r2, r3, w] =
        ["reader 1", "reader 2", "reader 3", "writer"].map(|who| Owner::new(&backend, "rw", who));
    acquired(r1.obtain_as(LONG, Mode::READ, false).await?, "reader 1")?;
    acquired(
        r2.obtain_as(LONG, Mode::READ, false).await?,
        "reader 2 shares",
    )?;
    busy_for(
        &w.obtain_as(LONG, Mode::Exclusive, true).await?,
        BusyReason::Shared,
        "the writer",
    )?;
    busy_for(
        &r3.obtain_as(LONG, Mode::READ, false).await?,
        BusyReason::WriterWaiting,
        "a new reader behind the writer",
    )?;
    let again = r1.obtain_as(LONG, Mode::READ, false).await?;
    ensure!(
        again == ObtainOutcome::Reacquired { holds: 2 },
        "a reader inside reenters: {again:?}"
    );
    ensure!(
        r1.release(None).await? == ReleaseOutcome::Decremented { holds: 1 },
        "reader 1 once"
    );
    ensure!(
        r1.release(None).await? == ReleaseOutcome::Released,
        "reader 1"
    );
    ensure!(
        r2.release(None).await? == ReleaseOutcome::Released,
        "reader 2"
    );
    busy_for(
        &r3.obtain_as(LONG, Mode::READ, false).await?,
        BusyReason::WriterWaiting,
        "the marker outlives the readers",
    )?;
    acquired(
        w.obtain_as(LONG, Mode::Exclusive, true).await?,
        "the writer's turn",
    )?;
    ensure!(
        w.release(None).await? == ReleaseOutcome::Released,
        "the writer releases"
    );
    acquired(
        r3.obtain_as(LONG, Mode::READ, false).await?,
        "a reader after the writer",
    )?;
    // A writer that gives up takes its marker away.
    busy_for(
        &w.obtain_as(LONG, Mode::Exclusive, true).await?,
        BusyReason::Shared,
        "the writer again",
    )?;
    ensure!(
        w.release(None).await? == ReleaseOutcome::Lost,
        "giving up holds nothing"
    );
    acquired(
        r2.obtain_as(LONG, Mode::READ, false).await?,
        "a reader once the writer gave up",
    )?;

    // Late and lost per hold: x expires (its grace is at least its ttl, so it is still
    // remembered half a ttl later); y's admission still leaves room, so x is late.
    let [x, y, z] = ["x", "y", "z"].map(|who| Owner::new(&backend, "late", who));
    let t = Pace::of(&*backend, "shared_holds_keep_the_contract");
    acquired(x.obtain_as(t.ms(1_000), permits(2, 1), false).await?, "x")?;
    tokio::time::sleep(t.ms(1_500)).await;
    acquired(
        y.obtain_as(LONG, permits(2, 1), false).await?,
        "y beside expired x",
    )?;
    ensure!(
        x.prolong(LONG).await? == ProlongOutcome::ProlongedLate,
        "x's room untaken: late"
    );
    ensure!(
        x.release(None).await? == ReleaseOutcome::Released,
        "x releases"
    );
    acquired(
        x.obtain_as(t.ms(1_000), permits(2, 1), false).await?,
        "x again",
    )?;
    tokio::time::sleep(t.ms(1_500)).await;
    acquired(
        z.obtain_as(LONG, permits(2, 1), false).await?,
        "z takes x's room",
    )?;
    ensure!(
        x.prolong(LONG).await? == ProlongOutcome::Lost,
        "x's room taken: lost"
    );
    ensure!(
        x.release(None).await? == ReleaseOutcome::Lost,
        "x's release: lost"
    );
    Ok(())
}

/// Mode changes are obtains by the holder's own token in the other mode: down (exclusive
/// to shared) keeps the fencing token and lets others share at once; up (shared to
/// exclusive) is busy while another hold lives, the caller's share kept, and then gets a
/// fresh fencing token; a hold taken more than once changes no mode.
pub async fn mode_changes_keep_the_hold(suite: &Suite) -> CaseResult {
    let Some(backend) = keeps_shared(suite, "mode_changes_keep_the_hold").await else {
        return Ok(());
    };
    let [a, b, c] = ["a", "b", "c"].map(|who| Owner::new(&backend, "modes", who));
    let f1 = acquired(a.obtain(LONG).await?, "a writes")?;
    busy_for(
        &b.obtain_as(LONG, Mode::READ, false).await?,
        BusyReason::Held,
        "a reader behind the writer",
    )?;
    let down = a.obtain_as(LONG, Mode::READ, false).await?;
    ensure!(
        matches!(down, ObtainOutcome::Acquired { fencing, .. } if fencing == f1),
        "a's downgrade keeps its fencing token {f1}: {down:?}"
    );
    let f2 = acquired(
        b.obtain_as(LONG, Mode::READ, false).await?,
        "a reader beside the downgraded writer",
    )?;
    ensure!(
        f2 > f1,
        "the reader's token {f2} is above the writer's {f1}"
    );
    let up = a.obtain(LONG).await?;
    busy_for(&up, BusyReason::Shared, "a's upgrade while b reads")?;
    if let ObtainOutcome::Busy(busy) = &up {
        ensure!(
            busy.holders == 1,
            "the upgrade waits for 1 other hold: {busy:?}"
        );
    }
    match a.inspect().await? {
        LockState::Shared { holds, .. } => ensure!(
            holds.len() == 2,
            "a's busy upgrade keeps its share beside b's: {holds:?}"
        ),
        other => return Err(Failure(format!("inspect after a busy upgrade: {other:?}"))),
    }
    ensure!(
        b.release(None).await? == ReleaseOutcome::Released,
        "b releases"
    );
    let f3 = acquired(a.obtain(LONG).await?, "a's upgrade, alone")?;
    ensure!(
        f3 > f2,
        "the upgrade's token {f3} is above the reader's {f2}"
    );
    match c.inspect().await? {
        LockState::Held {
            fencing, holds: 1, ..
        } if fencing == f3 => {}
        other => return Err(Failure(format!("inspect after the upgrade: {other:?}"))),
    }
    busy_for(
        &c.obtain_as(LONG, Mode::READ, false).await?,
        BusyReason::Held,
        "a reader behind the upgraded writer",
    )?;
    let again = a.obtain(LONG).await?;
    ensure!(
        again == ObtainOutcome::Reacquired { holds: 2 },
        "a reenters: {again:?}"
    );
    refused(
        a.obtain_as(LONG, Mode::READ, false).await,
        "a downgrade of a hold taken twice",
    )?;
    ensure!(
        a.release(None).await? == ReleaseOutcome::Decremented { holds: 1 },
        "a gives back its reentrant hold"
    );
    // Down to a semaphore: the first shared hold, it fixes the capacity.
    let down = a.obtain_as(LONG, permits(3, 2), false).await?;
    ensure!(
        matches!(down, ObtainOutcome::Acquired { fencing, .. } if fencing == f3),
        "a's downgrade to 2 of 3 permits keeps {f3}: {down:?}"
    );
    acquired(
        b.obtain_as(LONG, permits(3, 1), false).await?,
        "b takes the third permit",
    )?;
    busy_for(
        &c.obtain_as(LONG, permits(3, 1), false).await?,
        BusyReason::Full,
        "c on the full semaphore",
    )?;
    ensure!(
        a.prolong(LONG).await? == ProlongOutcome::Prolonged,
        "a's share prolongs"
    );
    for (who, owner) in [("a", &a), ("b", &b)] {
        ensure!(
            owner.release(None).await? == ReleaseOutcome::Released,
            "{who} releases"
        );
    }
    ensure!(c.inspect().await? == LockState::Free, "all released: free");
    Ok(())
}

/// Tasks contend for a semaphore of 3 through the client layer, with weights 1 and 2:
/// the weights inside never exceed 3, two holders are inside at once at some point (it is
/// no mutex), and every task gets in.
pub async fn semaphore_capacity_holds_under_contention(suite: &Suite) -> CaseResult {
    const TASKS: usize = 8;
    const ROUNDS: usize = 4;
    let Some(backend) = keeps_shared(suite, "semaphore_capacity_holds_under_contention").await
    else {
        return Ok(());
    };
    let locker = Locker::new(backend).with_retry(Retry::exponential(ms(1), ms(20)).notified());
    // Each holder stays long enough that another task's obtain lands meanwhile, on any
    // backend: 20 ms, or four uncontended obtains of this one when they take longer (a
    // consensus store commits each write on a majority of its members).
    let started = tokio::time::Instant::now();
    let probe = locker
        .semaphore("pool-probe", 3)
        .ttl(LONG)
        .try_obtain()
        .await?;
    let one_obtain = started.elapsed();
    if let Attempt::Obtained(g) = probe {
        let _ = g.release().await?;
    }
    let stay = ms(20).max(one_obtain * 4);
    let inside = Arc::new(AtomicUsize::new(0));
    // Holders inside at once, and the most seen.
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (locker, inside) = (locker.clone(), Arc::clone(&inside));
        let (holders, most) = (Arc::clone(&holders), Arc::clone(&most));
        let weight = 1 + (task % 2);
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = match locker
                    .semaphore("pool", 3)
                    .weight(u32::try_from(weight).unwrap_or(1))
                    .ttl(LONG)
                    .wait(ms(60_000))
                    .obtain()
                    .await?
                {
                    Attempt::Obtained(g) => g,
                    Attempt::Busy(b) => return Err(Failure(format!("gave up waiting: {b}"))),
                };
                let now = inside.fetch_add(weight, Ordering::SeqCst) + weight;
                most.fetch_max(holders.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                ensure!(now <= 3, "{now} permits of 3 taken at once");
                tokio::time::sleep(stay).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                inside.fetch_sub(weight, Ordering::SeqCst);
                let r = guard.release().await?;
                ensure!(
                    r == ReleaseOutcome::Released,
                    "release under contention: {r:?}"
                );
            }
            Ok::<(), Failure>(())
        }));
    }
    join_tasks(tasks).await?;
    ensure!(
        most.load(Ordering::SeqCst) >= 2,
        "the semaphore never let two in at once: it behaved as a mutex"
    );
    Ok(())
}
