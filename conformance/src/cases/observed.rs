//! What a [`Locker`]'s observer sees on this backend: every obtain, hold, loss, watchdog
//! batch and (behind the fault proxy) backend error, and [`Locker::stats`] agreeing with it.

use std::sync::Arc;

use lock_core::{Attempt, Locker, ProlongOutcome, ReleaseOutcome, Retry};

use crate::cases::faults::faulty;
use crate::counts::{read, Counts};
use crate::harness::ms;
use crate::{ensure, CaseResult, Failure, Suite};

/// A counting observer on this backend sees each obtain start and end (obtained, busy,
/// timed out), each hold start and end (released, lost), a loss to a forced release with
/// its cause, the watchdog's batches, and, behind the fault proxy, an obtain's backend
/// error; [`Locker::stats`] counts the same.
pub async fn observer_sees_every_event(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let counts = Arc::new(Counts::default());
    let locker = Locker::new(Arc::clone(&backend)).with_observer(counts.clone());

    let guard = match locker
        .lock("observed")
        .ttl(ms(1_500))
        .watchdog()
        .try_obtain()
        .await?
    {
        Attempt::Obtained(g) => g,
        Attempt::Busy(b) => return Err(Failure(format!("a fresh key is busy: {b}"))),
    };
    ensure!(
        locker.lock("observed").try_obtain().await?.is_busy(),
        "a held key must be busy"
    );
    let waited = locker
        .lock("observed")
        .wait(ms(200))
        .retry(Retry::linear(ms(50)))
        .obtain()
        .await?;
    ensure!(waited.is_busy(), "a held key must stay busy for the wait");
    let stats = locker.stats();
    ensure!(
        (stats.held, stats.waiting) == (1, 0),
        "one lock held, nobody waiting: {stats:?}"
    );
    // The watchdog renews every 500 ms, leaving each renewal 1 s to commit.
    tokio::time::sleep(ms(1_200)).await;
    ensure!(!guard.is_lost(), "the watchdog kept the lock");
    let released = guard.release().await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "release answered {released:?}"
    );

    let taken = match locker
        .lock("observed-lost")
        .ttl(ms(30_000))
        .try_obtain()
        .await?
    {
        Attempt::Obtained(g) => g,
        Attempt::Busy(b) => return Err(Failure(format!("a fresh key is busy: {b}"))),
    };
    let _ = backend.force_release(taken.key()).await?;
    let prolonged = taken.prolongate(ms(30_000)).await?;
    ensure!(
        prolonged == ProlongOutcome::Lost,
        "a prolong after a forced release answered {prolonged:?}"
    );
    let _ = taken.release().await?;

    let seen = [
        ("obtains started", read(&counts.started), 4),
        ("obtained", read(&counts.obtained), 2),
        ("busy", read(&counts.busy), 1),
        ("timed out", read(&counts.timed_out), 1),
        ("holds started", read(&counts.holds), 2),
        ("released", read(&counts.released), 1),
        ("ended lost", read(&counts.ended_lost), 1),
        ("lost, taken", read(&counts.taken), 1),
        ("anything else", read(&counts.other), 0),
    ];
    for (what, got, expected) in seen {
        ensure!(
            got == expected,
            "{what}: the observer saw {got}, expected {expected}"
        );
    }
    let batches = read(&counts.batches);
    ensure!(
        batches >= 1,
        "no watchdog batch reported in 1.2 s at a 500 ms period"
    );
    let stats = locker.stats();
    let agree = [
        ("obtained", stats.obtained, 2),
        ("busy", stats.busy, 1),
        ("timed out", stats.timed_out, 1),
        ("held", stats.held, 0),
        ("waiting", stats.waiting, 0),
        ("lost", stats.lost, 1),
        ("renewals", stats.renewals, read(&counts.renewed)),
        ("backend errors", stats.backend_errors, 0),
    ];
    for (what, got, expected) in agree {
        ensure!(
            got == expected,
            "stats().{what} is {got}, expected {expected}"
        );
    }

    let Some(f) = faulty(suite, "observer_sees_every_event (backend errors)").await? else {
        return Ok(());
    };
    let counts = Arc::new(Counts::default());
    let locker = Locker::new(Arc::clone(&f.backend)).with_observer(counts.clone());
    f.faults.freeze();
    let attempt = locker
        .lock("observed-error")
        .ttl(ms(1_000))
        .try_obtain()
        .await;
    f.faults.heal();
    ensure!(
        matches!(&attempt, Err(e) if e.is_retry_safe()),
        "an obtain in a partition must fail retry-safe, got {attempt:?}"
    );
    let (errors, failed) = (read(&counts.obtain_errors), read(&counts.failed));
    ensure!(
        (errors, failed) == (1, 1),
        "a failed obtain: {errors} obtain errors and {failed} failed obtains seen, expected 1 and 1"
    );
    ensure!(
        locker.stats().backend_errors == 1,
        "stats().backend_errors is {}",
        locker.stats().backend_errors
    );
    Ok(())
}
