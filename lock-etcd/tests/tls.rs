//! TLS to the members: a member that speaks only TLS, reached with its certificate
//! authority (by the builder and by an `etcds://` URL), and refused without it, in time and
//! with a message that says why.

use std::time::{Duration, Instant};

use lock_core::{Locker, ReleaseOutcome};
use lock_etcd::{EtcdBackend, EtcdBuilder};
use test_servers::etcd::EtcdCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_member_is_reached_with_its_authority_and_refused_without() {
    let member = tokio::task::block_in_place(|| EtcdCluster::start_tls(1));
    let endpoint = member.endpoint(0);
    assert!(endpoint.starts_with("https://"), "{endpoint}");

    let backend = EtcdBackend::builder([endpoint.clone()])
        .tls(member.ca_pem())
        .connect()
        .await
        .expect("connects with the member's certificate authority");
    let locker = Locker::new(std::sync::Arc::new(backend));
    let guard = locker
        .lock("tls")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);

    // The same through a URL: the host without a scheme, the authority from a file.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, member.ca_pem()).unwrap();
    let host = endpoint.trim_start_matches("https://");
    let url = format!("etcds://{host}/by-url?ca={}", ca.display());
    let backend = EtcdBuilder::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let locker = Locker::new(std::sync::Arc::new(backend));
    let guard = locker
        .lock("tls")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);

    // Without the authority: refused within the deadline, saying it could not connect.
    let started = Instant::now();
    let err = EtcdBackend::builder([endpoint])
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect_err("a member whose certificate nobody trusts");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let text = err.to_string();
    assert!(text.contains("etcd at https://127.0.0.1"), "{text}");
}

#[test]
fn a_client_key_never_shows() {
    let b = EtcdBackend::builder(["h:2379"])
        .user("app", "pass-word-1")
        .tls("CA PEM")
        .client_certificate("CERT PEM", "PRIVATE KEY PEM");
    let shown = format!("{b:?}");
    assert!(
        !shown.contains("PRIVATE KEY") && !shown.contains("pass-word-1"),
        "{shown}"
    );
    assert!(shown.contains("client_certificate: true"), "{shown}");
}
