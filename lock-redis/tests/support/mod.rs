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

/// A test-side connection for any URL form: a plain server's, a cluster connection (routes
/// by key; `KEYS` to every primary), or the primary the sentinels name.
pub async fn admin_for(url: &str) -> Admin {
    if let Some(rest) = url.strip_prefix("redis+cluster://") {
        let seeds: Vec<String> = rest
            .trim_end_matches('/')
            .split(',')
            .map(|h| format!("redis://{h}/"))
            .collect();
        let client = redis::cluster::ClusterClient::new(seeds).unwrap();
        return Admin::Cluster(client.get_async_connection().await.unwrap());
    }
    if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        let (hosts, path) = rest.split_once('/').unwrap();
        let service = path.split('/').next().unwrap();
        let sentinels: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}/")).collect();
        let mut client = redis::sentinel::SentinelClient::build(
            sentinels,
            service,
            None,
            redis::sentinel::SentinelServerType::Master,
        )
        .unwrap();
        let primary = client.async_get_client().await.unwrap();
        return Admin::Plain(primary.get_multiplexed_async_connection().await.unwrap());
    }
    Admin::Plain(admin(url).await)
}

/// A test-side connection to a server or a cluster.
pub enum Admin {
    Plain(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Admin {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Admin::Plain(c) => c.req_packed_command(cmd),
            Admin::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Admin::Plain(c) => c.req_packed_commands(cmd, offset, count),
            Admin::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Admin::Plain(c) => c.get_db(),
            Admin::Cluster(c) => c.get_db(),
        }
    }
}

/// `CLIENT KILL`s every command connection of `backend`, on the node that knows it.
pub async fn kill_clients(_url: &str, backend: &lock_redis::RedisBackend) {
    for (node, id) in backend.client_ids().await.unwrap() {
        let mut admin = admin(&format!("redis://{node}/")).await;
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query_async(&mut admin)
            .await
            .unwrap();
    }
}
