//! `lock_redis::fence`: fenced writes on one server and on a cluster.

use lock_core::{ErrorKind, Fencing};
use redis::AsyncCommands;

fn unique(what: &str) -> String {
    format!(
        "fence-test:{what}:{}",
        &lock_core::backend::Token::generate().unwrap().to_hex()[..12]
    )
}

async fn server() -> redis::aio::MultiplexedConnection {
    let url = test_servers::servers::redis::shared_url();
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("the shared Redis server")
}

/// A holder paused past its ttl writes after its successor: refused with both tokens, and
/// the successor's value stays.
#[tokio::test]
async fn a_stale_token_is_refused_and_the_value_stays() {
    let mut conn = server().await;
    let key = unique("report");
    lock_redis::fence::set(
        &mut conn,
        &key,
        "old holder",
        Fencing(1_795_765_480_421_037),
    )
    .await
    .unwrap();
    lock_redis::fence::set(
        &mut conn,
        &key,
        "new holder",
        Fencing(1_795_765_480_421_099),
    )
    .await
    .unwrap();
    lock_redis::fence::set(&mut conn, &key, "new again", Fencing(1_795_765_480_421_099))
        .await
        .unwrap();
    let e = lock_redis::fence::set(&mut conn, &key, "late", Fencing(1_795_765_480_421_037))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StaleToken);
    let tokens = e.stale_token().expect("both tokens");
    assert_eq!(tokens.highest, Fencing(1_795_765_480_421_099));
    let value: String = conn.get(&key).await.unwrap();
    assert_eq!(value, "new again");
    // Tokens compare exactly above 2^53, where Lua's numbers would not.
    let big = unique("big");
    lock_redis::fence::set(&mut conn, &big, "a", Fencing(u64::MAX))
        .await
        .unwrap();
    let e = lock_redis::fence::set(&mut conn, &big, "b", Fencing(u64::MAX - 1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StaleToken);
    let _: () = conn
        .del(&[
            key.clone(),
            lock_redis::fence::fence_key(&key).unwrap(),
            big.clone(),
            lock_redis::fence::fence_key(&big).unwrap(),
        ])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_fence_key_that_holds_no_token_is_corrupt() {
    let mut conn = server().await;
    let key = unique("corrupt");
    let fence = lock_redis::fence::fence_key(&key).unwrap();
    let _: () = conn.set(&fence, "not a token").await.unwrap();
    let e = lock_redis::fence::set(&mut conn, &key, "x", Fencing(1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let exists: bool = conn.exists(&key).await.unwrap();
    assert!(!exists, "nothing written");
    let _: () = conn.del(&fence).await.unwrap();
}

/// On a cluster, the key and its fence share a slot: keys spread over every shard work.
#[tokio::test]
async fn fenced_writes_work_on_a_cluster() {
    let url = test_servers::servers::cluster::shared_url();
    let seeds: Vec<String> = url
        .trim_start_matches("redis+cluster://")
        .trim_end_matches('/')
        .split(',')
        .map(|node| format!("redis://{node}"))
        .collect();
    let client = redis::cluster::ClusterClient::new(seeds).unwrap();
    let mut conn = client.get_async_connection().await.unwrap();
    for i in 0..20 {
        let key = format!("fence-cluster-{i}");
        lock_redis::fence::set(&mut conn, &key, "v", Fencing(10))
            .await
            .unwrap();
        let e = lock_redis::fence::set(&mut conn, &key, "w", Fencing(9))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::StaleToken, "{key}");
        let _: () = conn.del(&key).await.unwrap();
        let _: () = conn
            .del(lock_redis::fence::fence_key(&key).unwrap())
            .await
            .unwrap();
    }
}

/// A user whose ACL denies scripts: `PermissionDenied` saying to check the ACL (it was
/// `Unavailable`, which a caller retries for ever).
#[tokio::test]
async fn a_user_whose_acl_denies_the_script_is_permission_denied() {
    let mut admin = server().await;
    let user = format!(
        "fence_{}",
        &lock_core::backend::Token::generate().unwrap().to_hex()[..12]
    );
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER", &user, "on", "nopass", "~*", "-@all", "+ping", "+hello", "+auth",
            ][..],
        )
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = test_servers::servers::redis::shared_url();
    let client = redis::Client::open(test_servers::as_user(&url, &format!("{user}:x"))).unwrap();
    let outcome = match client.get_multiplexed_async_connection().await {
        Ok(mut conn) => lock_redis::fence::set(&mut conn, &unique("acl"), "v", Fencing(1)).await,
        Err(e) => panic!("the restricted user logs in: {e}"),
    };
    let _: () = redis::cmd("ACL")
        .arg(&["DELUSER", &user][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let e = outcome.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("ACL"), "{e}");
}

/// The fence suite on `lock_redis::fence::set`, on the suite's fresh key names as they are;
/// a store without transactions, so interleaved writers land one after the other.
mod suite {
    use async_trait::async_trait;
    use lock_conformance::fence::FenceHarness;
    use lock_core::{Fencing, Result};
    use redis::AsyncCommands;
    use tokio::sync::OnceCell;

    struct Redis {
        conn: OnceCell<redis::aio::MultiplexedConnection>,
    }

    impl Redis {
        async fn conn(&self) -> redis::aio::MultiplexedConnection {
            self.conn.get_or_init(super::server).await.clone()
        }
    }

    #[async_trait]
    impl FenceHarness for Redis {
        async fn write(&self, resource: &str, token: Fencing, value: &str) -> Result<()> {
            lock_redis::fence::set(&mut self.conn().await, resource, value, token).await
        }

        async fn read(&self, resource: &str) -> Result<Option<String>> {
            self.conn().await.get(resource).await.map_err(|e| {
                lock_core::Error::new(
                    lock_core::ErrorKind::Unavailable,
                    "redis fence suite",
                    lock_core::Operation::Fence,
                    e.to_string(),
                )
            })
        }
    }

    lock_conformance::fence_suite!(
        "redis fence",
        Redis {
            conn: OnceCell::new(),
        }
    );
}
