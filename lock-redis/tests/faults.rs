//! Faults on a private Redis server: restart with data loss, SCRIPT FLUSH, a killed
//! connection, a wrong password, a key of the wrong type.

mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    Attempt, ErrorKind, Fencing, Key, LockBackend, LockGuard, Locker, ProlongOutcome,
    ReleaseOutcome,
};
use lock_redis::RedisBackend;
use support::PrivateRedis;

async fn locker(url: &str) -> Locker {
    Locker::new(Arc::new(RedisBackend::connect(url).await.unwrap()))
}

async fn take(locker: &Locker, key: &str) -> LockGuard {
    match locker
        .lock(key)
        .ttl(Duration::from_secs(30))
        .try_obtain()
        .await
        .unwrap()
    {
        Attempt::Obtained(g) => g,
        Attempt::Busy(b) => panic!("{key} busy: {b}"),
    }
}

async fn until_ok<T>(mut f: impl AsyncFnMut() -> lock_core::Result<T>) -> T {
    for _ in 0..100 {
        match f().await {
            Ok(v) => return v,
            Err(e) if e.is_retry_safe() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("still failing after 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_with_data_loss_answers_lost_and_fencing_still_grows() {
    let mut server = PrivateRedis::start();
    let port = server.port;
    let locker = locker(&server.url).await;
    let guard = take(&locker, "job").await;
    let before = guard.fencing();
    server.kill();
    let restarted = KillOnDrop(restart_on(port));
    let p = until_ok(async || guard.prolongate(Duration::from_secs(30)).await).await;
    assert_eq!(
        p,
        ProlongOutcome::Lost,
        "a restart that lost the record must answer Lost"
    );
    assert!(guard.is_lost());
    let after: Fencing = until_ok(async || match locker.lock("job").try_obtain().await? {
        Attempt::Obtained(g) => Ok(g.fencing()),
        Attempt::Busy(b) => panic!("busy after data loss: {b}"),
    })
    .await;
    assert!(
        after > before,
        "fencing {after} after the restart must exceed {before}"
    );
    drop(restarted);
}

fn restart_on(port: u16) -> std::process::Child {
    std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server")
}

struct KillOnDrop(std::process::Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_transparent() {
    let server = PrivateRedis::start();
    let locker = locker(&server.url).await;
    let guard = take(&locker, "job").await;
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        guard.prolongate(Duration::from_secs(30)).await.unwrap(),
        ProlongOutcome::Prolonged
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connection_reconnects_and_keeps_the_lock() {
    let server = PrivateRedis::start();
    let backend = RedisBackend::connect(&server.url).await.unwrap();
    let locker = Locker::new(Arc::new(backend.clone()));
    let guard = take(&locker, "job").await;
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let id = backend.client_id().await.unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query_async(&mut admin)
        .await
        .unwrap();
    let p = until_ok(async || guard.prolongate(Duration::from_secs(30)).await).await;
    assert_eq!(p, ProlongOutcome::Prolonged);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_permission_denied_and_never_shown() {
    let server = PrivateRedis::start();
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("right-horse")
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://:s3cret-battery@127.0.0.1:{}/0", server.port);
    let err = RedisBackend::connect(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(
            !shown.contains("s3cret-battery"),
            "password leaked: {shown}"
        );
    }
    let ok = RedisBackend::connect(&format!("redis://:right-horse@127.0.0.1:{}/0", server.port))
        .await
        .unwrap();
    assert!(!format!("{ok:?}").contains("right-horse"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_the_wrong_type_is_corrupt_and_untouched() {
    let server = PrivateRedis::start();
    let backend = RedisBackend::connect(&server.url).await.unwrap();
    let locker = Locker::new(Arc::new(backend.clone()));
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    // Find the record name the layout gives "victim", then put a list and a foreign hash there.
    let held = take(&locker, "victim").await;
    let rec: Vec<String> = redis::cmd("KEYS")
        .arg("lock:*:rec:victim")
        .query_async(&mut admin)
        .await
        .unwrap();
    let rec = rec.first().expect("the record").clone();
    let _: i64 = redis::cmd("DEL")
        .arg(&rec)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        held.release().await.unwrap(),
        ReleaseOutcome::Lost,
        "the record was deleted"
    );
    let _: i64 = redis::cmd("RPUSH")
        .arg(&rec)
        .arg("someone else's data")
        .query_async(&mut admin)
        .await
        .unwrap();
    let err = locker.lock("victim").try_obtain().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    let inspect = backend
        .inspect(&Key::new("victim").unwrap())
        .await
        .unwrap_err();
    assert_eq!(inspect.kind(), ErrorKind::Corrupt);
    let len: i64 = redis::cmd("LLEN")
        .arg(&rec)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(len, 1, "the foreign list must be untouched");
    let _: i64 = redis::cmd("DEL")
        .arg(&rec)
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg(&rec)
        .arg("name")
        .arg("not a lock")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        locker.lock("victim").try_obtain().await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
}
