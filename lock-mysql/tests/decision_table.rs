//! The contract's decision table (`lock_conformance::table`) through a real server: each
//! case's row is written with SQL, the request goes through the backend, and the row is
//! read back. Both ways the backend decides: the table's procedure (`procedure.sql`, for
//! exclusive holds, deferring the rest to the client), and the client alone (its
//! transaction, its row codec, the rules), which every operation takes when the
//! procedure cannot be used.

mod support;

use std::time::Duration;

use lock_conformance::table::{Digests, Seen, SqlRow, CASES, GRACE_MS};
use lock_core::backend::Token;
use lock_core::Key;
use lock_mysql::MySqlBackend;
use sqlx::{MySqlPool, Row};
use support::harness::MySql;
use support::shared_url;

/// Time that may pass on the server between writing a case's row and its request.
const SLACK_MS: u64 = 1_000;

fn text(row: &sqlx::mysql::MySqlRow, column: &str) -> Option<String> {
    row.get::<Option<Vec<u8>>, _>(column)
        .map(|b| String::from_utf8(b).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_procedure_keeps_the_decision_table() {
    keeps_the_decision_table(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_keeps_the_decision_table() {
    keeps_the_decision_table(false).await;
}

async fn keeps_the_decision_table(procedure: bool) {
    let harness = MySql::new();
    let url = shared_url();
    let admin = MySqlPool::connect(&url).await.expect("the shared MariaDB");
    let table = harness.fresh_table();
    let mut builder = MySqlBackend::builder(url.clone())
        .table(&table)
        .grace(Duration::from_millis(GRACE_MS));
    if !procedure {
        builder = builder.decide_in_client();
    }
    let backend = builder.build().unwrap();
    backend.migrate().await.unwrap();
    let (a, b, c) = (
        Token::generate().unwrap(),
        Token::generate().unwrap(),
        Token::generate().unwrap(),
    );
    let digests = Digests::new(a.digest(), b.digest(), c.digest());
    let holder_json = r#"{"host":"table","pid":1}"#;
    for (i, case) in CASES.iter().enumerate() {
        let key = Key::new(format!("case-{i}")).unwrap();
        let now: i64 =
            sqlx::query_scalar("SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000 AS SIGNED)")
                .fetch_one(&admin)
                .await
                .unwrap();
        if let Some(r) = case.before.sql_row(now, &digests, holder_json) {
            sqlx::query(&format!(
                "INSERT INTO `{table}` (`key`, state, token, holder, fencing, holds, expires_us, \
                 forget_us, shares, writer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .bind(key.as_str().as_bytes())
            .bind(r.state.into_bytes())
            .bind(r.token.map(String::into_bytes))
            .bind(r.holder.map(String::into_bytes))
            .bind(i64::try_from(r.fencing).unwrap())
            .bind(r.holds.map(i64::from))
            .bind(r.expires * 1000)
            .bind(r.forget * 1000)
            .bind(r.shares.map(String::into_bytes))
            .bind(r.writer.map(String::into_bytes))
            .execute(&admin)
            .await
            .unwrap();
        }
        let answer = case
            .send(&backend, &key, &a)
            .await
            .unwrap_or_else(|e| panic!("case \"{}\": {e}", case.name));
        let stored = sqlx::query(&format!(
            "SELECT state, token, fencing, holds, expires_us DIV 1000 AS expires, \
             forget_us DIV 1000 AS forget, shares, writer FROM `{table}` WHERE `key` = ?"
        ))
        .bind(key.as_str().as_bytes())
        .fetch_optional(&admin)
        .await
        .unwrap();
        let seen = stored.map_or(Seen::Nothing, |r| {
            SqlRow {
                state: text(&r, "state").unwrap(),
                token: text(&r, "token"),
                holder: None,
                fencing: u64::try_from(r.get::<i64, _>("fencing")).unwrap(),
                holds: r
                    .get::<Option<i64>, _>("holds")
                    .map(|n| u32::try_from(n).unwrap()),
                expires: r.get("expires"),
                forget: r.get("forget"),
                shares: text(&r, "shares"),
                writer: text(&r, "writer"),
            }
            .seen(now, &digests)
        });
        if let Err(e) = case.check(&answer, &seen, SLACK_MS) {
            panic!("{e}");
        }
    }
    // Every case went the way asked: the procedure was there to call all along.
    assert_eq!(backend.uses_procedure(), procedure);
}
