//! A hold renewed for the ttl it has writes nothing through etcd's log: its leases are kept
//! alive (`src/renew.rs`), and it outlives its first ttl all the same. A renewal for another
//! ttl still writes.

mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Attempt, LockState, Locker, ProlongOutcome};
use lock_etcd::etcd_client::Client;
use tokio::time::Instant;

/// The cluster's revision now: it grows with every write, and only with writes.
async fn revision(client: &mut Client) -> i64 {
    let read = client.get("anything", None).await.expect("read");
    read.header().expect("a header").revision()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_for_the_same_ttl_writes_nothing_and_keeps_the_hold() {
    let endpoints = support::cluster().endpoints();
    let prefix = support::fresh_prefix();
    let backend = support::backend_at(&endpoints, &prefix).await;
    let locker = Locker::new(Arc::new(backend));
    let mut client = Client::connect(&endpoints, None).await.expect("a client");
    // Renewed every second: each keep-alive has two seconds of margin on a loaded machine.
    let ttl = Duration::from_secs(3);
    let guard = match locker.lock("renewed").ttl(ttl).try_obtain().await {
        Ok(Attempt::Obtained(g)) => g,
        other => panic!("a fresh key: {other:?}"),
    };
    let before = revision(&mut client).await;
    // Six renewals over twice the ttl: the hold lives only if each one reached its leases.
    let start = Instant::now();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            guard.prolongate(ttl).await.expect("prolong"),
            ProlongOutcome::Prolonged
        );
    }
    assert!(
        start.elapsed() > ttl + ttl / 2,
        "the renewals outlasted the ttl"
    );
    assert_eq!(
        revision(&mut client).await,
        before,
        "a renewal for the same ttl wrote to etcd"
    );
    let state = locker.inspect("renewed").await.expect("inspect");
    assert!(
        matches!(state, LockState::Held { .. }),
        "the hold outlived its first ttl: {state:?}"
    );
    // Another ttl needs leases of another length: written.
    assert_eq!(
        guard.prolongate(ttl * 2).await.expect("prolong"),
        ProlongOutcome::Prolonged
    );
    assert!(revision(&mut client).await > before, "a new ttl is written");
    guard.release().await.expect("release");
}
