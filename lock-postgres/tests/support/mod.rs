//! Test support: the servers come from the workspace's `test-servers` crate; what is
//! Postgres-specific (running SQL for the test itself) lives here.

#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod harness;

pub use test_servers::postgres::{shared_url, PgBouncer, PrivatePostgres, PASSWORD};

const HOW: &str = "install PostgreSQL (`apt-get install postgresql`) or set DATABASE_URL";

/// Runs one SQL text (simple protocol) on `url`.
pub async fn exec(url: &str, sql: &str) {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("Postgres at {url}: {e}; {HOW}"));
    sqlx::raw_sql(sql)
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pool.close().await;
}
