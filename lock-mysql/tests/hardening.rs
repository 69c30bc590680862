//! Hostile settings and stuck neighbours on the shared MariaDB: any isolation level,
//! `autocommit` off, `sql_mode`s that change how SQL reads, a read-only session, a row lock
//! held by someone else past the deadline, tables that are not lock tables, keys that a
//! collation would fold together, and tokens kept out of every log; and the waiters of a
//! process, woken by its releases although the server sends no notifications.

mod support;

use test_servers::logs::capture;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::{ObtainRequest, ProlongRequest, ReleaseRequest, Token};
use lock_core::{
    ErrorKind, HolderInfo, Key, LockBackend, ObtainOutcome, ProlongOutcome, ReleaseOutcome, Ttl,
};
use lock_mysql::{MySqlBackend, MySqlBuilder};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::Executor;
use support::harness::MySql;
use support::{exec, shared_url};

fn ttl(ms: u64) -> Ttl {
    Ttl::from_millis(ms).unwrap()
}

async fn obtain(b: &MySqlBackend, key: &Key, token: &Token, ms: u64) -> ObtainOutcome {
    let holder = HolderInfo::current();
    b.obtain(ObtainRequest::new(key, token, ttl(ms), &holder))
        .await
        .unwrap()
}

/// A backend on a pool whose every connection first runs `setup` (as a role's or the
/// server's settings would), in a table dropped by `harness`.
fn on_sessions_with(harness: &MySql, setup: &'static str) -> MySqlBackend {
    let pool = MySqlPoolOptions::new()
        .max_connections(4)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                conn.execute(setup).await?;
                Ok(())
            })
        })
        .connect_lazy(&shared_url())
        .unwrap();
    MySqlBackend::builder_on(pool)
        .table(&harness.fresh_table())
        .build()
        .unwrap()
}

