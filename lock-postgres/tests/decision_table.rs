//! The contract's decision table (`lock_conformance::table`) through a real server: each
//! case's row is written with SQL, the request goes through the backend (the plpgsql
//! function), and the row is read back. This holds `schema.sql` to the same table as the
//! Rust rules the memory, file and Redis WATCH backends decide with.

mod support;

use std::time::Duration;

use lock_conformance::table::{Seen, Who, CASES, FENCING, GRACE_MS};
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
    let (da, db, dc) = (digest(&a).await, digest(&b).await, digest(&c).await);
    let digest_of = |who: Who| match who {
        Who::A => da.clone(),
        Who::B => db.clone(),
        Who::C => dc.clone(),
    };
    let who = |stored: &str| {
        [(Who::A, &da), (Who::B, &db), (Who::C, &dc)]
            .into_iter()
            .find(|(_, d)| **d == stored)
            .map(|(w, _)| w)
    };
    let holder_json = r#"{"host":"table","pid":1}"#;
    for (i, case) in CASES.iter().enumerate() {
        let key = Key::new(format!("case-{i}")).unwrap();
        let now: i64 =
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                .fetch_one(&admin)
                .await
                .unwrap();
        // Shared holds as the backend stores them (lock-postgres/src/shared.rs): times in µs,
        // token '' and the last hold's end in the row's own columns.
        let shared = case.before.shared_at(now).map(|s| {
            let row = s.columns(1000, digest_of, holder_json);
            let (expires, forget) = (row.expires.unwrap_or(now), row.forget.unwrap_or(now));
            (row.shares, row.writer, expires, forget)
        });
        if let Some(r) = case.before.row(now) {
            let token = match (&shared, r.by) {
                (Some(_), _) => Some(String::new()),
                (None, by) => by.map(digest_of),
            };
            let holder = (r.by.is_some() || shared.is_some()).then_some(holder_json);
            let holds = r.by.map(|_| i32::try_from(r.holds).unwrap());
            let (shares, writer, expires, forget) = match &shared {
                Some((shares, writer, expires, forget)) => {
                    (Some(shares.clone()), writer.clone(), *expires, *forget)
                }
                None => (None, None, r.expires, r.forget),
            };
            sqlx::query(&format!(
                "INSERT INTO {table} (key, state, token, holder, fencing, holds, expires_at, \
                 forget_at, shares, writer) VALUES ($1, $2, $3, $4, $5, $6, \
                 to_timestamp($7 / 1000.0), to_timestamp($8 / 1000.0), $9::jsonb, $10::jsonb)"
            ))
            .bind(key.as_str())
            .bind(r.state)
            .bind(token)
            .bind(holder)
            .bind(i64::try_from(FENCING).unwrap())
            .bind(holds)
            .bind(expires as f64)
            .bind(forget as f64)
            .bind(shares)
            .bind(writer)
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
            let fencing = u64::try_from(r.get::<i64, _>("fencing")).unwrap();
            let expires = r.get::<i64, _>("expires") - now;
            match r.get::<String, _>("state").as_str() {
                "free" => Seen::Free { fencing },
                "cooling" => Seen::Cooling {
                    fencing,
                    left_ms: expires,
                },
                "shared" => {
                    let parse = |column: &str| {
                        r.get::<Option<String>, _>(column)
                            .map(|text| serde_json::from_str::<serde_json::Value>(&text).unwrap())
                    };
                    let (shares, writer) = (parse("shares").unwrap(), parse("writer"));
                    Seen::shared_from_json(fencing, &shares, writer.as_ref(), 1000, now, who)
                        .unwrap_or_else(|| panic!("shares of another shape: {shares}"))
                }
                _ => {
                    let token: String = r.get("token");
                    Seen::Held {
                        by: who(&token),
                        holds: u32::try_from(r.get::<i32, _>("holds")).unwrap(),
                        fencing,
                        expires_in_ms: expires,
                        forget_in_ms: r.get::<i64, _>("forget") - now,
                    }
                }
            }
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
