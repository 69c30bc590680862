//! `lock_mysql::fence`: fenced writes inside the caller's transaction, on the shared
//! server (`MYSQL_URL`, else the local one, else a private one).

use lock_core::{ErrorKind, Fencing};
use lock_mysql::fence::MySqlFence;
use sqlx::MySqlPool;

async fn pool() -> MySqlPool {
    let url = test_servers::servers::mysql::shared_url();
    MySqlPool::connect(&url)
        .await
        .expect("the shared MariaDB server")
}

/// The data table the tests write beside their fence checks.
async fn data_table(pool: &MySqlPool) {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS distlock_fence_data (resource VARCHAR(200) PRIMARY KEY, v TEXT)",
    )
    .execute(pool)
    .await
    .unwrap();
}

fn resource(what: &str) -> String {
    format!(
        "{what}-{}",
        lock_core::backend::Token::generate().unwrap().to_hex()
    )
}

/// A holder paused past its ttl writes after its successor: refused with both tokens, and
/// its transaction's write does not land; the successor's does.
#[tokio::test]
async fn a_stale_token_is_refused_inside_the_transaction() {
    let pool = pool().await;
    let fence = MySqlFence::table("distlock_fence_test").unwrap();
    fence.migrate(&pool).await.unwrap();
    fence.migrate(&pool).await.unwrap();
    data_table(&pool).await;
    let r = resource("account");
    let write = |token: u64, value: &'static str| {
        let (pool, fence, r) = (pool.clone(), fence.clone(), r.clone());
        async move {
            let mut tx = pool.begin().await.unwrap();
            fence.check(&mut tx, &r, Fencing(token)).await?;
            sqlx::query(
                "INSERT INTO distlock_fence_data VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE v = VALUES(v)",
            )
            .bind(&r)
            .bind(value)
            .execute(&mut *tx)
            .await
            .unwrap();
            tx.commit().await.unwrap();
            Ok::<(), lock_core::Error>(())
        }
    };
    write(7, "old holder").await.unwrap();
    write(9, "new holder").await.unwrap();
    write(9, "new holder again").await.unwrap();
    let e = write(7, "late").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StaleToken);
    let tokens = e.stale_token().expect("both tokens");
    assert_eq!((tokens.presented, tokens.highest), (Fencing(7), Fencing(9)));
    let v: String = sqlx::query_scalar("SELECT v FROM distlock_fence_data WHERE resource = ?")
        .bind(&r)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(v, "new holder again");
    assert_eq!(fence.highest(&pool, &r).await.unwrap(), Some(Fencing(9)));
}

/// Two transactions of two holders at once: the older one's check waits for the newer
/// one's row lock and is then refused, never both written.
#[tokio::test]
async fn a_check_waits_for_a_newer_holder_s_transaction() {
    let pool = pool().await;
    let fence = MySqlFence::new();
    fence.migrate(&pool).await.unwrap();
    let r = resource("concurrent");
    let mut newer = pool.begin().await.unwrap();
    fence.check(&mut newer, &r, Fencing(20)).await.unwrap();
    let older = {
        let (pool, fence, r) = (pool.clone(), fence.clone(), r.clone());
        tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            fence.check(&mut tx, &r, Fencing(10)).await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        !older.is_finished(),
        "the older check waits for the newer transaction"
    );
    newer.commit().await.unwrap();
    let e = older.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StaleToken);
}

