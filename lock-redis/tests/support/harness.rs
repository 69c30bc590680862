//! The conformance harness for either variant on a shared server, cluster or Sentinel set.

use std::sync::{Arc, Mutex};

use lock_conformance::{async_trait, Faulty, Harness};
use lock_core::backend::Token;
use lock_core::LockBackend;
use lock_redis::{RedisBackend, Variant};

use super::{admin_for, kill_clients};

pub struct Redis {
    /// Where the servers are, found on first use: a child process of the multi-process
    /// cases only connects to the URL its parent hands it, and starts no servers.
    url: std::sync::OnceLock<String>,
    source: fn() -> String,
    variant: Variant,
    made: Mutex<Vec<(String, RedisBackend)>>,
    space: std::sync::OnceLock<String>,
}

impl Redis {
    pub fn new(variant: Variant) -> Self {
        Self::on(super::shared_url, variant)
    }

    /// The harness on the shared private cluster (`REDIS_CLUSTER_URL` if set).
    pub fn cluster(variant: Variant) -> Self {
        Self::on(test_servers::cluster::shared_url, variant)
    }

    /// The harness on the shared private Sentinel set (`REDIS_SENTINEL_URL` if set).
    pub fn sentinel(variant: Variant) -> Self {
        Self::on(test_servers::sentinel::shared_url, variant)
    }

    fn on(source: fn() -> String, variant: Variant) -> Self {
        Redis {
            url: std::sync::OnceLock::new(),
            source,
            variant,
            made: Mutex::default(),
            space: std::sync::OnceLock::new(),
        }
    }

    fn url(&self) -> &str {
        self.url.get_or_init(self.source)
    }

    /// A single server: faults through a proxy in front of it (a cluster's or Sentinel's
    /// clients find the nodes' own addresses, so those get a proxy per node).
    fn single(&self) -> bool {
        let url = self.url();
        url.starts_with("redis://") || url.starts_with("rediss://")
    }

    async fn make(&self, prefix: String) -> RedisBackend {
        let backend = RedisBackend::builder(self.url())
            .variant(self.variant)
            .prefix(prefix.clone())
            .connect()
            .await
            .unwrap_or_else(|e| panic!("Redis at {} is needed: {e}", self.url()));
        self.made.lock().unwrap().push((prefix, backend.clone()));
        backend
    }

    fn fresh_prefix() -> String {
        format!("test-{}:", Token::generate().unwrap().to_hex())
    }

    fn made(&self) -> Vec<(String, RedisBackend)> {
        self.made.lock().unwrap().clone()
    }

    /// Every key of this test's namespaces (on a cluster `KEYS` goes to every primary).
    async fn keys<C: redis::aio::ConnectionLike>(&self, admin: &mut C) -> Vec<String> {
        let mut all = Vec::new();
        for (prefix, _) in self.made() {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query_async(admin)
                .await
                .unwrap();
            all.extend(keys);
        }
        all
    }
}

#[async_trait]
impl Harness for Redis {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(self.make(Self::fresh_prefix()).await)
    }

    async fn behind_faults(&self) -> Option<Faulty> {
        let prefix = Self::fresh_prefix();
        let deadline = std::time::Duration::from_secs(1);
        let (faults, builder): (Box<dyn lock_conformance::NetworkFaults>, _) = if self.single() {
            let (proxy, url) = test_servers::proxy::in_front_of(self.url());
            (Box::new(proxy), RedisBackend::builder(url))
        } else {
            // A proxy per node (a cluster) or for the primary (Sentinel), and the nodes'
            // announced addresses mapped to the proxies.
            let ports = node_ports(self.url()).await;
            let proxies = test_servers::proxy::ProxySet::start(&ports);
            let pairs: Vec<(String, String)> = proxies
                .proxies
                .iter()
                .map(|(real, proxy)| {
                    (
                        format!("127.0.0.1:{real}"),
                        format!("127.0.0.1:{}", proxy.port()),
                    )
                })
                .collect();
            let url = if self.url().starts_with("redis+cluster://") {
                let seeds: Vec<&str> = pairs.iter().map(|(_, p)| p.as_str()).collect();
                format!("redis+cluster://{}/", seeds.join(","))
            } else {
                self.url().to_owned()
            };
            let mut b = RedisBackend::builder(url);
            for (real, proxy) in pairs {
                b = b.map_address(real, proxy);
            }
            (Box::new(proxies), b)
        };
        let backend = builder
            .variant(self.variant)
            .prefix(prefix.clone())
            .timeout(deadline)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("Redis through the proxy: {e}"));
        Some(Faulty {
            backend: Arc::new(backend),
            direct: Arc::new(self.make(prefix).await),
            faults,
            deadline,
        })
    }

    async fn namespaced(&self, namespace: &str) -> Option<Arc<dyn LockBackend>> {
        // One space per harness (per test), so that equal namespaces share locks.
        let space = self.space.get_or_init(Self::fresh_prefix);
        Some(Arc::new(self.make(format!("{space}{namespace}")).await))
    }

    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        // Every key of this test's namespaces, fencing counters included, as a restart
        // without persistence would (the restart itself is in tests/faults.rs).
        let mut admin = admin_for(self.url()).await;
        for key in self.keys(&mut admin).await {
            // Each DEL goes to its key's own primary.
            let _: i64 = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
        true
    }

    /// The keys of this test's namespaces that have no expiry (`PTTL` -1): Redis removes
    /// every other key on its own.
    async fn lasting_records(&self) -> Option<u64> {
        let mut admin = admin_for(self.url()).await;
        let mut lasting = 0;
        for key in self.keys(&mut admin).await {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut admin)
                .await
                .unwrap();
            if pttl == -1 {
                lasting += 1;
            }
        }
        Some(lasting)
    }

    async fn drop_connections(&self, _: &Arc<dyn LockBackend>) -> bool {
        for (_, b) in self.made() {
            kill_clients(self.url(), &b).await;
        }
        true
    }

    async fn shared_config(&self) -> Option<String> {
        let variant = match self.variant {
            Variant::Lua => "lua",
            Variant::Watch => "watch",
        };
        Some(format!("{variant} {} {}", self.url(), Self::fresh_prefix()))
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        let mut parts = config.split(' ');
        let (variant, url, prefix) = (parts.next(), parts.next(), parts.next());
        let variant = match variant {
            Some("watch") => Variant::Watch,
            _ => Variant::Lua,
        };
        Arc::new(
            RedisBackend::builder(url.expect("url"))
                .variant(variant)
                .prefix(prefix.expect("prefix"))
                .connect()
                .await
                .expect("Redis"),
        )
    }
}

/// The ports of the nodes a cluster or Sentinel URL leads to: every cluster node, or the
/// primary the sentinels name.
async fn node_ports(url: &str) -> Vec<u16> {
    let mut admin = admin_for(url).await;
    let port = |addr: &str| -> u16 {
        let addr = addr.split('@').next().unwrap();
        addr.rsplit(':').next().unwrap().parse().unwrap()
    };
    if url.starts_with("redis+cluster://") {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut admin)
            .await
            .unwrap();
        nodes
            .lines()
            .filter_map(|l| l.split(' ').nth(1))
            .map(port)
            .collect()
    } else {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut admin)
            .await
            .unwrap();
        let tcp = info
            .lines()
            .find_map(|l| l.strip_prefix("tcp_port:"))
            .unwrap();
        vec![tcp.trim().parse().unwrap()]
    }
}