/// One lock's life, and eight tasks racing for a new key: exactly one acquires.
async fn the_contract_holds(b: &MySqlBackend, what: &str) {
    let key = Key::new(format!("k-{what}")).unwrap();
    let (a, other) = (Token::generate().unwrap(), Token::generate().unwrap());
    let first = match obtain(b, &key, &a, 30_000).await {
        ObtainOutcome::Acquired { fencing, .. } => fencing,
        o => panic!("{what}: {o:?}"),
    };
    assert!(
        matches!(
            obtain(b, &key, &other, 30_000).await,
            ObtainOutcome::Busy(_)
        ),
        "{what}"
    );
    let release = ReleaseRequest {
        key: &key,
        token: &a,
        delay_after: None,
    };
    assert_eq!(
        b.release(release).await.unwrap(),
        ReleaseOutcome::Released,
        "{what}"
    );
    match obtain(b, &key, &other, 30_000).await {
        ObtainOutcome::Acquired { fencing, .. } => assert!(fencing > first, "{what}"),
        o => panic!("{what}: {o:?}"),
    }
    let race = Key::new(format!("race-{what}")).unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (b, race) = (b.clone(), race.clone());
            tokio::spawn(async move {
                let token = Token::generate().unwrap();
                obtain(&b, &race, &token, 30_000).await
            })
        })
        .collect();
    let mut acquired = 0;
    for t in tasks {
        if matches!(t.await.unwrap(), ObtainOutcome::Acquired { .. }) {
            acquired += 1;
        }
    }
    assert_eq!(acquired, 1, "{what}: one of eight racers acquires");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_do_not_depend_on_isolation_autocommit_or_sql_mode() {
    let harness = MySql::new();
    for setup in [
        "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
        "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET SESSION autocommit = 0",
        "SET SESSION sql_mode = 'ANSI,NO_BACKSLASH_ESCAPES,PAD_CHAR_TO_FULL_LENGTH'",
        "SET SESSION sql_mode = 'ORACLE'",
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '-11:00'",
    ] {
        let b = on_sessions_with(&harness, setup);
        the_contract_holds(&b, setup.rsplit(' ').next().unwrap_or(setup)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_session_is_a_retry_safe_error_naming_the_primary() {
    let harness = MySql::new();
    let b = on_sessions_with(&harness, "SET SESSION tx_read_only = 1");
    // The table made by a writable backend first: DDL is no transaction.
    MySqlBackend::builder(shared_url())
        .table(b.table())
        .build()
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let holder = HolderInfo::current();
    let (key, token) = (Key::new("k").unwrap(), Token::generate().unwrap());
    let err = b
        .obtain(ObtainRequest::new(&key, &token, ttl(30_000), &holder))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("primary"), "{err}");
}

/// A row lock held by a stuck transaction: the call gives up by its deadline with a
/// retry-safe error, and its statement leaves the server by then too (the server's copy of
/// the deadline), rather than wait on after the client has gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_queued_behind_a_stuck_row_lock_gives_up_in_time() {
    let harness = MySql::new();
    let url = shared_url();
    let table = harness.fresh_table();
    let b = MySqlBackend::builder(url.clone())
        .table(&table)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let key = Key::new("stuck").unwrap();
    let token = Token::generate().unwrap();
    assert!(matches!(
        obtain(&b, &key, &token, 30_000).await,
        ObtainOutcome::Acquired { .. }
    ));
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    let mut stuck = pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT fencing FROM `{table}` WHERE `key` = 'stuck' FOR UPDATE"
    ))
    .fetch_one(&mut *stuck)
    .await
    .unwrap();
    for (what, call) in [
        ("obtain", 0),
        ("prolong", 1),
        ("release", 2),
        ("inspect", 3),
    ] {
        let started = Instant::now();
        let result = match call {
            0 => obtain_err(&b, &key).await,
            1 => b
                .prolongate(ProlongRequest {
                    key: &key,
                    token: &token,
                    ttl: ttl(30_000),
                })
                .await
                .map(|_| ()),
            2 => b
                .release(ReleaseRequest {
                    key: &key,
                    token: &token,
                    delay_after: None,
                })
                .await
                .map(|_| ()),
            _ => b.inspect(&key).await.map(|_| ()),
        };
        let err = result.unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{what}: {err}");
        assert!(err.to_string().contains("safe to retry"), "{what}: {err}");
        assert!(took < Duration::from_secs(3), "{what} took {took:?}");
    }
    // The server gave up on the queued statements too (innodb_lock_wait_timeout = 1 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting = exec(
            &url,
            &format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE INFO LIKE '%{table}%FOR UPDATE%' AND ID <> CONNECTION_ID()"
            ),
        )
        .await;
        if waiting[0][0].as_deref() == Some("0") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "statements still wait on the server"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stuck.rollback().await.unwrap();
    // And the lock is still the holder's.
    let p = ProlongRequest {
        key: &key,
        token: &token,
        ttl: ttl(30_000),
    };
    assert_eq!(b.prolongate(p).await.unwrap(), ProlongOutcome::Prolonged);
}

