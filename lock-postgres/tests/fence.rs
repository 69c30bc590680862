//! `lock_postgres::fence`: fenced writes inside the caller's transaction, on the shared
//! server (`DATABASE_URL`, else the local one, else a private one).

use lock_core::{ErrorKind, Fencing};
use lock_postgres::fence::PgFence;
use sqlx::PgPool;

async fn pool() -> PgPool {
    let url = test_servers::servers::postgres::shared_url();
    PgPool::connect(&url)
        .await
        .expect("the shared Postgres server")
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
    let fence = PgFence::table("public", "distlock_fence_test").unwrap();
    fence.migrate(&pool).await.unwrap();
    fence.migrate(&pool).await.unwrap();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS distlock_fence_data (resource text PRIMARY KEY, v text)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let r = resource("account");
    let write = |token: u64, value: &'static str| {
        let (pool, fence, r) = (pool.clone(), fence.clone(), r.clone());
        async move {
            let mut tx = pool.begin().await.unwrap();
            fence.check(&mut tx, &r, Fencing(token)).await?;
            sqlx::query(
                "INSERT INTO distlock_fence_data VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET v = EXCLUDED.v",
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
    let v: String = sqlx::query_scalar("SELECT v FROM distlock_fence_data WHERE resource = $1")
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
    let fence = PgFence::new();
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
async fn a_bad_table_name_or_a_huge_token_is_refused() {
    assert_eq!(
        PgFence::table("public", "Bad Name").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let pool = pool().await;
    let fence = PgFence::new();
    fence.migrate(&pool).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let e = fence
        .check(&mut tx, "huge", Fencing(u64::MAX))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

/// A role without the fence table's privileges: `PermissionDenied`, saying which to grant.
#[tokio::test]
async fn a_role_without_privileges_is_told_what_to_grant() {
    let root = pool().await;
    PgFence::new().migrate(&root).await.unwrap();
    let role = format!(
        "fence_{}",
        &lock_core::backend::Token::generate().unwrap().to_hex()[..12]
    );
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(&root)
        .await
        .unwrap();
    let url = test_servers::servers::postgres::shared_url();
    let pool = PgPool::connect(&test_servers::as_user(&url, &role))
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let e = PgFence::new()
        .check(&mut tx, "denied", Fencing(1))
        .await
        .unwrap_err();
    drop(tx);
    pool.close().await;
    sqlx::query(&format!("DROP ROLE {role}"))
        .execute(&root)
        .await
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(
        e.to_string().contains("grant it SELECT, INSERT and UPDATE"),
        "{e}"
    );
}

/// The fence suite on `PgFence`: every fenced write a transaction (the check, then the data's upsert).
mod suite {
    use async_trait::async_trait;
    use lock_conformance::fence::FenceHarness;
    use lock_core::{Fencing, Result};
    use lock_postgres::fence::PgFence;
    use sqlx::{Connection as _, PgPool};
    use tokio::sync::OnceCell;

    struct Postgres {
        pool: OnceCell<(PgPool, PgFence)>,
    }

    impl Postgres {
        fn new() -> Self {
            Postgres {
                pool: OnceCell::new(),
            }
        }

        async fn ready(&self) -> &(PgPool, PgFence) {
            self.pool
                .get_or_init(|| async {
                    let pool = super::pool().await;
                    let fence = PgFence::table("public", "fence_suite").unwrap();
                    fence.migrate(&pool).await.unwrap();
                    for table in ["data", "other"] {
                        let sql = format!(
                            "CREATE TABLE IF NOT EXISTS fence_suite_{table} (resource text PRIMARY KEY, v text)"
                        );
                        sqlx::query(&sql).execute(&pool).await.unwrap();
                    }
                    (pool, fence)
                })
                .await
        }

        async fn write_on(
            &self,
            tx: &mut sqlx::PgConnection,
            resource: &str,
            token: Fencing,
            value: &str,
        ) -> Result<()> {
            let (_, fence) = self.ready().await;
            fence.check(tx, resource, token).await?;
            let sql = "INSERT INTO fence_suite_data VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET v = EXCLUDED.v";
            sqlx::query(sql)
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
            "postgres fence suite",
            lock_core::Operation::Fence,
            e.to_string(),
        )
    }

    #[async_trait]
    impl FenceHarness for Postgres {
        async fn write(&self, resource: &str, token: Fencing, value: &str) -> Result<()> {
            let (pool, _) = self.ready().await;
            let mut tx = pool.begin().await.map_err(unavailable)?;
            self.write_on(&mut tx, resource, token, value).await?;
            tx.commit().await.map_err(unavailable)
        }

        async fn read(&self, resource: &str) -> Result<Option<String>> {
            let (pool, _) = self.ready().await;
            sqlx::query_scalar("SELECT v FROM fence_suite_data WHERE resource = $1")
                .bind(resource)
                .fetch_optional(pool)
                .await
                .map_err(unavailable)
        }

        fn isolation_levels(&self) -> Vec<&'static str> {
            vec!["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"]
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
            let mut tx = conn.begin().await.unwrap();
            sqlx::query(&format!("SET TRANSACTION ISOLATION LEVEL {isolation}"))
                .execute(&mut *tx)
                .await
                .unwrap();
            // The caller's own read first: the transaction's snapshot is taken here.
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

    lock_conformance::fence_suite!("postgres fence", Postgres::new());
}
