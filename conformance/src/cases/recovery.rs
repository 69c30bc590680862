//! After the backend lost its data or its connections.

use super::*;

/// After the backend loses its data, a holder's prolong answers Lost (never Prolonged) and
/// fencing still grows.
///
/// Needs [`Harness::lose_data`](crate::Harness::lose_data). Without it the case is skipped
/// with a line on stderr, except on a backend that declares `cross_host`: a server's data
/// can always be lost on purpose (`FLUSHDB`, `DELETE FROM` its table), and a networked
/// backend's answer to a restart without persistence is what this case is for.
pub async fn data_loss_is_lost_and_fencing_still_grows(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let a = Owner::new(&backend, "data-loss", "a");
    let b = Owner::new(&backend, "data-loss", "b");
    let before = acquired(a.obtain(LONG).await?, "obtain")?;
    if !suite.harness.lose_data(&backend).await {
        ensure!(
            !backend.capabilities().cross_host,
            "a networked backend's harness must make it lose its data (implement \
             Harness::lose_data: FLUSHDB, DELETE FROM its table, ...)"
        );
        report(format_args!(
            "{}: data_loss_is_lost_and_fencing_still_grows: skipped, the harness cannot make \
             the backend lose its data (Harness::lose_data)",
            suite.name
        ));
        let _ = a.release(None).await?;
        return Ok(());
    }
    let p = retry_once(|| a.prolong(LONG)).await?;
    ensure!(
        p == ProlongOutcome::Lost,
        "prolong after data loss: expected Lost, got {p:?}"
    );
    let after = acquired(
        retry_once(|| b.obtain(LONG)).await?,
        "obtain after data loss",
    )?;
    ensure!(
        after > before,
        "fencing after data loss {after} does not exceed {before}"
    );
    Ok(())
}

/// After the backend's connections are cut, every call either answers correctly or errors,
/// and a retry of the same call is safe.
pub async fn dropped_connections_leave_a_safe_state(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let a = Owner::new(&backend, "cut", "a");
    let b = Owner::new(&backend, "cut", "b");
    let fencing = acquired(a.obtain(LONG).await?, "obtain")?;
    if !suite.harness.drop_connections(&backend).await {
        ensure!(
            !backend.capabilities().cross_host,
            "a networked backend must let the harness cut its connections (Harness::drop_connections)"
        );
        return Ok(());
    }
    let p = retry_once(|| a.prolong(LONG)).await?;
    ensure!(
        p == ProlongOutcome::Prolonged,
        "prolong after reconnect: expected Prolonged, got {p:?}"
    );
    ensure!(
        busy(&retry_once(|| b.obtain(LONG)).await?),
        "the lock must survive a dropped connection"
    );
    ensure!(
        matches!(retry_once(|| a.inspect()).await?, LockState::Held { fencing: f, .. } if f == fencing),
        "fencing changed across a reconnect"
    );
    ensure!(
        retry_once(|| a.release(None)).await? == ReleaseOutcome::Released,
        "release after reconnect"
    );
    Ok(())
}

async fn retry_once<T, F, Fut>(mut call: F) -> lock_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lock_core::Result<T>>,
{
    match call().await {
        Err(e) if e.is_retry_safe() => {
            tokio::time::sleep(ms(200)).await;
            call().await
        }
        other => other,
    }
}
