//! The backend against hostile timing and hostile settings: a statement queued behind
//! another session, the server's isolation level, a read-only server, a least-privilege
//! role, the sweep racing live operations, statement logging, and deadlines. Each case
//! failed before the fix it guards.

mod support;

use test_servers::logs::capture;

use std::str::FromStr;
use std::time::{Duration, Instant};

use lock_core::backend::{ObtainRequest, ProlongRequest, ReleaseRequest, Token};
use lock_core::{
    ErrorKind, HolderInfo, Key, LockBackend, LockState, ObtainOutcome, ProlongOutcome,
    ReleaseOutcome, Ttl,
};
use lock_postgres::{PostgresBackend, PostgresBuilder, Statements};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use support::{exec, shared_url, PASSWORD};

/// A schema of its own for one test, dropped at the end.
struct Fresh {
    url: String,
    schema: String,
    admin: PgPool,
}

impl Fresh {
    async fn new() -> Self {
        let url = shared_url();
        let schema = format!("h_{}", &Token::generate().unwrap().to_hex()[..12]);
        let admin = PgPool::connect(&url).await.expect("the shared Postgres");
        Fresh { url, schema, admin }
    }

    /// A migrated backend on `schema.locks` over `url`.
    async fn backend(&self) -> PostgresBackend {
        self.migrated(self.builder()).await
    }

    /// The settings of a backend on `schema.locks` over `url`.
    fn builder(&self) -> PostgresBuilder {
        PostgresBackend::builder(&self.url).table(&self.schema, "locks")
    }

    /// The backend `builder` makes, migrated.
    async fn migrated(&self, builder: PostgresBuilder) -> PostgresBackend {
        let b = builder.build().unwrap();
        b.migrate().await.unwrap();
        b
    }

    /// A backend on `schema.locks` whose connections start with `setting = value`.
    fn with_setting(&self, setting: &str, value: &str) -> PostgresBackend {
        self.with_setting_in(setting, value, Statements::Prepared)
    }

    /// The same, sending its statements in `form`.
    fn with_setting_in(&self, setting: &str, value: &str, form: Statements) -> PostgresBackend {
        let options = PgConnectOptions::from_str(&self.url)
            .unwrap()
            .options([(setting, value)]);
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_lazy_with(options);
        PostgresBackend::builder_on(pool)
            .table(&self.schema, "locks")
            .statements(form)
            .build()
            .unwrap()
    }

    /// The advisory lock id the backend uses for `key` (SHA-256 of "schema.table key").
    fn lock_id(&self, key: &str) -> String {
        format!(
            "('x' || encode(substring(sha256(convert_to('{}.locks {key}', 'UTF8')) FROM 1 FOR 8), 'hex'))::bit(64)::bigint",
            self.schema
        )
    }