async fn obtain_err(b: &MySqlBackend, key: &Key) -> lock_core::Result<()> {
    let holder = HolderInfo::current();
    let token = Token::generate().unwrap();
    b.obtain(ObtainRequest::new(key, &token, ttl(30_000), &holder))
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_that_are_not_lock_tables_say_what_to_do() {
    let harness = MySql::new();
    let url = shared_url();
    let key = Key::new("k").unwrap();
    let token = Token::generate().unwrap();
    let holder = HolderInfo::current();

    let missing = MySqlBackend::builder(url.clone())
        .table(&harness.fresh_table())
        .auto_migrate(false)
        .build()
        .unwrap();
    let err = missing
        .obtain(ObtainRequest::new(&key, &token, ttl(1000), &holder))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("migrate()"), "{err}");

    let other = harness.fresh_table();
    exec(
        &url,
        &format!("CREATE TABLE `{other}` (`key` INT PRIMARY KEY, state TEXT)"),
    )
    .await;
    // A lock table's columns, but without transactions or row locks (and a shorter key:
    // MyISAM's keys end at 1000 bytes).
    let myisam = harness.fresh_table();
    exec(
        &url,
        &format!(
            "CREATE TABLE `{myisam}` (`key` VARBINARY(250) PRIMARY KEY, state VARBINARY(8), \
             token VARBINARY(64), holder BLOB, fencing BIGINT, holds BIGINT, expires_us BIGINT, \
             forget_us BIGINT, shares LONGBLOB, writer BLOB) ENGINE = MyISAM"
        ),
    )
    .await;
    for (table, says) in [
        (other, "is not a lock table: column key is int"),
        (myisam, "its engine is MyISAM"),
    ] {
        let b = MySqlBackend::builder(url.clone())
            .table(&table)
            .build()
            .unwrap();
        let err = b
            .obtain(ObtainRequest::new(&key, &token, ttl(1000), &holder))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(err.to_string().contains(says), "{err}");
    }
}

