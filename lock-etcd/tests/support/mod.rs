//! One private etcd member for a whole test binary, and the conformance harness on it.

#![allow(dead_code)]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lock_conformance::{async_trait, Faulty, Harness};
use lock_core::backend::Token;
use lock_core::LockBackend;
use lock_etcd::EtcdBackend;
use test_servers::etcd::EtcdCluster;

/// The test binary's etcd member, started on first use, stopped by the reaper when the
/// binary ends.
pub(crate) fn cluster() -> &'static EtcdCluster {
    static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| EtcdCluster::start(1))
}

/// A prefix nobody used.
pub(crate) fn fresh_prefix() -> String {
    format!("t-{}", &Token::generate().unwrap().to_hex()[..12])
}

/// A backend on `endpoints` under `prefix`.
pub(crate) async fn backend_at(endpoints: &[String], prefix: &str) -> EtcdBackend {
    EtcdBackend::builder(endpoints.iter().cloned())
        .prefix(prefix)
        .connect()
        .await
        .expect("connect to the test etcd")
}

/// The conformance harness: every backend under a fresh prefix of the one member, through
/// a proxy of its own so that the harness can cut its connections.
pub(crate) struct Etcd {
    proxies: Mutex<Vec<test_servers::proxy::FaultProxy>>,
}

impl Etcd {
    pub(crate) fn new() -> Self {
        Etcd {
            proxies: Mutex::default(),
        }
    }
}

#[async_trait]
impl Harness for Etcd {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        let (proxy, proxied) = test_servers::proxy::in_front_of(&cluster().endpoint(0));
        self.proxies.lock().unwrap().push(proxy);
        Arc::new(backend_at(&[proxied], &fresh_prefix()).await)
    }

    async fn drop_connections(&self, _: &Arc<dyn LockBackend>) -> bool {
        for proxy in self.proxies.lock().unwrap().iter() {
            proxy.cut();
        }
        true
    }

    async fn namespaced(&self, namespace: &str) -> Option<Arc<dyn LockBackend>> {
        Some(Arc::new(
            backend_at(&cluster().endpoints(), &format!("ns-space{namespace}")).await,
        ))
    }

    async fn lose_data(&self, backend: &Arc<dyn LockBackend>) -> bool {
        // Every key of the backend's prefix, as a restore from an empty snapshot would;
        // the revision keeps fencing growing.
        let prefix = format!("{backend:?}");
        let prefix = prefix
            .split("prefix: \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the backend's Debug names its prefix")
            .to_owned();
        cluster().etcdctl(&["del", "--prefix", &format!("{prefix}/")]);
        true
    }

    async fn behind_faults(&self) -> Option<Faulty> {
        let endpoint = cluster().endpoint(0);
        let (proxy, proxied) = test_servers::proxy::in_front_of(&endpoint);
        let prefix = fresh_prefix();
        let deadline = Duration::from_secs(1);
        let backend = EtcdBackend::builder([proxied])
            .prefix(&prefix)
            .timeout(deadline)
            .connect()
            .await
            .expect("connect through the proxy");
        let direct = backend_at(&[endpoint], &prefix).await;
        Some(Faulty {
            backend: Arc::new(backend),
            direct: Arc::new(direct),
            faults: Box::new(proxy),
            deadline,
        })
    }

    async fn shared_config(&self) -> Option<String> {
        Some(format!("{} {}", cluster().endpoint(0), fresh_prefix()))
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        let (endpoint, prefix) = config.split_once(' ').expect("endpoint and prefix");
        Arc::new(backend_at(&[endpoint.to_owned()], prefix).await)
    }
}
