//! Faults on a private Redis server, for both variants: restart with data loss, SCRIPT
//! FLUSH, killed connections, a paused server, a wrong password, a key of the wrong type,
//! scripting forbidden by ACL; and what only a real server shows: WATCH transactions under
//! concurrency, the two variants excluding each other, waiters woken by pub/sub.

mod support;

use test_servers::locks::{prolong_when_back, queue_behind, take, until_ok, Counting};

use std::sync::Arc;
use std::time::Duration;

use lock_core::Retry;
use lock_core::{
    Attempt, ErrorKind, Fencing, Key, LockBackend, Locker, ProlongOutcome, ReleaseOutcome,
};
use lock_redis::{RedisBackend, Variant};
use support::PrivateRedis;

const BOTH: [Variant; 2] = [Variant::Lua, Variant::Watch];

async fn backend(url: &str, variant: Variant) -> RedisBackend {
    RedisBackend::connect_with(url, variant).await.unwrap()
}

async fn locker(url: &str) -> Locker {
    Locker::new(Arc::new(backend(url, Variant::Lua).await))
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
    let p = prolong_when_back(&guard).await;
    assert_eq!(
        p,
        ProlongOutcome::Lost,
        "a restart that lost the record must answer Lost"
    );
    assert!(guard.is_lost());
    let after: Fencing = until_ok(
        "the call after the fault",
        Duration::from_secs(30),
        async || match locker.lock("job").try_obtain().await? {
            Attempt::Obtained(g) => Ok(g.fencing()),
            Attempt::Busy(b) => panic!("busy after data loss: {b}"),
        },
    )
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

/// `SCRIPT FLUSH` on the server at `url`: it forgets every loaded script.
async fn script_flush(url: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_transparent() {
    let server = PrivateRedis::start();
    let locker = locker(&server.url).await;
    let guard = take(&locker, "job").await;
    script_flush(&server.url).await;
    assert_eq!(
        guard.prolongate(Duration::from_secs(30)).await.unwrap(),
        ProlongOutcome::Prolonged
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A renewal batch after `SCRIPT FLUSH`: the pipeline loads the script before its first
/// `EVALSHA`, so no lock of the batch meets `NOSCRIPT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_batch_after_script_flush_still_prolongs_every_lock() {
    let server = PrivateRedis::start();
    let backend = backend(&server.url, Variant::Lua).await;
    let token = lock_core::backend::Token::generate().unwrap();
    let holder = lock_core::HolderInfo::current();
    let ttl = lock_core::Ttl::new(Duration::from_secs(30)).unwrap();
    let keys: Vec<Key> = (0..3)
        .map(|i| Key::new(format!("batch{i}")).unwrap())
        .collect();
    for key in &keys {
        let req = lock_core::backend::ObtainRequest::new(key, &token, ttl, &holder);
        assert!(matches!(
            backend.obtain(req).await.unwrap(),
            lock_core::ObtainOutcome::Acquired { .. }
        ));
    }
    script_flush(&server.url).await;
    let reqs: Vec<_> = keys
        .iter()
        .map(|key| lock_core::backend::ProlongRequest {
            key,
            token: &token,
            ttl,
        })
        .collect();
    let answers = backend.prolongate_many(&reqs).await;
    assert_eq!(answers.len(), 3);
    for answer in answers {
        assert_eq!(answer.unwrap(), ProlongOutcome::Prolonged);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_reconnect_and_keep_the_lock() {
    let server = PrivateRedis::start();
    for variant in BOTH {
        let backend = backend(&server.url, variant).await;
        let locker = Locker::new(Arc::new(backend.clone()));
        let guard = take(&locker, "job").await;
        let ids = backend.client_ids().await.unwrap();
        assert!(!ids.is_empty(), "{variant:?} has a connection to kill");
        support::kill_clients(&server.url, &backend).await;
        let p = prolong_when_back(&guard).await;
        assert_eq!(p, ProlongOutcome::Prolonged, "{variant:?}");
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
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
    for variant in BOTH {
        let err = RedisBackend::connect_with(&url, variant).await.unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::PermissionDenied,
            "{variant:?}: {err}"
        );
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(
                !shown.contains("s3cret-battery"),
                "password leaked: {shown}"
            );
        }
    }
    let ok = RedisBackend::connect(&format!("redis://:right-horse@127.0.0.1:{}/0", server.port))
        .await
        .unwrap();
    assert!(!format!("{ok:?}").contains("right-horse"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_the_wrong_type_is_corrupt_and_untouched() {
    for variant in BOTH {
        wrong_type(variant).await;
    }
}

async fn wrong_type(variant: Variant) {
    let server = PrivateRedis::start();
    let backend = backend(&server.url, variant).await;
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
    // A string that is not a lock record is refused too, and left as it was.
    let _: () = redis::cmd("SET")
        .arg(&rec)
        .arg("v1|held|not|a|lock")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        locker.lock("victim").try_obtain().await.unwrap_err().kind(),
        ErrorKind::Corrupt,
        "{variant:?}"
    );
    let kept: String = redis::cmd("GET")
        .arg(&rec)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(kept, "v1|held|not|a|lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_longer_than_the_ttl_hands_the_lock_over_after_resume() {
    let server = PrivateRedis::start();
    for variant in BOTH {
        let holder = Locker::new(Arc::new(
            RedisBackend::builder(&server.url)
                .variant(variant)
                .grace(Duration::from_secs(60))
                .connect()
                .await
                .unwrap(),
        ));
        let other = Locker::new(Arc::new(backend(&server.url, variant).await));
        let guard = match holder
            .lock("job")
            .ttl(Duration::from_millis(1000))
            .try_obtain()
            .await
            .unwrap()
        {
            Attempt::Obtained(g) => g,
            Attempt::Busy(b) => panic!("busy: {b}"),
        };
        server.signal("STOP");
        // Longer than the ttl: when the server wakes, its clock says the lock expired.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        server.signal("CONT");
        let next = until_ok(
            "the call after the fault",
            Duration::from_secs(30),
            async || other.lock("job").try_obtain().await,
        )
        .await;
        let Attempt::Obtained(next) = next else {
            panic!("{variant:?}: the lock outlived its ttl across the pause")
        };
        assert!(next.fencing() > guard.fencing());
        let p = prolong_when_back(&guard).await;
        assert_eq!(
            p,
            ProlongOutcome::Lost,
            "{variant:?}: the lock was taken over"
        );
        assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_transactions_on_a_small_pool_never_grant_twice() {
    // 64 tasks through one backend with 4 dedicated connections, 2 keys: connections are
    // reused constantly and transactions conflict; a WATCH shared between transactions
    // would let two of them commit a grant of the same key.
    let server = PrivateRedis::start();
    let backend: Arc<dyn LockBackend> = Arc::new(
        RedisBackend::builder(server.url.as_str())
            .variant(Variant::Watch)
            .pool_size(4)
            .connect()
            .await
            .unwrap(),
    );
    let inside: Arc<[std::sync::atomic::AtomicUsize; 2]> = Arc::default();
    let grants = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..64 {
        let (backend, inside, grants) = (backend.clone(), inside.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            let locker = Locker::new(backend);
            let k = t % 2;
            for _ in 0..10 {
                let attempt = locker
                    .lock(format!("hot-{k}"))
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(60))
                    .retry(Retry::linear(Duration::from_millis(2)))
                    .obtain()
                    .await;
                let guard = match attempt {
                    Ok(Attempt::Obtained(g)) => g,
                    Ok(Attempt::Busy(b)) => panic!("still busy after 60 s: {b}"),
                    // Losing transactions to the other 31 tasks on the key is no error:
                    // the call retries within its deadline.
                    Err(e) => panic!("{e}"),
                };
                let n = inside[k].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(n, 0, "two holders of hot-{k} at once");
                grants.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside[k].fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(grants.load(std::sync::atomic::Ordering::SeqCst) > 0);
}

/// Readers and writers busy on one key make WATCH transactions conflict over and over; a
/// release must never fail for that (lock-bench's reader-writer handoff once failed a read
/// release with "32 transactions in a row lost to concurrent writers"): the retries are
/// bounded by the call's deadline, not by a count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_calls_under_contention_end_by_their_deadline_not_a_count() {
    let server = PrivateRedis::start();
    let backend: Arc<dyn LockBackend> = Arc::new(
        RedisBackend::builder(server.url.as_str())
            .variant(Variant::Watch)
            .pool_size(48)
            // A deadline no loaded machine comes near: only a count could fail a call here.
            .timeout(Duration::from_secs(20))
            .connect()
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for t in 0..48 {
        let backend = backend.clone();
        tasks.push(tokio::spawn(async move {
            let locker = Locker::new(backend);
            for _ in 0..30 {
                let builder = if t < 2 {
                    locker.write("rw")
                } else {
                    locker.read("rw")
                };
                let guard = match builder
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(60))
                    .retry(Retry::linear(Duration::from_millis(1)))
                    .obtain()
                    .await
                {
                    Ok(Attempt::Obtained(g)) => g,
                    Ok(Attempt::Busy(b)) => panic!("still busy after 60 s: {b}"),
                    Err(e) => panic!("an obtain failed under contention: {e}"),
                };
                let released = guard.release().await;
                assert!(
                    matches!(released, Ok(ReleaseOutcome::Released)),
                    "a release under contention answered {released:?}"
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_two_variants_exclude_each_other() {
    let server = PrivateRedis::start();
    let lua = Locker::new(Arc::new(backend(&server.url, Variant::Lua).await));
    let watch = Locker::new(Arc::new(backend(&server.url, Variant::Watch).await));
    for (first, second) in [(&lua, &watch), (&watch, &lua)] {
        let held = take(first, "shared").await;
        let busy = second.lock("shared").try_obtain().await.unwrap();
        let Attempt::Busy(busy) = busy else {
            panic!("both variants granted the same lock")
        };
        assert!(busy.holder.is_some());
        let state = second
            .backend()
            .inspect(&Key::new("shared").unwrap())
            .await
            .unwrap();
        assert!(
            matches!(state, lock_core::LockState::Held { fencing, .. } if fencing == held.fencing())
        );
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
        let again = take(second, "shared").await;
        assert_eq!(again.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_long_before_its_fallback_poll() {
    let server = PrivateRedis::start();
    for variant in BOTH {
        let holder = Locker::new(Arc::new(backend(&server.url, variant).await));
        let waiter = Locker::new(Arc::new(backend(&server.url, variant).await));
        let guard = take(&holder, "handoff").await;
        // Without a notification the first retry would come after 20 s.
        let waited = queue_behind(guard, 1, Duration::ZERO, move || waiter.clone()).await;
        assert!(
            waited < Duration::from_secs(10),
            "{variant:?}: the waiter slept {waited:?}, the notification did not wake it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_scripting_forbidden_the_watch_variant_still_locks() {
    let server = PrivateRedis::start();
    let mut admin = support::admin(&server.url).await;
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "noscript",
                "on",
                ">pw",
                "~*",
                "&*",
                "+@all",
                "-@scripting",
            ][..],
        )
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://noscript:pw@127.0.0.1:{}/0", server.port);
    let lua = Locker::new(Arc::new(backend(&url, Variant::Lua).await));
    let err = lua.lock("job").try_obtain().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    let watch = Locker::new(Arc::new(backend(&url, Variant::Watch).await));
    let guard = take(&watch, "job").await;
    assert!(watch.lock("job").try_obtain().await.unwrap().is_busy());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_urls_lock_over_tls_and_verify_the_certificate() {
    let server = PrivateRedis::start_tls();
    // The certificate is self-signed: verification must refuse it...
    let started = std::time::Instant::now();
    let err = RedisBackend::connect(&server.url).await.unwrap_err();
    eprintln!("refused after {:?}: {err}", started.elapsed());
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("#insecure"), "{err}");
    // ...unless the URL says `#insecure`, as a test setup may.
    let insecure = format!("{}#insecure", server.url);
    for variant in BOTH {
        let locker = Locker::new(Arc::new(backend(&insecure, variant).await));
        let guard = take(&locker, "job").await;
        assert!(locker.lock("job").try_obtain().await.unwrap().is_busy());
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_pool_full_of_killed_connections_costs_no_failed_call() {
    let server = PrivateRedis::start();
    let backend = backend(&server.url, Variant::Watch).await;
    let locker = Locker::new(Arc::new(backend.clone()));
    // Operations at once leave several idle connections in the pool.
    let (a, b, c, d) = tokio::join!(
        take(&locker, "job-a"),
        take(&locker, "job-b"),
        take(&locker, "job-c"),
        take(&locker, "job-d")
    );
    let guards = [a, b, c, d];
    assert!(
        backend.client_ids().await.unwrap().len() > 1,
        "several idle connections"
    );
    support::kill_clients(&server.url, &backend).await;
    for g in &guards {
        assert_eq!(
            g.prolongate(Duration::from_secs(30)).await.unwrap(),
            ProlongOutcome::Prolonged,
            "a dead idle connection must not fail the call"
        );
    }
    for g in guards {
        assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_wakes_one_waiter_per_release() {
    // Eight waiters of one process on one key, a 20 s fallback poll: each release wakes one
    // of them, so each acquisition costs one attempt after the two every waiter makes
    // before it waits (the first, and the one right after subscribing): 8 x 2 + 8 = 24.
    // Waking every waiter on every release would cost 16 + 8 + 7 + ... + 1 = 52.
    let server = PrivateRedis::start();
    for variant in BOTH {
        let counting = Arc::new(Counting::new(Arc::new(backend(&server.url, variant).await)));
        let holder = Locker::new(Arc::new(backend(&server.url, variant).await));
        let guard = take(&holder, "herd").await;
        let took = queue_behind(guard, 8, Duration::from_millis(20), || {
            Locker::new(counting.clone())
        })
        .await;
        let attempts = counting.obtains();
        assert!(
            took < Duration::from_secs(10),
            "{variant:?}: the handoffs took {took:?}: a release reached no waiter"
        );
        assert!(
            attempts <= 28,
            "{variant:?}: {attempts} attempts for 8 acquisitions: releases wake more than one waiter"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_server_that_never_answers_gives_up_at_the_deadline() {
    let (proxy, url) = test_servers::proxy::in_front_of(&support::shared_url());
    proxy.freeze();
    let started = std::time::Instant::now();
    let (lua, watch) = tokio::join!(
        RedisBackend::connect_with(&url, Variant::Lua),
        RedisBackend::connect_with(&url, Variant::Watch)
    );
    let took = started.elapsed();
    for (variant, result) in [("lua", lua.err()), ("watch", watch.err())] {
        let err = result.unwrap_or_else(|| panic!("{variant}: connected through a frozen link"));
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{variant}: {err}");
    }
    assert!(
        took < RedisBackend::CONNECT_TIMEOUT + Duration::from_secs(3),
        "took {took:?}"
    );
}

/// A call that is not idempotent must never be re-sent behind the caller's back: the
/// cluster client re-sent a release whose reply was cut off after the server applied it,
/// and a lock held twice was freed (while its other guard still held it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_off_after_it_was_applied_is_never_sent_again_on_a_cluster() {
    use lock_conformance::Harness;
    use lock_core::backend::{ObtainRequest, ReleaseRequest, Token};
    use lock_core::{HolderInfo, LockState, Ttl};
    for variant in BOTH {
        let faulty = support::harness::Redis::cluster(variant)
            .behind_faults()
            .await
            .expect("the cluster behind proxies");
        let key = Key::new("held-twice").unwrap();
        let token = Token::generate().unwrap();
        let holder = HolderInfo::current();
        let obtain = ObtainRequest::new(
            &key,
            &token,
            Ttl::new(Duration::from_secs(30)).unwrap(),
            &holder,
        );
        for _ in 0..2 {
            let got = faulty.backend.obtain(obtain).await.unwrap();
            assert!(!matches!(got, lock_core::ObtainOutcome::Busy(_)), "{got:?}");
        }
        // The release reaches the server; its reply waits in the proxy, and the
        // connection is cut under it.
        faulty.faults.delay_replies(Duration::from_millis(400));
        let backend = Arc::clone(&faulty.backend);
        let release = tokio::spawn(async move {
            let req = ReleaseRequest {
                key: &key,
                token: &token,
                delay_after: None,
            };
            backend.release(req).await
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        faulty.faults.cut();
        faulty.faults.heal();
        let answer = release.await.unwrap();
        let key = Key::new("held-twice").unwrap();
        let state = faulty.direct.inspect(&key).await.unwrap();
        assert!(
            matches!(state, LockState::Held { holds: 1, .. }),
            "{variant:?}: one release, one hold less; the answer was {answer:?}, the state \
             is {state:?}"
        );
        assert!(
            !matches!(answer, Ok(ReleaseOutcome::Released)),
            "{variant:?}: answered Released while a hold remains"
        );
    }
}

/// The number of pub/sub connections the server at `url` has.
async fn pubsub_clients(url: &str) -> usize {
    let mut admin = support::admin(url).await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_backend_closes_its_pubsub_connection() {
    let server = PrivateRedis::start();
    let key = Key::new("subscribed").unwrap();
    for _ in 0..10 {
        let backend = backend(&server.url, Variant::Lua).await;
        let subscription = backend.subscribe(&key).await.unwrap();
        assert!(subscription.is_some(), "the Lua variant notifies");
        drop(subscription);
        drop(backend);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let open = pubsub_clients(&server.url).await;
        if open == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{open} pub/sub connections outlived their backends"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_already_waiting_hear_releases_after_the_pubsub_connection_drops() {
    let server = PrivateRedis::start();
    let locker = locker(&server.url).await;
    let holder = take(&locker, "handed-over").await;
    // A fallback poll far longer than the test: only a notification hands the lock over.
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let got = locker
                .lock("handed-over")
                .retry(Retry::linear(Duration::from_secs(60)).notified())
                .wait(Duration::from_secs(120))
                .obtain()
                .await
                .unwrap();
            (got.obtained().is_some(), std::time::Instant::now())
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pubsub_clients(&server.url).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut admin = support::admin(&server.url).await;
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    // Time to subscribe again (the first try comes 50 ms after the drop).
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let released_at = std::time::Instant::now();
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    let (got, at) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter was never woken: deaf after its pub/sub connection dropped")
        .unwrap();
    assert!(got);
    let waited = at.duration_since(released_at);
    assert!(
        waited < Duration::from_secs(5),
        "handed over {waited:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_release_that_lets_nobody_in_wakes_nobody() {
    let server = PrivateRedis::start();
    for variant in BOTH {
        let backend = backend(&server.url, variant).await;
        test_servers::locks::a_shared_release_that_lets_nobody_in_wakes_nobody(&backend).await;
    }
}
