//! The contract's decision table (`lock_conformance::table`) through a real server, on both
//! variants: each case's record is written with `SET`, the request goes through the
//! backend, and the record is read back. The WATCH variant decides with `lock_core::backend::rules`;
//! this holds the Lua script to the same table.

mod support;

use std::time::Duration;

use lock_conformance::table::{Seen, SharedAt, Who, CASES, FENCING, GRACE_MS};
use lock_core::backend::Token;
use lock_core::Key;
use lock_redis::{RedisBackend, Variant};

/// Time that may pass on the server between writing a case's record and its request.
const SLACK_MS: u64 = 1_000;

async fn server_ms(admin: &mut redis::aio::MultiplexedConnection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(admin).await.unwrap();
    s * 1000 + us / 1000
}

async fn run_table(variant: Variant) {
    let url = support::shared_url();
    let mut admin = support::admin(&url).await;
    let prefix = format!("table-{}:", &Token::generate().unwrap().to_hex()[..12]);
    let backend = RedisBackend::builder(&url)
        .variant(variant)
        .prefix(prefix)
        .grace(Duration::from_millis(GRACE_MS))
        .connect()
        .await
        .unwrap();
    let (a, b, c) = (
        Token::generate().unwrap(),
        Token::generate().unwrap(),
        Token::generate().unwrap(),
    );
    let holder = r#"{"host":"table","pid":1}"#;
    for (i, case) in CASES.iter().enumerate() {
        let key = Key::new(format!("case-{i}")).unwrap();
        let name = backend.record_name(&key);
        let now = server_ms(&mut admin).await;
        let digest = |who: Who| match who {
            Who::A => a.digest(),
            Who::B => b.digest(),
            Who::C => c.digest(),
        };
        let who = |stored: &str| {
            [(Who::A, &a), (Who::B, &b), (Who::C, &c)]
                .into_iter()
                .find(|(_, t)| t.digest() == stored)
                .map(|(w, _)| w)
        };
        let raw = match case.before.shared_at(now) {
            Some(shared) => Some(v2_record(&shared, digest, holder)),
            None => case.before.row(now).map(|r| {
                let token = r.by.map(digest).unwrap_or_default();
                let holder = if r.by.is_some() { holder } else { "" };
                let (state, holds, expires, forget) = (r.state, r.holds, r.expires, r.forget);
                format!("v1|{state}|{token}|{FENCING}|{holds}|{expires}|{forget}|{holder}")
            }),
        };
        if let Some(raw) = raw {
            let _: () = redis::cmd("SET")
                .arg(&name)
                .arg(raw)
                .arg("PX")
                .arg(600_000)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
        let answer = case
            .send(&backend, &key, &a)
            .await
            .unwrap_or_else(|e| panic!("case \"{}\" on {variant:?}: {e}", case.name));
        let stored: Option<String> = redis::cmd("GET")
            .arg(&name)
            .query_async(&mut admin)
            .await
            .unwrap();
        let seen = stored.map_or(Seen::Nothing, |raw| {
            if let Some(json) = raw.strip_prefix("v2|") {
                return seen_v2(json, now, who);
            }
            let f: Vec<&str> = raw.splitn(8, '|').collect();
            let n = |i: usize| f[i].parse::<i64>().unwrap();
            let fencing = f[3].parse::<u64>().unwrap();
            match f[1] {
                "free" => Seen::Free { fencing },
                "cooling" => Seen::Cooling {
                    fencing,
                    left_ms: n(5) - now,
                },
                _ => Seen::Held {
                    by: who(f[2]),
                    holds: f[4].parse().unwrap(),
                    fencing,
                    expires_in_ms: n(5) - now,
                    forget_in_ms: n(6) - now,
                },
            }
        });
        if let Err(e) = case.check(&answer, &seen, SLACK_MS) {
            panic!("{variant:?}: {e}");
        }
        let _: () = redis::cmd("DEL")
            .arg(&name)
            .query_async(&mut admin)
            .await
            .unwrap();
    }
}

/// A shared record as both variants store it (`scripts/shared.lua` documents the format).
fn v2_record(shared: &SharedAt, digest: impl Fn(Who) -> String, holder: &str) -> String {
    let holder = serde_json::to_string(holder).unwrap();
    let holds: Vec<String> = shared
        .holds
        .iter()
        .map(|h| {
            format!(
                r#"{{"token":"{}","holder":{holder},"holds":{},"expires":{},"forget":{},"fencing":{},"weight":{}}}"#,
                digest(h.by),
                h.holds,
                h.expires,
                h.forget,
                h.fencing,
                h.weight
            )
        })
        .collect();
    let writer = shared.writer.map_or(String::new(), |(by, until)| {
        format!(r#","writer":{{"token":"{}","until":{until}}}"#, digest(by))
    });
    format!(
        r#"v2|{{"fencing":{FENCING},"state":"shared","capacity":{},"holds":[{}]{writer}}}"#,
        shared.capacity,
        holds.join(",")
    )
}

/// A `v2` record as the table sees it: shared holds, or a state with a writer's marker.
fn seen_v2(json: &str, now: i64, who: impl Fn(&str) -> Option<Who>) -> Seen {
    let record: serde_json::Value = serde_json::from_str(json).unwrap();
    let fencing = record["fencing"].as_u64().unwrap();
    let at = |v: &serde_json::Value| v.as_i64().unwrap() - now;
    match record["state"].as_str().unwrap() {
        "shared" => Seen::shared_from_json(fencing, &record, record.get("writer"), 1, now, who)
            .unwrap_or_else(|| panic!("a v2 record of another shape: {json}")),
        "free" => Seen::Free { fencing },
        "cooling" => Seen::Cooling {
            fencing,
            left_ms: at(&record["until"]),
        },
        _ => {
            let hold = &record["hold"];
            Seen::Held {
                by: who(hold["token"].as_str().unwrap()),
                holds: u32::try_from(hold["holds"].as_u64().unwrap()).unwrap(),
                fencing,
                expires_in_ms: at(&hold["expires"]),
                forget_in_ms: at(&hold["forget"]),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lua_script_keeps_the_decision_table() {
    run_table(Variant::Lua).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_variant_keeps_the_decision_table() {
    run_table(Variant::Watch).await;
}
