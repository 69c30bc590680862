//! The contract's decision table (`lock_conformance::table`) through a real server: each
//! case's row is written with SQL, the request goes through the backend (the plpgsql
//! function), and the row is read back. This holds `schema.sql` to the same table as the
//! Rust rules the memory, file and Redis WATCH backends decide with.

mod support;

use std::time::Duration;

use lock_conformance::table::{Digests, Seen, SqlRow, CASES, GRACE_MS};
use lock_core::backend::Token;
use lock_core::Key;
use lock_postgres::PostgresBackend;
use sqlx::{PgPool, Row};
use support::shared_url;

/// Time that may pass on the server between writing a case's row and its request.
const SLACK_MS: u64 = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_function_keeps_the_decision_table() {
    let url = shared_url();
    let schema = format!("t_{}", &Token::generate().unwrap().to_hex()[..12]);
    let admin = PgPool::connect(&url).await.expect("the shared Postgres");
    let backend = PostgresBackend::builder(&url)
        .table(&schema, "locks")
        .grace(Duration::from_millis(GRACE_MS))
        .build()
        .unwrap();
    backend.migrate().await.unwrap();
    let table = backend.table();
    let (a, b, c) = (
        Token::generate().unwrap(),
        Token::generate().unwrap(),
        Token::generate().unwrap(),
    );
    let digest = |t: &Token| {
        let admin = admin.clone();
        let hex = t.to_hex();
        async move {
            sqlx::query_scalar::<_, String>("SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')")
                .bind(hex)
                .fetch_one(&admin)
                .await
                .unwrap()
        }
    };
    let digests = Digests::new(digest(&a).await, digest(&b).await, digest(&c).await);
    let holder_json = r#"{"host":"table","pid":1}"#;
    for (i, case) in CASES.iter().enumerate() {
        let key = Key::new(format!("case-{i}")).unwrap();
        let now: i64 =
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                .fetch_one(&admin)
                .await
                .unwrap();
        if let Some(r) = case.before.sql_row(now, &digests, holder_json) {
            sqlx::query(&format!(
                "INSERT INTO {table} (key, state, token, holder, fencing, holds, expires_at, \
                 forget_at, shares, writer) VALUES ($1, $2, $3, $4, $5, $6, \
                 to_timestamp($7 / 1000.0), to_timestamp($8 / 1000.0), $9::jsonb, $10::jsonb)"
            ))
            .bind(key.as_str())
            .bind(r.state)
            .bind(r.token)
            .bind(r.holder)
            .bind(i64::try_from(r.fencing).unwrap())
            .bind(r.holds.map(|n| i32::try_from(n).unwrap()))
            .bind(r.expires as f64)
            .bind(r.forget as f64)
            .bind(r.shares)
            .bind(r.writer)
            .execute(&admin)
            .await
            .unwrap();
        }
        let answer = case
            .send(&backend, &key, &a)
            .await
            .unwrap_or_else(|e| panic!("case \"{}\": {e}", case.name));
        let stored = sqlx::query(&format!(
            "SELECT state, token, fencing, holds, \
             (extract(epoch FROM expires_at) * 1000)::bigint AS expires, \
             (extract(epoch FROM forget_at) * 1000)::bigint AS forget, \
             shares::text AS shares, writer::text AS writer \
             FROM {table} WHERE key = $1"
        ))
        .bind(key.as_str())
        .fetch_optional(&admin)
        .await
        .unwrap();
        let seen = stored.map_or(Seen::Nothing, |r| {
            SqlRow {
                state: r.get("state"),
                token: r.get("token"),
                holder: None,
                fencing: u64::try_from(r.get::<i64, _>("fencing")).unwrap(),
                holds: r
                    .get::<Option<i32>, _>("holds")
                    .map(|n| u32::try_from(n).unwrap()),
                expires: r.get("expires"),
                forget: r.get("forget"),
                shares: r.get("shares"),
                writer: r.get("writer"),
            }
            .seen(now, &digests)
        });
        if let Err(e) = case.check(&answer, &seen, SLACK_MS) {
            panic!("{e}");
        }
    }
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&admin)
        .await
        .unwrap();
}
