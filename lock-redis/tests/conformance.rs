//! The whole conformance suite on Redis (Lua variant), multi-process cases included.

mod support;

use std::sync::{Arc, Mutex};

use lock_conformance::{async_trait, Harness};
use lock_core::{LockBackend, Token};
use lock_redis::RedisBackend;

struct Redis {
    url: String,
    made: Mutex<Vec<(String, RedisBackend)>>,
}

impl Redis {
    fn new() -> Self {
        Redis {
            url: support::shared_url(),
            made: Mutex::default(),
        }
    }

    async fn make(&self, prefix: String) -> RedisBackend {
        let backend = RedisBackend::connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("Redis at {} is needed: {e}", self.url))
            .with_prefix(prefix.clone());
        self.made.lock().unwrap().push((prefix, backend.clone()));
        backend
    }

    fn fresh_prefix() -> String {
        format!("test-{}:", Token::generate().unwrap().to_hex())
    }

    async fn admin(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }
}

#[async_trait]
impl Harness for Redis {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(self.make(Self::fresh_prefix()).await)
    }

    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        // Every key of this test's namespaces, fencing counters included, as a restart
        // without persistence would (the restart itself is in tests/faults.rs).
        let prefixes: Vec<String> = self
            .made
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect();
        let mut admin = self.admin().await;
        for prefix in prefixes {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query_async(&mut admin)
                .await
                .unwrap();
            for key in keys {
                let _: i64 = redis::cmd("DEL")
                    .arg(key)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
            }
        }
        true
    }

    async fn drop_connections(&self, _: &Arc<dyn LockBackend>) -> bool {
        let backends: Vec<RedisBackend> = self
            .made
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect();
        let mut admin = self.admin().await;
        for b in backends {
            let id = b.client_id().await.unwrap();
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
        true
    }

    async fn shared_config(&self) -> Option<String> {
        Some(format!("{} {}", self.url, Self::fresh_prefix()))
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        let (url, prefix) = config.split_once(' ').expect("url and prefix");
        Arc::new(
            RedisBackend::connect(url)
                .await
                .expect("Redis")
                .with_prefix(prefix),
        )
    }
}

lock_conformance::suite!("redis-lua", Redis::new());
