//! Test support: the servers come from the workspace's `test-servers` crate; what is
//! MySQL-specific (running SQL for the test itself) lives here.

#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod harness;

pub use test_servers::mysql::{shared_url, Flush, PrivateMariaDb};

const HOW: &str = "install MariaDB (`apt-get install mariadb-server`) or set MYSQL_URL";

/// Runs SQL (one text, several statements allowed) on `url`, and returns the rows of the
/// last result as text.
pub async fn exec(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    use sqlx::Row;
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("MariaDB at {}: {e}; {HOW}", lock_core::redact_url(url)));
    let rows = sqlx::raw_sql(sql)
        .fetch_all(&pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pool.close().await;
    rows.iter()
        .map(|r| {
            (0..r.len())
                .map(|i| {
                    r.try_get::<Option<Vec<u8>>, _>(i)
                        .ok()
                        .flatten()
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                        .or_else(|| {
                            r.try_get::<Option<i64>, _>(i)
                                .ok()
                                .flatten()
                                .map(|n| n.to_string())
                        })
                        .or_else(|| r.try_get::<Option<String>, _>(i).ok().flatten())
                })
                .collect()
        })
        .collect()
}
