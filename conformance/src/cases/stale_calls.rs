//! Calls that land after a later call of the same token: a prolong takes no turn in the
//! client (it only moves the expiry of whatever the token holds), so a slow one can reach
//! the server after the same guard's release, or after an operator's forced release. It
//! must then change nothing: the key stays free, never held again by nobody.

use super::*;
use crate::cases::faults::faulty;

/// A prolong decided while the hold was live, whose reply (and, for a backend that reads
/// before it writes, whose write) is held back until after the hold was released, after
/// it was force-released, and after it was released and the server then lost its data:
/// once the calls have answered, the key is free. A backend whose write does not check
/// that the hold it renews is still there puts the released hold back, and the key stays
/// held for a ttl by a guard that gave it up (etcd's transaction compared only the keys it
/// kept, and a data loss took the release's wake-up key, the one key that told it the
/// lock had changed: the history checker found it as a `Busy` naming that guard).
pub async fn a_prolong_landing_after_the_release_resurrects_nothing(suite: &Suite) -> CaseResult {
    let case = "a_prolong_landing_after_the_release_resurrects_nothing";
    let Some(f) = faulty(suite, case).await? else {
        return Ok(());
    };
    let slow = Owner::new(&f.backend, "stale-prolong", "holder");
    let direct = Owner {
        backend: Arc::clone(&f.direct),
        ..slow.clone()
    };
    // Connections open before the server turns slow.
    let _ = slow.inspect().await?;
    let latency = f.deadline * 2 / 5;
    for how in [Later::Release, Later::Force, Later::ReleaseAndLoss] {
        acquired(direct.obtain(LONG).await?, "a fresh key")?;
        f.faults.delay_replies(latency);
        let prolong = {
            let slow = slow.clone();
            tokio::spawn(async move { slow.prolong(LONG).await })
        };
        // The prolong's request is at the server (and its read done); its reply waits.
        tokio::time::sleep(latency / 4).await;
        if how == Later::Force {
            let _ = f.direct.force_release(&direct.key).await?;
        } else {
            let released = direct.release(None).await?;
            ensure!(
                released == ReleaseOutcome::Released,
                "the holder's release: {released:?}"
            );
        }
        if how == Later::ReleaseAndLoss && !suite.harness.lose_data(&f.direct).await {
            super::report(format_args!(
                "{}: {case}: the data loss after the release skipped, the harness cannot lose data",
                suite.name
            ));
        }
        let prolonged = prolong
            .await
            .map_err(|e| Failure(format!("the prolong's task: {e}")))?;
        f.faults.heal();
        let state = direct.inspect().await?;
        ensure!(
            state == LockState::Free,
            "a prolong sent before {how:?} and answered after it ({prolonged:?}) left the key \
             {state:?}: it put back a hold that was given up"
        );
        tokio::time::sleep(latency).await;
    }
    Ok(())
}

/// What lands before the slow prolong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Later {
    /// The holder's release.
    Release,
    /// An operator's forced release.
    Force,
    /// The holder's release, then the server losing its data (which may take with it
    /// whatever the release left to mark the key as changed).
    ReleaseAndLoss,
}
