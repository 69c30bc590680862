//! After the backend lost its data or its connections.

use super::*;

/// After the backend loses its data, a holder's prolong answers Lost (never Prolonged) and
/// fencing still grows.
pub async fn data_loss_is_lost_and_fencing_still_grows(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let a = Owner::new(&backend, "data-loss", "a");
    let b = Owner::new(&backend, "data-loss", "b");
    let before = acquired(a.obtain(LONG).await?, "obtain")?;
    if !suite.harness.lose_data(&backend).await {
        return Err(Failure(
            "the harness cannot make the backend lose its data; implement Harness::lose_data"
                .into(),
        ));
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
