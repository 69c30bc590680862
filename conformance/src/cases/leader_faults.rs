//! Leader election on a bad day: a leader behind a partition, a slow server and cut
//! connections, a second candidate campaigning straight to the server. Never two leaders:
//! whenever the candidate is elected, the first leader's `lost()` has fired by then (within
//! the contract's margin), and the new term is higher.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Attempt, Fencing, Leadership, Locker, ReleaseOutcome, Retry};
use tokio::time::Instant;

use super::faults::{faulty, LOST_MARGIN};
use crate::harness::{ms, Faulty, NetworkFaults};
use crate::{ensure, CaseResult, Failure, Suite};

/// The leadership's lease in these cases.
const TTL: Duration = Duration::from_millis(1_500);

/// What the second candidate's campaign came to: when it was elected, and its leadership.
type Elected = Result<(Instant, Leadership), Failure>;

/// Three leaders behind the fault proxy, each with a second candidate waiting straight at
/// the server: one partitioned (its `lost()` fires before the candidate is elected, or at
/// most [`LOST_MARGIN`] after), one on a slow server (replies delayed by a tenth of the
/// call's deadline) and one whose connections are cut. However each leadership ends, the
/// candidate never leads while the first leader does not know it lost, and its term is
/// higher. After the slow server and the cut the first leader resigns, and the candidate
/// follows it at once.
pub async fn leaders_never_overlap_under_network_faults(suite: &Suite) -> CaseResult {
    let Some(f) = faulty(suite, "leaders_never_overlap_under_network_faults").await? else {
        return Ok(());
    };
    let partitioned = one_leader(&f, "leader-partition", |faults| faults.freeze()).await;
    f.faults.heal();
    let lost_in_partition = partitioned?;
    ensure!(
        lost_in_partition,
        "a partitioned leader kept its leadership past its lease"
    );
    let latency = f.deadline / 10;
    let slow = one_leader(&f, "leader-slow", |faults| faults.delay_replies(latency)).await;
    f.faults.heal();
    let lost_when_slow = slow?;
    let cut = one_leader(&f, "leader-cut", |faults| faults.cut()).await;
    f.faults.heal();
    let lost_when_cut = cut?;
    super::report(format_args!(
        "{}: leaders under faults: the partitioned leader lost, the slow server's {}, the \
         cut one's {}; never two at once",
        suite.name,
        if lost_when_slow { "lost" } else { "kept" },
        if lost_when_cut { "lost" } else { "kept" },
    ));
    Ok(())
}

/// One leader through the faulty backend, `fault` injected while it leads and a second
/// candidate campaigns directly. Returns whether the first leadership was lost to the
/// fault (rather than resigned after two leases).
async fn one_leader(
    f: &Faulty,
    key: &'static str,
    fault: impl FnOnce(&dyn NetworkFaults),
) -> Result<bool, Failure> {
    let first = Locker::new(Arc::clone(&f.backend));
    let leader = match first
        .elect(key)
        .ttl(TTL)
        .identity("first")
        .wait(ms(10_000))
        .lead()
        .await?
    {
        Attempt::Obtained(l) => l,
        Attempt::Busy(b) => return Err(Failure(format!("{key}: a fresh key is busy: {b}"))),
    };
    let first_term = leader.term();
    let second =
        Locker::new(Arc::clone(&f.direct)).with_retry(Retry::exponential(ms(1), ms(20)).notified());
    let mut candidate = tokio::spawn(async move {
        match second
            .elect(key)
            .ttl(TTL)
            .identity("second")
            .wait(ms(30_000))
            .lead()
            .await
        {
            Ok(Attempt::Obtained(l)) => Ok((Instant::now(), l)),
            Ok(Attempt::Busy(b)) => Err(Failure(format!("{key}: never elected: {b}"))),
            Err(e) => Err(Failure(format!("{key}: campaigning: {e}"))),
        }
    });
    fault(f.faults.as_ref());
    // Two leases: a partitioned leader's lease ends within the first, a renewed one
    // outlasts both.
    let watched = tokio::time::timeout(TTL * 2, async {
        tokio::select! {
            () = leader.lost() => Watched::Lost(Instant::now()),
            elected = &mut candidate => Watched::Elected(joined(elected)),
        }
    })
    .await
    .unwrap_or(Watched::Neither);
    match watched {
        Watched::Lost(lost_at) => {
            let elected = tokio::time::timeout(ms(30_000), &mut candidate)
                .await
                .map_err(|_| Failure(format!("{key}: the candidate never ended")))?;
            let (at, successor) = joined(elected)?;
            let late = lost_at.saturating_duration_since(at);
            ensure!(
                late <= LOST_MARGIN,
                "{key}: the first leader heard it lost {late:?} after its successor was elected"
            );
            check_successor(key, first_term, successor).await?;
            Ok(true)
        }
        Watched::Elected(elected) => {
            // Elected while the first leader had not heard it lost: only within the margin.
            let fired = tokio::time::timeout(LOST_MARGIN, leader.lost()).await;
            ensure!(
                fired.is_ok(),
                "{key}: a second leader was elected while the first still led"
            );
            check_successor(key, first_term, elected?.1).await?;
            Ok(true)
        }
        Watched::Neither => {
            // Still leading after two leases: step down, the candidate follows.
            ensure!(
                !leader.is_lost(),
                "{key}: lost() did not fire on a lost leadership"
            );
            match leader.resign().await {
                Ok(ReleaseOutcome::Released) => {}
                Ok(other) => return Err(Failure(format!("{key}: resign answered {other:?}"))),
                Err(e) => ensure!(e.is_retry_safe(), "{key}: resign: {e}"),
            }
            let elected = tokio::time::timeout(ms(30_000), &mut candidate)
                .await
                .map_err(|_| Failure(format!("{key}: the candidate never ended")))?;
            let (_, successor) = joined(elected)?;
            check_successor(key, first_term, successor).await?;
            Ok(false)
        }
    }
}

/// The successor's term is higher than the first leader's. Resigns it.
async fn check_successor(key: &str, first_term: Fencing, successor: Leadership) -> CaseResult {
    ensure!(
        successor.term() > first_term,
        "{key}: the successor's term {} is not above the first leader's {first_term}",
        successor.term()
    );
    let resigned = successor.resign().await?;
    ensure!(
        resigned == ReleaseOutcome::Released,
        "{key}: the successor's resign answered {resigned:?}"
    );
    Ok(())
}

enum Watched {
    Lost(Instant),
    Elected(Elected),
    Neither,
}

fn joined(r: Result<Elected, tokio::task::JoinError>) -> Elected {
    r.map_err(|e| Failure(format!("the candidate's task panicked: {e}")))?
}
