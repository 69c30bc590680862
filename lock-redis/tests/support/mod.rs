//! Test support: the servers come from the workspace's `test-servers` crate; what is
//! Redis-specific (an admin connection, killing a backend's connections) lives here.

#![allow(dead_code, unreachable_pub, unused_imports)]

pub use test_servers::redis::{shared_url, PrivateRedis};

pub mod harness;

/// A connection for test-side commands.
pub async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("Redis at {url}: {e}"))
}

/// `CLIENT KILL`s every command connection of `backend`.
pub async fn kill_clients(url: &str, backend: &lock_redis::RedisBackend) {
    let mut admin = admin(url).await;
    for id in backend.client_ids().await.unwrap() {
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query_async(&mut admin)
            .await
            .unwrap();
    }
}
