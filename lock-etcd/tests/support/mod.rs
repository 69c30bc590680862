//! Private etcd clusters shared by a whole test binary (one member, and three), and the
//! conformance harness on them.

#![allow(dead_code)]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lock_conformance::{async_trait, Faulty, Harness};
use lock_core::backend::Token;
use lock_core::LockBackend;
use lock_etcd::EtcdBackend;
use test_servers::etcd::EtcdCluster;
use test_servers::proxy::ProxySet;

/// The test binary's one-member cluster, started on first use, stopped by the reaper when
/// the binary ends.
pub(crate) fn cluster() -> &'static EtcdCluster {
    static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| EtcdCluster::start(1))
}

/// The test binary's three-member cluster, likewise.
pub(crate) fn cluster_of_three() -> &'static EtcdCluster {
    static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| EtcdCluster::start(3))
}

/// A prefix nobody used.
pub(crate) fn fresh_prefix() -> String {
    format!("t-{}", &Token::generate().unwrap().to_hex()[..12])
}

/// A backend on `endpoints` under `prefix`, with a 1 s deadline (the fault cases expect
/// about a second).
pub(crate) async fn backend_at(endpoints: &[String], prefix: &str) -> EtcdBackend {
    EtcdBackend::builder(endpoints.iter().cloned())
        .prefix(prefix)
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect to the test etcd")
}

fn port(endpoint: &str) -> u16 {
    endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("an endpoint with a port")
}

/// Proxies in front of every member of `cluster`, and the endpoints through them.
fn proxied(cluster: &EtcdCluster) -> (ProxySet, Vec<String>) {
    let ports: Vec<u16> = cluster.endpoints().iter().map(|e| port(e)).collect();
    let set = ProxySet::start(&ports);
    let endpoints = set
        .proxies
        .iter()
        .map(|(_, p)| format!("http://127.0.0.1:{}", p.port()))
        .collect();
    (set, endpoints)
}

/// The conformance harness: every backend under a fresh prefix of one cluster, through
/// proxies of its own so that the harness can cut its connections.
pub(crate) struct Etcd {
    cluster: fn() -> &'static EtcdCluster,
    proxies: Mutex<Vec<ProxySet>>,
    /// The prefix of every backend [`Harness::backend`] made.
    prefixes: Mutex<Vec<String>>,
}

impl Etcd {
    /// On the one-member cluster.
    pub(crate) fn new() -> Self {
        Etcd::on(cluster)
    }

    /// On the cluster `cluster` gives.
    pub(crate) fn on(cluster: fn() -> &'static EtcdCluster) -> Self {
        Etcd {
            cluster,
            proxies: Mutex::default(),
            prefixes: Mutex::default(),
        }
    }
}

#[async_trait]
impl Harness for Etcd {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        let (set, endpoints) = proxied((self.cluster)());
        self.proxies.lock().unwrap().push(set);
        let prefix = fresh_prefix();
        self.prefixes.lock().unwrap().push(prefix.clone());
        Arc::new(backend_at(&endpoints, &prefix).await)
    }

    /// The keys under the backends' prefixes on no lease: etcd removes every other key
    /// when its lease ends.
    async fn lasting_records(&self) -> Option<u64> {
        let endpoints = (self.cluster)().endpoints();
        let mut client = lock_etcd::etcd_client::Client::connect(endpoints, None)
            .await
            .expect("connect to the test etcd");
        let prefixes = self.prefixes.lock().unwrap().clone();
        let mut lasting = 0;
        for prefix in prefixes {
            let options = lock_etcd::etcd_client::GetOptions::new().with_prefix();
            let got = client
                .get(format!("{prefix}/"), Some(options))
                .await
                .expect("a range read");
            lasting += got.kvs().iter().filter(|kv| kv.lease() == 0).count() as u64;
        }
        Some(lasting)
    }

    async fn drop_connections(&self, _: &Arc<dyn LockBackend>) -> bool {
        for set in self.proxies.lock().unwrap().iter() {
            lock_conformance::NetworkFaults::cut(set);
        }
        true
    }

    async fn namespaced(&self, namespace: &str) -> Option<Arc<dyn LockBackend>> {
        let endpoints = (self.cluster)().endpoints();
        Some(Arc::new(
            backend_at(&endpoints, &format!("ns-space{namespace}")).await,
        ))
    }

    async fn lose_data(&self, backend: &Arc<dyn LockBackend>) -> bool {
        // Every key of the backend's prefix, as a restore from an empty snapshot would;
        // the revision keeps fencing growing.
        let shown = format!("{backend:?}");
        let prefix = shown
            .split("prefix: \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the backend's Debug names its prefix")
            .to_owned();
        (self.cluster)().etcdctl(&["del", "--prefix", &format!("{prefix}/")]);
        true
    }

    async fn behind_faults(&self) -> Option<Faulty> {
        let cluster = (self.cluster)();
        let (set, endpoints) = proxied(cluster);
        let prefix = fresh_prefix();
        let backend = backend_at(&endpoints, &prefix).await;
        let direct = backend_at(&cluster.endpoints(), &prefix).await;
        Some(Faulty {
            backend: Arc::new(backend),
            direct: Arc::new(direct),
            faults: Box::new(set),
            deadline: Duration::from_secs(1),
        })
    }

    async fn shared_config(&self) -> Option<String> {
        let endpoints = (self.cluster)().endpoints();
        Some(format!("{} {}", endpoints.join(","), fresh_prefix()))
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        let (endpoints, prefix) = config.split_once(' ').expect("endpoints and prefix");
        let endpoints: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
        Arc::new(backend_at(&endpoints, prefix).await)
    }
}