#[tokio::test]
async fn a_bad_table_name_or_a_long_resource_is_refused() {
    assert_eq!(
        MySqlFence::table("Bad Name").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let pool = pool().await;
    let fence = MySqlFence::new();
    fence.migrate(&pool).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let long = "r".repeat(lock_mysql::fence::MAX_RESOURCE + 1);
    let e = fence.check(&mut tx, &long, Fencing(1)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    // The full range of tokens: u64::MAX is kept exactly.
    let r = resource("max");
    fence.check(&mut tx, &r, Fencing(u64::MAX)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        fence.highest(&pool, &r).await.unwrap(),
        Some(Fencing(u64::MAX))
    );
}

/// A user without the fence table's privileges: `PermissionDenied`, saying which to grant
/// (the server's `42000` also means a syntax error: the kind comes from its error number).
#[tokio::test]
async fn a_user_without_privileges_is_told_what_to_grant() {
    let root = pool().await;
    MySqlFence::new().migrate(&root).await.unwrap();
    let user = format!(
        "fence_{}",
        &lock_core::backend::Token::generate().unwrap().to_hex()[..12]
    );
    // A privilege on another table only, so that the login succeeds.
    for statement in [
        "CREATE TABLE IF NOT EXISTS distlock_fence_other (a INT)".to_owned(),
        format!("CREATE USER '{user}'@'%'"),
        format!("GRANT SELECT ON distlock_fence_other TO '{user}'@'%'"),
    ] {
        sqlx::query(&statement).execute(&root).await.unwrap();
    }
    let url = test_servers::servers::mysql::shared_url();
    let pool = MySqlPool::connect(&test_servers::as_user(&url, &user))
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let e = MySqlFence::new()
        .check(&mut tx, "denied", Fencing(1))
        .await
        .unwrap_err();
    drop(tx);
    pool.close().await;
    sqlx::query(&format!("DROP USER '{user}'@'%'"))
        .execute(&root)
        .await
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(
        e.to_string().contains("grant it SELECT, INSERT and UPDATE"),
        "{e}"
    );
}

/// The caller's transaction read something before its check (so InnoDB's REPEATABLE READ
/// fixed its snapshot), then a newer holder checked and committed: the older check must
/// see the newer token, not the snapshot's, and refuse, at every isolation level, whether
/// the fence row existed before the snapshot or not.
#[tokio::test]
async fn a_check_after_the_transaction_read_first_sees_the_newest_token() {
    use sqlx::Connection as _;
    let pool = pool().await;
    let fence = MySqlFence::new();
    fence.migrate(&pool).await.unwrap();
    data_table(&pool).await;
    let url = test_servers::servers::mysql::shared_url();
    for level in [
        "READ UNCOMMITTED",
        "READ COMMITTED",
        "REPEATABLE READ",
        "SERIALIZABLE",
    ] {
        for first in [None, Some(3)] {
            let r = resource("snapshot");
            if let Some(first) = first {
                let mut tx = pool.begin().await.unwrap();
                fence.check(&mut tx, &r, Fencing(first)).await.unwrap();
                tx.commit().await.unwrap();
            }
            let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
            sqlx::query(&format!("SET SESSION TRANSACTION ISOLATION LEVEL {level}"))
                .execute(&mut conn)
                .await
                .unwrap();
            let mut older = sqlx::Connection::begin(&mut conn).await.unwrap();
            // The caller reads its own data first (another table: no lock on the fence).
            let _: Option<String> =
                sqlx::query_scalar("SELECT v FROM distlock_fence_data WHERE resource = ?")
                    .bind(&r)
                    .fetch_optional(&mut *older)
                    .await
                    .unwrap();
            let mut newer = pool.begin().await.unwrap();
            fence.check(&mut newer, &r, Fencing(7)).await.unwrap();
            newer.commit().await.unwrap();
            let e = fence
                .check(&mut older, &r, Fencing(5))
                .await
                .expect_err(&format!("{level}, first token {first:?}: token 5 after 7"));
            assert_eq!(e.kind(), ErrorKind::StaleToken, "{level}, {first:?}: {e}");
            let tokens = e.stale_token().expect("both tokens");
            assert_eq!(
                (tokens.presented, tokens.highest),
                (Fencing(5), Fencing(7)),
                "{level}, {first:?}"
            );
            older.rollback().await.unwrap();
        }
    }
}

/// The fence suite on `MySqlFence`: every fenced write a transaction (the check, then the data's upsert).
mod suite {
    use async_trait::async_trait;
    use lock_conformance::fence::FenceHarness;
    use lock_core::{Fencing, Result};
    use lock_mysql::fence::MySqlFence;
    use sqlx::{Connection as _, MySqlPool};
    use tokio::sync::OnceCell;

    struct MySql {
        pool: OnceCell<(MySqlPool, MySqlFence)>,
    }

    impl MySql {
        fn new() -> Self {
            MySql {
                pool: OnceCell::new(),
            }
        }

        async fn ready(&self) -> &(MySqlPool, MySqlFence) {
            self.pool
                .get_or_init(|| async {
                    let pool = super::pool().await;
                    let fence = MySqlFence::table("fence_suite").unwrap();
                    fence.migrate(&pool).await.unwrap();
                    for table in ["data", "other"] {
                        let sql = format!(
                            "CREATE TABLE IF NOT EXISTS fence_suite_{table} \
                             (resource VARBINARY(767) PRIMARY KEY, v TEXT)"
                        );
                        sqlx::query(&sql).execute(&pool).await.unwrap();
                    }
                    (pool, fence)
                })
                .await
        }

        async fn write_on(
            &self,
            tx: &mut sqlx::MySqlConnection,
            resource: &str,
            token: Fencing,
            value: &str,
        ) -> Result<()> {
            let (_, fence) = self.ready().await;
            fence.check(tx, resource, token).await?;
            sqlx::query(
                "INSERT INTO fence_suite_data VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)",
            )
            .bind(resource)
            .bind(value)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
            Ok(())
        }
    }

    fn unavailable(e: sqlx::Error) -> lock_core::Error {
        lock_core::Error::new(
            lock_core::ErrorKind::Unavailable,
            "mysql fence suite",
            lock_core::Operation::Fence,
            e.to_string(),
        )
    }

    #[async_trait]
    impl FenceHarness for MySql {
        async fn write(&self, resource: &str, token: Fencing, value: &str) -> Result<()> {
            let (pool, _) = self.ready().await;
            let mut tx = pool.begin().await.map_err(unavailable)?;
            self.write_on(&mut tx, resource, token, value).await?;
            tx.commit().await.map_err(unavailable)
        }

        async fn read(&self, resource: &str) -> Result<Option<String>> {
            let (pool, _) = self.ready().await;
            sqlx::query_scalar("SELECT v FROM fence_suite_data WHERE resource = ?")
                .bind(resource)
                .fetch_optional(pool)
                .await
                .map_err(unavailable)
        }

        fn isolation_levels(&self) -> Vec<&'static str> {
            vec![
                "READ UNCOMMITTED",
                "READ COMMITTED",
                "REPEATABLE READ",
                "SERIALIZABLE",
            ]
        }

        async fn interleaved(
            &self,
            isolation: &str,
            resource: &str,
            first: (Fencing, &str),
            second: (Fencing, &str),
        ) -> (Result<()>, Result<()>) {
            let (pool, _) = self.ready().await;
            let mut conn = pool.acquire().await.unwrap();
            // The level of the connection's next transaction only.
            sqlx::query(&format!("SET TRANSACTION ISOLATION LEVEL {isolation}"))
                .execute(&mut *conn)
                .await
                .unwrap();
            let mut tx = conn.begin().await.unwrap();
            // The caller's own read first (another table: no lock on the fence or the
            // data): the transaction's snapshot is taken here.
            let _: Option<String> = sqlx::query_scalar("SELECT v FROM fence_suite_other LIMIT 1")
                .fetch_optional(&mut *tx)
                .await
                .unwrap();
            let second = self.write(resource, second.0, second.1).await;
            let first = match self.write_on(&mut tx, resource, first.0, first.1).await {
                Ok(()) => tx.commit().await.map_err(unavailable),
                Err(e) => {
                    let _ = tx.rollback().await;
                    Err(e)
                }
            };
            (first, second)
        }
    }

    lock_conformance::fence_suite!("mysql fence", MySql::new());
}
