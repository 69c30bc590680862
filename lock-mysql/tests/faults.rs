//! Faults only a real server shows, on private MariaDB servers: killed connections, a clean
//! restart, a crash, a restore that loses the last writes, the table dropped under a running
//! backend, a server paused past the ttl; and held locks pinning no connection.

mod support;

use test_servers::locks::{
    eventually, held, prolong_each_after_dead_connections, prolong_when_back, take, until_ok,
};

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Attempt, Key, LockState, Locker, ProlongOutcome, ReleaseOutcome};
use lock_mysql::MySqlBackend;
use support::{Flush, PrivateMariaDb};

fn locker(url: &str) -> (MySqlBackend, Locker) {
    let backend = MySqlBackend::lazy(url).unwrap();
    (backend.clone(), Locker::new(Arc::new(backend)))
}

/// Kills every connection that came over TCP (the backend's; the test's own client uses
/// the socket).
fn kill_tcp_connections(server: &PrivateMariaDb) -> usize {
    let ids = server.cli("SELECT ID FROM information_schema.PROCESSLIST WHERE HOST LIKE '%:%'");
    let ids: Vec<&str> = ids.split_whitespace().collect();
    for id in &ids {
        // A connection may end by itself meanwhile.
        let _ = std::process::Command::new("mariadb")
            .arg(format!("--socket={}", server.dir().join("sock").display()))
            .args(["-uroot", "-e", &format!("KILL CONNECTION {id}")])
            .status();
    }
    ids.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_are_replaced_and_the_lock_stays() {
    let server = PrivateMariaDb::start(Flush::EveryCommit);
    let (backend, locker) = locker(&server.url);
    let (a, b, c, d) = tokio::join!(
        take(&locker, "job-a"),
        take(&locker, "job-b"),
        take(&locker, "job-c"),
        take(&locker, "job-d")
    );
    eventually(
        "an idle connection to kill",
        Duration::from_secs(10),
        || async { backend.pool().num_idle() > 0 },
    )
    .await;
    assert!(kill_tcp_connections(&server) > 0);
    prolong_each_after_dead_connections(vec![a, b, c, d]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_and_a_crash_keep_every_committed_hold() {
    let mut server = PrivateMariaDb::start(Flush::EveryCommit);
    let (_, locker) = locker(&server.url);
    let guard = take(&locker, "job").await;
    for crash in [false, true] {
        if crash {
            server.crash();
        } else {
            server.stop();
        }
        server.start_again();
        let p = prolong_when_back(&guard).await;
        assert_eq!(p, ProlongOutcome::Prolonged, "crash: {crash}");
        let other = until_ok(
            "the call after the fault",
            Duration::from_secs(30),
            async || locker.lock("job").try_obtain().await,
        )
        .await;
        assert!(other.is_busy(), "crash: {crash}");
    }
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A restore from a backup taken before the lock was obtained forgets it: its holder hears
/// `Lost`, and the next holder's fencing token is still greater (the server's clock floors
/// it), while a lock obtained before the backup is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_that_loses_the_last_writes_answers_lost_and_fencing_grows() {
    let mut server = PrivateMariaDb::start(Flush::EveryCommit);
    let (_, locker) = locker(&server.url);
    let kept = held(locker.lock("kept").ttl(Duration::from_secs(600))).await;
    server.snapshot();
    let _ = prolong_when_back(&kept).await;
    let forgotten = take(&locker, "job").await;
    let before = forgotten.fencing();
    server.restore();
    let p = prolong_when_back(&forgotten).await;
    assert_eq!(p, ProlongOutcome::Lost, "the acquisition was forgotten");
    assert_eq!(
        kept.prolongate(Duration::from_secs(30)).await.unwrap(),
        ProlongOutcome::Prolonged
    );
    let next = take(&locker, "job").await;
    assert!(next.fencing() > before, "{} after {before}", next.fencing());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_table_is_made_again_holders_hear_lost_and_fencing_grows() {
    let server = PrivateMariaDb::start(Flush::EveryCommit);
    let (_, locker) = locker(&server.url);
    let guard = take(&locker, "job").await;
    let before = guard.fencing();
    server.cli("DROP TABLE test.distlock");
    let p = guard.prolongate(Duration::from_secs(30)).await.unwrap();
    assert_eq!(p, ProlongOutcome::Lost);
    let next = take(&locker, "job").await;
    assert!(next.fencing() > before, "{} after {before}", next.fencing());
    assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A server frozen (SIGSTOP) past the ttl: the holder's watchdog cannot renew, and the lost
/// signal fires by the end of the validity it last heard of, not when the server comes
/// back. After it does, another holder gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_ttl_fires_lost_in_time() {
    let server = PrivateMariaDb::start(Flush::EveryCommit);
    let backend = MySqlBackend::builder(server.url.clone())
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let locker = Locker::new(Arc::new(backend));
    // The first call connects and creates the table: on a loaded machine that may take
    // longer than the short deadline under test, so it may be tried again.
    // (A grant whose answer came too late holds the key for its ttl: Busy is tried again.)
    let guard = until_ok(
        "the first obtain",
        Duration::from_secs(60),
        async || match locker
            .lock("job")
            .ttl(Duration::from_secs(3))
            .watchdog()
            .try_obtain()
            .await?
        {
            Attempt::Obtained(guard) => Ok(guard),
            Attempt::Busy(b) => Err(lock_core::Error::new(
                lock_core::ErrorKind::Unavailable,
                "test",
                lock_core::Operation::Obtain,
                format!("busy: {b}"),
            )),
        },
    )
    .await;
    let pid = server.pid().unwrap();
    test_servers::signal(pid, "STOP");
    let valid_until = Instant::now() + guard.remaining();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the lost signal fires while the server is paused");
    let now = Instant::now();
    let late = now.saturating_duration_since(valid_until);
    eprintln!(
        "mysql: server paused: lost() fired {late:?} after the validity end it last heard of"
    );
    assert!(
        now <= valid_until + Duration::from_millis(250),
        "lost fired {late:?} after the validity end"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    test_servers::signal(pid, "CONT");
    let other = until_ok(
        "an obtain after the server is back",
        Duration::from_secs(30),
        async || locker.lock("job").try_obtain().await,
    )
    .await;
    assert!(
        !other.is_busy(),
        "the paused holder's ttl ended on the server too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_locks_pin_no_connection() {
    let server = PrivateMariaDb::start(Flush::EveryCommit);
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&server.url)
        .await
        .unwrap();
    let locker = Locker::new(Arc::new(
        MySqlBackend::builder_on(pool.clone()).build().unwrap(),
    ));
    let mut held = Vec::new();
    for i in 0..50 {
        held.push(take(&locker, &format!("job-{i}")).await);
    }
    assert!(pool.size() <= 2, "{} connections for 50 locks", pool.size());
    let key = Key::new("job-0").unwrap();
    let state = locker.backend().inspect(&key).await.unwrap();
    assert!(matches!(state, LockState::Held { .. }), "{state:?}");
    for g in held {
        assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// Many first calls at once make the table once: the others wait for that migration and
/// then go on, rather than each run it again in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_calls_migrate_once() {
    let server = PrivateMariaDb::start(Flush::EveryCommit);
    let creates = || {
        server
            .cli("SHOW GLOBAL STATUS LIKE 'Com_create_table'")
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse::<u64>().ok())
            .expect("a count")
    };
    let before = creates();
    let (_, locker) = locker(&server.url);
    let keys: Vec<String> = (0..32).map(|i| format!("job-{i}")).collect();
    let takes = keys.iter().map(|k| take(&locker, k));
    let guards = futures_util::future::join_all(takes).await;
    assert_eq!(
        creates() - before,
        1,
        "CREATE TABLE statements for 32 first calls"
    );
    for g in guards {
        assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// A watchdog batch of 200 read locks, each with three readers whose holder metadata is
/// the largest allowed (4 KiB): every row carries all three, so the batch's write is
/// megabytes. It used to go as one message, past `max_allowed_packet` (error 1153), and
/// the whole batch failed while each lock renewed fine alone; it is now written in
/// messages of at most 1 MiB, in one transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_the_largest_rows_stays_under_max_allowed_packet() {
    use lock_core::backend::{ObtainRequest, ProlongRequest, Token};
    use lock_core::{HolderInfo, LockBackend, Mode, ObtainOutcome, Ttl};

    let server = PrivateMariaDb::start(Flush::EveryCommit);
    // 2 MiB: above one message of the backend's, far below the batch's whole write.
    server.cli("SET GLOBAL max_allowed_packet = 2097152");
    let backend = MySqlBackend::lazy(&server.url).unwrap();
    let holder = HolderInfo::current()
        .with_metadata("m".repeat(4096))
        .unwrap();
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let keys: Vec<Key> = (0..200)
        .map(|i| Key::new(format!("{}-{i}", "k".repeat(1000))).unwrap())
        .collect();
    let mut tokens = Vec::new();
    for key in &keys {
        for reader in 0..3 {
            let token = Token::generate().unwrap();
            let req = ObtainRequest::new(key, &token, ttl, &holder).with_mode(Mode::READ);
            let got = backend.obtain(req).await.unwrap();
            assert!(matches!(got, ObtainOutcome::Acquired { .. }), "{got:?}");
            if reader == 0 {
                tokens.push(token);
            }
        }
    }
    let reqs: Vec<ProlongRequest<'_>> = keys
        .iter()
        .zip(&tokens)
        .map(|(key, token)| ProlongRequest { key, token, ttl })
        .collect();
    let answers = backend.prolongate_many(&reqs).await;
    let failed: Vec<String> = answers
        .iter()
        .filter_map(|a| a.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 200 renewals failed, the first: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(answers
        .iter()
        .all(|a| matches!(a, Ok(ProlongOutcome::Prolonged))));
}