    /// A transaction of the test's own holding `key`'s advisory lock: every statement of
    /// the backend on that key queues behind it until it ends.
    async fn hold_key(&self, key: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
        let mut tx = self.admin.begin().await.unwrap();
        sqlx::query(&format!(
            "SELECT pg_advisory_xact_lock({})",
            self.lock_id(key)
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
        tx
    }

    /// Waits until a statement of someone else queues behind `key`'s advisory lock (held by
    /// [`Fresh::hold_key`]), so a test's timing starts when the wait does, however late a
    /// loaded machine lets that statement reach the server.
    async fn wait_for_waiter(&self, key: &str) {
        let waiting = format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
             AND ((classid::bigint << 32) | objid::bigint) = {}",
            self.lock_id(key)
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let n: i64 = sqlx::query_scalar(&waiting)
                .fetch_one(&self.admin)
                .await
                .unwrap();
            if n > 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no statement queued behind the key's advisory lock within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn drop_schema(&self) {
        exec(
            &self.url,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        )
        .await;
    }
}

fn ttl(ms: u64) -> Ttl {
    Ttl::from_millis(ms).unwrap()
}

async fn obtain(b: &PostgresBackend, key: &Key, token: &Token, ms: u64) -> ObtainOutcome {
    let holder = HolderInfo::current();
    b.obtain(ObtainRequest::new(key, token, ttl(ms), &holder))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prolong_queued_past_the_expiry_is_late_not_on_time() {
    let f = Fresh::new().await;
    // A grace long enough that the late prolong can still prove the lock was its own.
    let b = f.migrated(f.builder().grace(Duration::from_secs(60))).await;
    let (key, token) = (Key::new("k").unwrap(), Token::generate().unwrap());
    assert!(matches!(
        obtain(&b, &key, &token, 300).await,
        ObtainOutcome::Acquired { .. }
    ));
    let tx = f.hold_key("k").await;
    let prolong = {
        let (b, key) = (b.clone(), key.clone());
        tokio::spawn(async move {
            b.prolongate(ProlongRequest {
                key: &key,
                token: &token,
                ttl: ttl(10_000),
            })
            .await
        })
    };
    // The prolong waits behind the transaction well past the lock's 300 ms.
    tokio::time::sleep(Duration::from_millis(800)).await;
    tx.commit().await.unwrap();
    assert_eq!(
        prolong.await.unwrap().unwrap(),
        ProlongOutcome::ProlongedLate,
        "the lock had expired by the time the prolong could act on it"
    );
    f.drop_schema().await;
}

/// The watchdog's batch statement keeps the rules of one call per lock: each lock's clock
/// is read after its own wait (a lock queued behind another session is late, not on
/// time, and the others of the batch are not held back by more than that wait), and a
/// session the role sets to SERIALIZABLE sends the batch again with READ COMMITTED pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_batch_reads_each_locks_clock_after_its_own_wait() {
    let f = Fresh::new().await;
    let b = f.migrated(f.builder().grace(Duration::from_secs(60))).await;
    let token = Token::generate().unwrap();
    let (long, short) = (Key::new("long").unwrap(), Key::new("short").unwrap());
    for (key, ms) in [(&long, 30_000), (&short, 300)] {
        assert!(matches!(
            obtain(&b, key, &token, ms).await,
            ObtainOutcome::Acquired { .. }
        ));
    }
    let tx = f.hold_key("short").await;
    let batch = {
        let (b, long, short) = (b.clone(), long.clone(), short.clone());
        tokio::spawn(async move {
            let reqs = [&long, &short].map(|key| ProlongRequest {
                key,
                token: &token,
                ttl: ttl(10_000),
            });
            b.prolongate_many(&reqs).await
        })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    tx.commit().await.unwrap();
    let answers: Vec<_> = batch
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        answers,
        [ProlongOutcome::Prolonged, ProlongOutcome::ProlongedLate],
        "the short lock had expired by the time the batch could act on it"
    );

    let serializable = f.with_setting("default_transaction_isolation", "serializable");
    let reqs = [&long, &short].map(|key| ProlongRequest {
        key,
        token: &token,
        ttl: ttl(10_000),
    });
    let answers: Vec<_> = serializable
        .prolongate_many(&reqs)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(answers, [ProlongOutcome::Prolonged; 2]);
    f.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_do_not_depend_on_the_default_isolation_level() {
    // A space in a startup option is escaped with a backslash.
    for level in ["repeatable\\ read", "serializable"] {
        let f = Fresh::new().await;
        f.backend().await;
        let b = f.with_setting("default_transaction_isolation", level);
        let key = Key::new("k").unwrap();
        let (a, other) = (Token::generate().unwrap(), Token::generate().unwrap());
        assert!(matches!(
            obtain(&b, &key, &a, 30_000).await,
            ObtainOutcome::Acquired { .. }
        ));
        // A release in progress: it holds the key's lock and has freed the row, uncommitted.
        let mut tx = f.hold_key("k").await;
        sqlx::query(&format!(
            "UPDATE {}.locks SET state = 'free', token = NULL, holder = NULL, holds = NULL, \
             expires_at = clock_timestamp(), forget_at = clock_timestamp() + interval '1 day' \
             WHERE key = 'k'",
            f.schema
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
        // An obtain queues behind it: its statement starts while the row still says held.
        let queued = {
            let (b, key) = (b.clone(), key.clone());
            tokio::spawn(async move { obtain(&b, &key, &other, 30_000).await })
        };
        f.wait_for_waiter("k").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        tx.commit().await.unwrap();
        let outcome = queued.await.unwrap();
        assert!(
            matches!(outcome, ObtainOutcome::Acquired { .. }),
            "under {level}: the lock was free when the obtain got to it, got {outcome:?}"
        );
        f.drop_schema().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_path_before_pg_catalog_cannot_replace_what_the_sql_calls() {
    // Someone who may create functions in a schema the role searches before pg_catalog
    // shadows clock_timestamp() with the year 2000 (a lock taken there would have expired
    // long ago for everyone else) and convert_from() with a constant (every key of a
    // simple-form statement would be one row, under many advisory locks).
    let f = Fresh::new().await;
    let honest = f.backend().await;
    let evil = format!("{}_evil", f.schema);
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA {evil}; \
         CREATE FUNCTION {evil}.clock_timestamp() RETURNS timestamptz \
         LANGUAGE sql AS $$ SELECT timestamptz '2000-01-01' $$; \
         CREATE FUNCTION {evil}.convert_from(bytea, name) RETURNS text \
         LANGUAGE sql AS $$ SELECT 'x' $$"
    ))
    .execute(&f.admin)
    .await
    .unwrap();
    let path = format!("{evil},pg_catalog");
    let mut failures = Vec::new();
    for form in [Statements::Prepared, Statements::Simple] {
        let shadowed = f.with_setting_in("search_path", &path, form);
        let (k1, k2) = (
            Key::new(format!("{form:?}-1")).unwrap(),
            Key::new(format!("{form:?}-2")).unwrap(),
        );
        let (a, b, c) = (
            Token::generate().unwrap(),
            Token::generate().unwrap(),
            Token::generate().unwrap(),
        );
        let first = obtain(&shadowed, &k1, &a, 30_000).await;
        let other_key = obtain(&shadowed, &k2, &b, 30_000).await;
        let same_key = obtain(&honest, &k1, &c, 30_000).await;
        if !matches!(first, ObtainOutcome::Acquired { .. })
            || !matches!(other_key, ObtainOutcome::Acquired { .. })
            || !matches!(same_key, ObtainOutcome::Busy(_))
        {
            failures.push(format!("{form:?}: {first:?}, {other_key:?}, {same_key:?}"));
        }
        // The watchdog's batch statement, too: each key its own row, each on time.
        let reqs = [(&k1, &a), (&k2, &b)].map(|(key, token)| ProlongRequest {
            key,
            token,
            ttl: ttl(30_000),
        });
        let batch: Vec<_> = shadowed
            .prolongate_many(&reqs)
            .await
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect();
        if batch != [Ok(ProlongOutcome::Prolonged), Ok(ProlongOutcome::Prolonged)] {
            failures.push(format!("{form:?} batch: {batch:?}"));
        }
    }
    sqlx::raw_sql(&format!("DROP SCHEMA {evil} CASCADE"))
        .execute(&f.admin)
        .await
        .unwrap();
    f.drop_schema().await;
    assert!(
        failures.is_empty(),
        "expected Acquired, Acquired (another key), Busy (the same key, honest clock): {failures:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_call_flushes_its_commit_whatever_synchronous_commit_the_role_has() {
    // The level a call leaves for its commit, read in the same transaction right after it.
    let f = Fresh::new().await;
    f.backend().await;
    let options = PgConnectOptions::from_str(&f.url)
        .unwrap()
        .options([("synchronous_commit", "off")]);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let mut seen = Vec::new();
    for durable in [true, false] {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query(&format!(
            "SELECT o_outcome FROM {}.locks_op_v7('inspect', 'k', 1, NULL, 0, 0, NULL, 0, 5000, $1)",
            f.schema
        ))
        .bind(durable)
        .execute(&mut *tx)
        .await
        .unwrap();
        let level: String = sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        seen.push((durable, level));
    }
    f.drop_schema().await;
    assert_eq!(
        seen,
        [(true, "local".to_owned()), (false, "off".to_owned())],
        "durable calls must flush their commit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_timeouts_of_the_role_do_not_cut_a_queued_call_short() {
    // The prepared form cannot SET statement_timeout before its statement: the function
    // answers 'settings' and the call goes again in the simple form. lock_timeout it sets
    // itself. Either way a call waits for the key up to the backend's deadline (5 s).
    for setting in ["statement_timeout", "lock_timeout"] {
        let f = Fresh::new().await;
        f.backend().await;
        let b = f.with_setting(setting, "300");
        let key = Key::new("k").unwrap();
        let tx = f.hold_key("k").await;
        let queued = {
            let (b, key) = (b.clone(), key.clone());
            let token = Token::generate().unwrap();
            tokio::spawn(async move { obtain(&b, &key, &token, 30_000).await })
        };
        f.wait_for_waiter("k").await;
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        tx.commit().await.unwrap();
        let outcome = queued.await.unwrap();
        assert!(
            matches!(outcome, ObtainOutcome::Acquired { .. }),
            "with {setting} = 300 ms: {outcome:?}"
        );
        f.drop_schema().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_leaves_rows_another_statement_is_working_on() {
    let f = Fresh::new().await;
    let b = f.migrated(f.builder().grace(Duration::ZERO)).await;
    let (key, token) = (Key::new("k").unwrap(), Token::generate().unwrap());
    assert!(matches!(
        obtain(&b, &key, &token, 5).await,
        ObtainOutcome::Acquired { .. }
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let count = || async {
        sqlx::query_scalar::<_, i64>(&format!(
            "SELECT count(*) FROM {}.locks WHERE key = 'k'",
            f.schema
        ))
        .fetch_one(&f.admin)
        .await
        .unwrap()
    };
    let tx = f.hold_key("k").await;
    assert_eq!(b.sweep().await.unwrap(), 0, "k is being worked on");
    assert_eq!(count().await, 1);
    tx.commit().await.unwrap();
    assert_eq!(b.sweep().await.unwrap(), 1);
    assert_eq!(count().await, 0);
    f.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_role_uses_a_table_migrated_by_an_admin() {
    let f = Fresh::new().await;
    f.backend().await;
    let role = format!("lp_{}", &Token::generate().unwrap().to_hex()[..12]);
    let s = &f.schema;
    exec(
        &f.url,
        &format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'; GRANT USAGE ON SCHEMA {s} TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.locks TO {role}; \
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {role}"
        ),
    )
    .await;
    let host = f.url.rsplit_once('@').unwrap().1;
    let url = format!("postgres://{role}:{PASSWORD}@{host}");
    let weak = PostgresBackend::builder(&url)
        .table(s, "locks")
        .auto_migrate(false)
        .build()
        .unwrap();
    let (key, token) = (Key::new("k").unwrap(), Token::generate().unwrap());
    assert!(matches!(
        obtain(&weak, &key, &token, 30_000).await,
        ObtainOutcome::Acquired { .. }
    ));
    let release = weak
        .release(ReleaseRequest {
            key: &key,
            token: &token,
            delay_after: None,
        })
        .await
        .unwrap();
    assert_eq!(release, ReleaseOutcome::Released);

    // A table nobody migrated: the error says what to run, and nothing was created.
    let missing = PostgresBackend::builder(&url)
        .table(s, "never_migrated")
        .auto_migrate(false)
        .build()
        .unwrap();
    let err = missing.inspect(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("migrate()"), "{err}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");

    f.drop_schema().await;
    exec(&f.url, &format!("DROP OWNED BY {role}; DROP ROLE {role}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_says_what_to_do() {
    let f = Fresh::new().await;
    f.backend().await;
    let b = f.with_setting("default_transaction_read_only", "on");
    let token = Token::generate().unwrap();
    let holder = HolderInfo::current();
    let err = b
        .obtain(ObtainRequest::new(
            &Key::new("k").unwrap(),
            &token,
            ttl(1000),
            &holder,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("read-only"), "{err}");
    assert!(err.to_string().contains("primary"), "{err}");
    f.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_queued_past_its_deadline_gives_up_in_time() {
    let f = Fresh::new().await;
    // Set up with the default deadline: on a loaded machine, connecting and migrating
    // may take longer than the short deadline under test.
    let setup = f.migrated(f.builder()).await;
    let b = f
        .builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let tx = f.hold_key("k").await;
    let started = Instant::now();
    let err = b.inspect(&Key::new("k").unwrap()).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("deadline"), "{err}");
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    tx.rollback().await.unwrap();
    // The key is usable again at once.
    assert_eq!(
        setup.inspect(&Key::new("k").unwrap()).await.unwrap(),
        LockState::Free
    );
    f.drop_schema().await;
}

/// A renewal batch queued behind other sessions, key after key, ends on the server by its
/// deadline too: each lock's wait gets what is left of the batch's deadline, not the whole
/// of it again. Here 8 keys are each held by a session that lets go 300 ms after the one
/// before: with a full 400 ms per key, the statement would stay on the server (holding
/// the advisory locks it took) for 2.4 s, long after its client gave up at 400 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_batch_queued_key_after_key_ends_on_the_server_by_its_deadline() {
    let f = Fresh::new().await;
    // Set up with the default deadline (see above); only the batch runs on the short one.
    let setup = f.migrated(f.builder()).await;
    let b = f
        .builder()
        .timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let token = Token::generate().unwrap();
    let keys: Vec<Key> = (0..8).map(|i| Key::new(format!("q{i}")).unwrap()).collect();
    for key in &keys {
        assert!(matches!(
            obtain(&setup, key, &token, 30_000).await,
            ObtainOutcome::Acquired { .. }
        ));
    }
    // In the order the batch takes them: by advisory lock id.
    let mut ids: Vec<(i64, &Key)> = keys
        .iter()
        .map(|k| (advisory_id(&f.schema, k.as_str()), k))
        .collect();
    ids.sort();
    let mut holders = Vec::new();
    for (_, key) in &ids {
        holders.push(f.hold_key(key.as_str()).await);
    }
    let letting_go = tokio::spawn(async move {
        for tx in holders {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tx.commit().await.unwrap();
        }
    });
    let started = Instant::now();
    let reqs: Vec<_> = keys
        .iter()
        .map(|key| ProlongRequest {
            key,
            token: &token,
            ttl: ttl(30_000),
        })
        .collect();
    let answers = b.prolongate_many(&reqs).await;
    assert!(started.elapsed() < Duration::from_millis(1_000));
    for answer in answers {
        let err = answer.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    }
    tokio::time::sleep_until((started + Duration::from_millis(1_200)).into()).await;
    // This test's batch: other tests run batches of their own meanwhile.
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
         AND query LIKE '%ROWS FROM%' AND strpos(query, $1) > 0 AND pid <> pg_backend_pid()",
    )
    .bind(format!("\"{}\"", f.schema))
    .fetch_one(&f.admin)
    .await
    .unwrap();
    letting_go.await.unwrap();
    f.drop_schema().await;
    assert_eq!(
        running, 0,
        "the batch's statement still runs on the server long after its deadline"
    );
}

/// The advisory lock id of `key` in `schema.locks`, as the backend computes it.
fn advisory_id(schema: &str, key: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{schema}.locks {key}").as_bytes());
    i64::from_be_bytes(digest[..8].try_into().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_queued_behind_another_gives_up_at_the_deadline() {
    let f = Fresh::new().await;
    // Another migration of the same table in progress: it holds the migration's lock.
    let mut tx = f.admin.begin().await.unwrap();
    let id = format!(
        "('x' || encode(substring(sha256(convert_to('migrate {}.locks', 'UTF8')) FROM 1 FOR 8), 'hex'))::bit(64)::bigint",
        f.schema
    );
    sqlx::query(&format!("SELECT pg_advisory_xact_lock({id})"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let b = f
        .builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = b.migrate().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    tx.rollback().await.unwrap();
    // With the default deadline: on a loaded machine, the short one may cut it.
    f.builder()
        .build()
        .unwrap()
        .migrate()
        .await
        .expect("the migration goes through once it is its turn");
    f.drop_schema().await;
}

#[tokio::test]
async fn grace_out_of_range_is_refused_before_any_io() {
    let err = PostgresBackend::builder("postgres://nobody@127.0.0.1:1/none")
        .grace(Duration::MAX)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[test]
fn owner_tokens_never_reach_a_log() {
    let token = Token::generate().unwrap();
    let ((), log) = capture(async {
        let f = Fresh::new().await;
        let b = f.backend().await;
        let key = Key::new("k").unwrap();
        // Slow: sqlx warns about statements over a second, with their text.
        let tx = f.hold_key("k").await;
        let (b2, key2) = (b.clone(), key.clone());
        let slow = tokio::spawn(async move { obtain(&b2, &key2, &token, 30_000).await });
        f.wait_for_waiter("k").await;
        tokio::time::sleep(Duration::from_millis(1300)).await;
        tx.commit().await.unwrap();
        assert!(matches!(
            slow.await.unwrap(),
            ObtainOutcome::Acquired { .. }
        ));
        let p = ProlongRequest {
            key: &key,
            token: &token,
            ttl: ttl(30_000),
        };
        assert_eq!(b.prolongate(p).await.unwrap(), ProlongOutcome::Prolonged);
        let r = ReleaseRequest {
            key: &key,
            token: &token,
            delay_after: None,
        };
        assert_eq!(b.release(r).await.unwrap(), ReleaseOutcome::Released);
        f.drop_schema().await;
    });
    assert!(log.contains("locks_op_v7"), "statements were logged: {log}");
    assert!(
        log.contains("slow statement"),
        "the slow statement was logged: {log}"
    );
    let hex = token.to_hex();
    let hex_of_hex: String = hex.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(!log.contains(&hex), "the token reached a log");
    assert!(
        !log.contains(&hex_of_hex),
        "the token reached a log, hex-encoded"
    );
}

/// Many first calls at once migrate once: the others wait for that migration and go on,
/// rather than each run it again in turn (a transaction, a `CREATE OR REPLACE` of every
/// function, and a closed connection each).
#[test]
fn concurrent_first_calls_migrate_once() {
    let ((), log) = capture(async {
        let f = Fresh::new().await;
        let b = f.builder().build().unwrap();
        let keys: Vec<Key> = (0..32)
            .map(|i| Key::new(format!("k{i}")).unwrap())
            .collect();
        let token = Token::generate().unwrap();
        let obtains = keys.iter().map(|k| obtain(&b, k, &token, 30_000));
        for outcome in futures_util::future::join_all(obtains).await {
            assert!(
                matches!(outcome, ObtainOutcome::Acquired { .. }),
                "{outcome:?}"
            );
        }
        f.drop_schema().await;
    });
    let migrations = log.matches("migrating the lock table").count();
    assert_eq!(migrations, 1, "migrations for 32 first calls");
}

/// Backends of different tables in one new schema, started at once (services deployed
/// together), each migrate: `CREATE SCHEMA IF NOT EXISTS` is not safe against itself
/// running concurrently (Postgres answers the second with a duplicate key in
/// `pg_namespace`), so migrations of one schema take one turn. The history checker found
/// it as a `Protocol` error on the first obtain of processes started together.
#[tokio::test]
async fn backends_of_one_new_schema_migrate_at_once() {
    for round in 0..5 {
        let f = Fresh::new().await;
        let migrations = (0..8).map(|i| {
            let b = PostgresBackend::builder(&f.url)
                .table(&f.schema, &format!("locks_{i}"))
                .build()
                .unwrap();
            async move { b.migrate().await }
        });
        for result in futures_util::future::join_all(migrations).await {
            if let Err(e) = result {
                panic!("round {round}: a migration beside others of the same schema: {e}");
            }
        }
        f.drop_schema().await;
    }
}

/// Issue #36, item 13: a server that refuses the connection was reported as "no answer
/// within the deadline of 5s (... timeout=)" after the whole deadline, sending the reader
/// to the timeout setting. Now the refusal is said, with the address, long before it.
#[tokio::test]
async fn a_refused_connection_is_said_as_such_and_early() {
    let port = test_servers::locks::closed_port();
    let backend =
        PostgresBackend::builder(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
    test_servers::locks::refused_early(&backend, port).await;
}
