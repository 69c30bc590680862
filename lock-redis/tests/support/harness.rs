//! The conformance harness for either variant on the shared server.

use std::sync::{Arc, Mutex};

use lock_conformance::{async_trait, Faulty, Harness};
use lock_core::{LockBackend, Token};
use lock_redis::{RedisBackend, Variant};

use super::{admin, kill_clients};

pub struct Redis {
    url: String,
    variant: Variant,
    made: Mutex<Vec<(String, RedisBackend)>>,
    space: std::sync::OnceLock<String>,
}

impl Redis {
    pub fn new(variant: Variant) -> Self {
        Redis {
            url: super::shared_url(),
            variant,
            made: Mutex::default(),
            space: std::sync::OnceLock::new(),
        }
    }

    async fn make(&self, prefix: String) -> RedisBackend {
        let backend = RedisBackend::connect_with(&self.url, self.variant)
            .await
            .unwrap_or_else(|e| panic!("Redis at {} is needed: {e}", self.url))
            .with_prefix(prefix.clone());
        self.made.lock().unwrap().push((prefix, backend.clone()));
        backend
    }

    fn fresh_prefix() -> String {
        format!("test-{}:", Token::generate().unwrap().to_hex())
    }

    fn made(&self) -> Vec<(String, RedisBackend)> {
        self.made.lock().unwrap().clone()
    }
}

#[async_trait]
impl Harness for Redis {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(self.make(Self::fresh_prefix()).await)
    }

    async fn behind_faults(&self) -> Option<Faulty> {
        let (proxy, url) = test_servers::proxy::in_front_of(&self.url);
        let prefix = Self::fresh_prefix();
        let deadline = std::time::Duration::from_secs(1);
        let backend = RedisBackend::connect_with(&url, self.variant)
            .await
            .unwrap_or_else(|e| panic!("Redis through the proxy: {e}"))
            .with_prefix(prefix.clone())
            .with_timeout(deadline)
            .unwrap();
        Some(Faulty {
            backend: Arc::new(backend),
            direct: Arc::new(self.make(prefix).await),
            faults: Box::new(proxy),
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
        let mut admin = admin(&self.url).await;
        for (prefix, _) in self.made() {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query_async(&mut admin)
                .await
                .unwrap();
            if !keys.is_empty() {
                let _: i64 = redis::cmd("DEL")
                    .arg(keys)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
            }
        }
        true
    }

    async fn drop_connections(&self, _: &Arc<dyn LockBackend>) -> bool {
        for (_, b) in self.made() {
            kill_clients(&self.url, &b).await;
        }
        true
    }

    async fn shared_config(&self) -> Option<String> {
        let variant = match self.variant {
            Variant::Lua => "lua",
            Variant::Watch => "watch",
        };
        Some(format!("{variant} {} {}", self.url, Self::fresh_prefix()))
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        let mut parts = config.split(' ');
        let (variant, url, prefix) = (parts.next(), parts.next(), parts.next());
        let variant = match variant {
            Some("watch") => Variant::Watch,
            _ => Variant::Lua,
        };
        Arc::new(
            RedisBackend::connect_with(url.expect("url"), variant)
                .await
                .expect("Redis")
                .with_prefix(prefix.expect("prefix")),
        )
    }
}