/// Keys are bytes: no collation folds `A` into `a`, or `x ` into `x`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_a_collation_would_fold_are_different_locks() {
    let harness = MySql::new();
    let b = MySqlBackend::builder(shared_url())
        .table(&harness.fresh_table())
        .build()
        .unwrap();
    for keys in [["A", "a"], ["x", "x "], ["é", "e"], ["ß", "ss"]] {
        for k in keys {
            let token = Token::generate().unwrap();
            let key = Key::new(k).unwrap();
            assert!(
                matches!(
                    obtain(&b, &key, &token, 30_000).await,
                    ObtainOutcome::Acquired { .. }
                ),
                "{keys:?}: {k:?} is a lock of its own"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_without_a_database_says_so() {
    let url = shared_url();
    let (base, _) = url.rsplit_once('/').unwrap();
    let b = MySqlBuilder::from_url(&format!("{base}/?timeout=2s"))
        .unwrap()
        .build()
        .unwrap();
    let key = Key::new("k").unwrap();
    let err = b.inspect(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("database"), "{err}");
}

/// Neither the client's logs (sqlx at every level, its slow statement warning) nor the
/// server's general query log ever see an owner token, in the clear or hex-encoded.
#[test]
fn owner_tokens_never_reach_a_log() {
    let token = Token::generate().unwrap();
    let server = support::PrivateMariaDb::start(support::Flush::EveryCommit);
    server.cli("SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1");
    let ((), log) = capture(async {
        let b = MySqlBackend::builder(server.url.clone())
            .table("locks")
            .build()
            .unwrap();
        let key = Key::new("k").unwrap();
        assert!(matches!(
            obtain(&b, &key, &token, 30_000).await,
            ObtainOutcome::Acquired { .. }
        ));
        let p = ProlongRequest {
            key: &key,
            token: &token,
            ttl: ttl(30_000),
        };
        assert_eq!(b.prolongate(p).await.unwrap(), ProlongOutcome::Prolonged);
        assert_eq!(
            b.prolongate_many(&[p]).await.pop().unwrap().unwrap(),
            ProlongOutcome::Prolonged
        );
        let r = ReleaseRequest {
            key: &key,
            token: &token,
            delay_after: None,
        };
        assert_eq!(b.release(r).await.unwrap(), ReleaseOutcome::Released);
    });
    let general = server.cli("SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log");
    assert!(log.contains("FOR UPDATE"), "statements were logged: {log}");
    assert!(
        general.contains("FOR UPDATE"),
        "the server logged: {general}"
    );
    let hex = token.to_hex();
    let hex_of_hex: String = hex.bytes().map(|b| format!("{b:02x}")).collect();
    for (name, text) in [("tracing", &log), ("the general log", &general)] {
        assert!(!text.contains(&hex), "the token reached {name}");
        assert!(
            !text.contains(&hex_of_hex),
            "the token reached {name}, hex-encoded"
        );
    }
}

/// A user with only `SELECT, INSERT, UPDATE, DELETE` on a table an admin migrated locks
/// with `migrate=false`; with the default it would try to create the table, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_user_uses_a_table_migrated_by_an_admin() {
    let harness = MySql::new();
    let url = shared_url();
    let table = harness.fresh_table();
    MySqlBackend::builder(url.clone())
        .table(&table)
        .build()
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let user = format!("lp_{}", &Token::generate().unwrap().to_hex()[..12]);
    exec(
        &url,
        &format!(
            "CREATE USER '{user}'@'%'; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON `{table}` TO '{user}'@'%'"
        ),
    )
    .await;
    let as_user = test_servers::as_user(&url, &user);
    let b = MySqlBuilder::from_url(&format!("{as_user}?table={table}&migrate=false"))
        .unwrap()
        .build()
        .unwrap();
    let (key, token) = (Key::new("k").unwrap(), Token::generate().unwrap());
    assert!(matches!(
        obtain(&b, &key, &token, 30_000).await,
        ObtainOutcome::Acquired { .. }
    ));
    assert!(
        !b.uses_procedure(),
        "no EXECUTE on the procedure: the client decides"
    );
    b.sweep().await.unwrap();
    let release = ReleaseRequest {
        key: &key,
        token: &token,
        delay_after: None,
    };
    assert_eq!(b.release(release).await.unwrap(), ReleaseOutcome::Released);
    // With EXECUTE granted, the procedure runs on the user's own rights on the table.
    exec(
        &url,
        &format!("GRANT EXECUTE ON PROCEDURE `{table}_op_v2` TO '{user}'@'%'"),
    )
    .await;
    let granted = MySqlBuilder::from_url(&format!("{as_user}?table={table}&migrate=false"))
        .unwrap()
        .build()
        .unwrap();
    assert!(matches!(
        obtain(&granted, &key, &token, 30_000).await,
        ObtainOutcome::Acquired { .. }
    ));
    assert_eq!(
        granted.release(release).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert!(granted.uses_procedure());
    let creating = MySqlBackend::builder(as_user)
        .table(&harness.fresh_table())
        .build()
        .unwrap();
    let err = creating.inspect(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    assert!(err.to_string().contains("migrate()"), "{err}");
    exec(&url, &format!("DROP USER '{user}'@'%'")).await;
}

/// A wrong password is `PermissionDenied` saying what to check, and the password shows in
/// neither the error, its `Debug`, nor the builder's or the backend's `Debug`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_permission_denied_and_never_shown() {
    let url = test_servers::as_user(&shared_url(), "root:n0t-the-pw-4729");
    let builder = MySqlBuilder::from_url(&format!("{url}?timeout=3s")).unwrap();
    let shown_builder = format!("{builder:?}");
    let b = builder.build().unwrap();
    let err = b.inspect(&Key::new("k").unwrap()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    assert!(err.to_string().contains("password"), "{err}");
    for shown in [
        err.to_string(),
        format!("{err:?}"),
        shown_builder,
        format!("{b:?}"),
    ] {
        assert!(!shown.contains("n0t-the-pw-4729"), "{shown}");
    }
}

/// Issue #36, item 13: a server that refuses the connection was reported as "no answer
/// within the deadline of 5s (... timeout=)" after the whole deadline, sending the reader
/// to the timeout setting. Now the refusal is said, with the address, long before it.
#[tokio::test]
async fn a_refused_connection_is_said_as_such_and_early() {
    let port = test_servers::locks::closed_port();
    let backend = MySqlBackend::builder(format!("mysql://root@127.0.0.1:{port}/test"))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    test_servers::locks::refused_early(&backend, port).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_next_waiter_of_the_process() {
    // The server sends no notifications, but a release of this backend wakes its own
    // waiters: two waiters get the lock in turn long before their 20 s fallback poll.
    let harness = MySql::new();
    let backend = Arc::new(
        MySqlBackend::builder(shared_url())
            .table(&harness.fresh_table())
            .build()
            .unwrap(),
    );
    test_servers::locks::releases_wake_the_waiters_of_the_process_in_turn(backend).await;
}

/// A procedure dropped under a running backend (or never made: `migrate=false` on a table
/// an older version made) costs a round trip, never an operation: the call that finds it
/// missing is decided in the client, and so is every later one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_procedure_leaves_every_operation_working() {
    let harness = MySql::new();
    let url = shared_url();
    let table = harness.fresh_table();
    let b = MySqlBackend::builder(url.clone())
        .table(&table)
        .build()
        .unwrap();
    let (key, a, other) = (
        Key::new("k").unwrap(),
        Token::generate().unwrap(),
        Token::generate().unwrap(),
    );
    let first = match obtain(&b, &key, &a, 30_000).await {
        ObtainOutcome::Acquired { fencing, .. } => fencing,
        o => panic!("{o:?}"),
    };
    assert!(b.uses_procedure());
    exec(&url, &format!("DROP PROCEDURE `{table}_op_v2`")).await;
    let prolong = ProlongRequest {
        key: &key,
        token: &a,
        ttl: ttl(30_000),
    };
    assert_eq!(
        b.prolongate(prolong).await.unwrap(),
        ProlongOutcome::Prolonged
    );
    assert!(!b.uses_procedure());
    assert!(matches!(
        obtain(&b, &key, &other, 30_000).await,
        ObtainOutcome::Busy(_)
    ));
    let release = ReleaseRequest {
        key: &key,
        token: &a,
        delay_after: None,
    };
    assert_eq!(b.release(release).await.unwrap(), ReleaseOutcome::Released);
    match obtain(&b, &key, &other, 30_000).await {
        ObtainOutcome::Acquired { fencing, .. } => assert!(fencing > first),
        o => panic!("{o:?}"),
    }
    // migrate() makes it again, and the backend goes back to it.
    b.migrate().await.unwrap();
    assert!(b.uses_procedure());
    assert!(matches!(
        obtain(&b, &key, &a, 30_000).await,
        ObtainOutcome::Busy(_)
    ));
    assert!(b.uses_procedure());
}

/// The clock is read after the row lock is granted, never before: a call that queued
/// behind another transaction past the hold's expiry sees the hold expired. (Read before
/// the wait, the obtain below would find the hold live and answer `Busy`.) Both ways the
/// backend decides: the procedure, and the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_for_the_row_reads_the_clock_after_the_wait() {
    let harness = MySql::new();
    let url = shared_url();
    for procedure in [true, false] {
        let table = harness.fresh_table();
        let mut builder = MySqlBackend::builder(url.clone()).table(&table);
        if !procedure {
            builder = builder.decide_in_client();
        }
        let b = builder.build().unwrap();
        let key = Key::new("queued").unwrap();
        let (holder, next) = (Token::generate().unwrap(), Token::generate().unwrap());
        assert!(matches!(
            obtain(&b, &key, &holder, 600).await,
            ObtainOutcome::Acquired { .. }
        ));
        let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
        let mut stuck = pool.begin().await.unwrap();
        sqlx::query(&format!(
            "SELECT fencing FROM `{table}` WHERE `key` = 'queued' FOR UPDATE"
        ))
        .fetch_one(&mut *stuck)
        .await
        .unwrap();
        let queued = {
            let (b, key) = (b.clone(), key.clone());
            tokio::spawn(async move { obtain(&b, &key, &next, 30_000).await })
        };
        // The obtain is sent while the hold is live, and waits for the row past its end.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        stuck.rollback().await.unwrap();
        let outcome = queued.await.unwrap();
        assert!(
            matches!(outcome, ObtainOutcome::Acquired { .. }),
            "procedure {procedure}: {outcome:?}"
        );
        assert_eq!(b.uses_procedure(), procedure);
    }
}
