//! The contract's decision table (`lock_conformance::table`) through a real server: each
//! case's row is written with SQL, the request goes through the backend (its transaction,
//! its row codec, the rules), and the row is read back.

mod support;

use std::time::Duration;

use lock_conformance::table::{Seen, Who, CASES, FENCING, GRACE_MS};
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
async fn the_backend_keeps_the_decision_table() {
    let harness = MySql::new();
    let url = shared_url();
    let admin = MySqlPool::connect(&url).await.expect("the shared MariaDB");
    let table = harness.fresh_table();
    let backend = MySqlBackend::builder(url.clone())
        .table(&table)
        .grace(Duration::from_millis(GRACE_MS))
        .build()
        .unwrap();
    backend.migrate().await.unwrap();
    let (a, b, c) = (
        Token::generate().unwrap(),
        Token::generate().unwrap(),
        Token::generate().unwrap(),
    );
    let (da, db, dc) = (a.digest(), b.digest(), c.digest());
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
            sqlx::query_scalar("SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000 AS SIGNED)")
                .fetch_one(&admin)
                .await
                .unwrap();
        // Shared holds as lock_core::backend::rules::columns stores them: times in µs,
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
            let holds = r.by.map(|_| i64::from(r.holds));
            let (shares, writer, expires, forget) = match &shared {
                Some((shares, writer, expires, forget)) => {
                    (Some(shares.clone()), writer.clone(), *expires, *forget)
                }
                None => (None, None, r.expires, r.forget),
            };
            sqlx::query(&format!(
                "INSERT INTO `{table}` (`key`, state, token, holder, fencing, holds, expires_us, \
                 forget_us, shares, writer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .bind(key.as_str().as_bytes())
            .bind(r.state.as_bytes())
            .bind(token.map(String::into_bytes))
            .bind(holder.map(str::as_bytes))
            .bind(i64::try_from(FENCING).unwrap())
            .bind(holds)
            .bind(expires * 1000)
            .bind(forget * 1000)
            .bind(shares.map(String::into_bytes))
            .bind(writer.map(String::into_bytes))
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
            let fencing = u64::try_from(r.get::<i64, _>("fencing")).unwrap();
            let expires = r.get::<i64, _>("expires") - now;
            match text(&r, "state").unwrap().as_str() {
                "free" => Seen::Free { fencing },
                "cooling" => Seen::Cooling {
                    fencing,
                    left_ms: expires,
                },
                "shared" => {
                    let parse = |column: &str| {
                        text(&r, column)
                            .map(|t| serde_json::from_str::<serde_json::Value>(&t).unwrap())
                    };
                    let (shares, writer) = (parse("shares").unwrap(), parse("writer"));
                    Seen::shared_from_json(fencing, &shares, writer.as_ref(), 1000, now, who)
                        .unwrap_or_else(|| panic!("shares of another shape: {shares}"))
                }
                _ => Seen::Held {
                    by: who(&text(&r, "token").unwrap()),
                    holds: u32::try_from(r.get::<i64, _>("holds")).unwrap(),
                    fencing,
                    expires_in_ms: expires,
                    forget_in_ms: r.get::<i64, _>("forget") - now,
                },
            }
        });
        if let Err(e) = case.check(&answer, &seen, SLACK_MS) {
            panic!("{e}");
        }
    }
}
