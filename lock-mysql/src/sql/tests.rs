//! The statements' texts: values escaped, batches under the server's packet limit, the procedure's call.

use super::*;
use lock_core::backend::rules::{Hold, Record, State};
use lock_core::backend::Token;

#[test]
fn table_names_are_plain_identifiers_only() {
    assert!(Names::new("distlock").is_some());
    assert!(Names::new("_a1").is_some());
    for bad in ["", "T", "t;drop", "1t", "t`", &"t".repeat(49)] {
        assert!(Names::new(bad).is_none(), "{bad}");
    }
}

#[test]
fn values_travel_as_hex_only() {
    let names = Names::new("t").unwrap();
    let session = Session::new(Duration::from_secs(1), false);
    let key = "k'; DROP TABLE t; -- \\ ` \"";
    let sql = names.read_one(&session, key, true);
    assert!(!sql.contains("DROP"), "{sql}");
    assert!(sql.contains(&hex(key.as_bytes())));
    assert_eq!(hex(b"ab"), "X'6162'");
    assert_eq!(hex(b""), "X''");
}

#[test]
fn statements_carry_a_digest_never_the_token() {
    let token = Token::generate().unwrap();
    let digest = token.digest();
    let names = Names::new("t").unwrap();
    let record = Record {
        fencing: 3,
        state: State::Held(Hold {
            token: digest.clone(),
            holder: "{}".to_owned(),
            holds: 1,
            expires: 5_000_000_000,
            forget: 6_000_000_000,
        }),
        writer: None,
    };
    let row = Columns::of(&record, 1);
    let sql = names.write([("k", &row)].into_iter());
    assert_eq!(sql.len(), 1, "one small row, one message");
    let sql = &sql[0];
    assert!(sql.contains(&hex(digest.as_bytes())));
    let raw = token.to_hex();
    assert!(!sql.contains(&raw) && !sql.contains(&hex(raw.as_bytes())[2..66]));
    assert!(sql.ends_with("; COMMIT"));
}

#[test]
fn the_preamble_pins_the_clock_isolation_and_the_deadline() {
    let p = Session::new(Duration::from_millis(2500), false).preamble;
    assert!(p.contains("time_zone = '+00:00'"), "{p}");
    assert!(p.contains("innodb_lock_wait_timeout = 3,"), "{p}");
    assert!(p.contains("/*M!, max_statement_time = 2.500 */"), "{p}");
    assert!(p.contains("READ COMMITTED; START TRANSACTION; "), "{p}");
    let p = Session::new(Duration::from_millis(10), false).preamble;
    assert!(p.contains("innodb_lock_wait_timeout = 1,"), "{p}");
    let pinned = Session::new(Duration::from_millis(10), true);
    assert_eq!(pinned.preamble, "START TRANSACTION; ");
    assert!(pinned.settings.contains("innodb_lock_wait_timeout = 1,"));
}

#[test]
fn a_call_carries_hex_values_and_the_settings_when_unpinned() {
    let names = Names::new("locks").unwrap();
    let call = Call {
        op: ProcedureOp::Obtain,
        key: "k'; DROP TABLE t; --",
        token: "ab",
        holder: Some("{}"),
        ttl_us: 5,
        grace_us: 6,
        delay_us: 0,
    };
    let pinned = names.call(&Session::new(Duration::from_secs(1), true), &call);
    assert!(
        pinned.starts_with("CALL `locks_op_v2`('obtain', X'"),
        "{pinned}"
    );
    assert!(!pinned.contains("DROP"), "{pinned}");
    assert!(pinned.ends_with(", X'6162', X'7b7d', 5, 6, 0)"), "{pinned}");
    let unpinned = names.call(&Session::new(Duration::from_secs(1), false), &call);
    assert!(unpinned.starts_with("SET SESSION time_zone"), "{unpinned}");
    assert!(unpinned.ends_with(&pinned), "{unpinned}");
    let release = Call {
        op: ProcedureOp::Release,
        holder: None,
        ..call
    };
    assert!(names
        .call(&Session::new(Duration::from_secs(1), true), &release)
        .contains("('release', X'"));
    assert!(names
        .call(&Session::new(Duration::from_secs(1), true), &release)
        .contains("X'6162', NULL, 5"));
    let m = names.procedure_migration();
    assert!(
        m.contains("CREATE PROCEDURE IF NOT EXISTS `locks_op_v2`("),
        "{m}"
    );
    assert!(m.contains("FROM `locks` WHERE"));
    assert!(!m.contains("{table}") && !m.contains("{proc}"));
}

#[test]
fn the_migration_names_the_table() {
    let m = Names::new("locks").unwrap().migration();
    assert!(m.contains("CREATE TABLE IF NOT EXISTS `locks`"));
    assert!(!m.contains("{table}"));
    assert!(m.contains("ENGINE = InnoDB"));
}

#[test]
fn large_rows_are_written_in_messages_under_the_budget() {
    let names = Names::new("locks").unwrap();
    let record = Record {
        fencing: 3,
        state: State::Held(Hold {
            token: "t".to_owned(),
            // 100 KiB of holder text: 200 KiB hex-encoded.
            holder: "h".repeat(100 << 10),
            holds: 1,
            expires: 5_000_000_000,
            forget: 6_000_000_000,
        }),
        writer: None,
    };
    let row = Columns::of(&record, 1);
    let keys: Vec<String> = (0..20).map(|i| format!("key-{i}")).collect();
    let messages = names.write(keys.iter().map(|k| (k.as_str(), &row)));
    assert!(messages.len() > 3, "{} messages", messages.len());
    for (i, m) in messages.iter().enumerate() {
        assert!(m.len() <= MESSAGE_BUDGET, "message {i}: {} bytes", m.len());
        assert!(m.starts_with("INSERT INTO"), "message {i}");
        assert_eq!(
            m.ends_with("; COMMIT"),
            i == messages.len() - 1,
            "message {i}"
        );
    }
    let rows: usize = messages
        .iter()
        .map(|m| m.matches("X'6b65792d").count())
        .sum();
    assert_eq!(rows, 20, "every row written once");
    // A row alone over the budget still goes, alone.
    let huge = Record {
        state: State::Held(Hold {
            holder: "h".repeat(MESSAGE_BUDGET),
            ..match &record.state {
                State::Held(h) => h.clone(),
                _ => unreachable!(),
            }
        }),
        ..record.clone()
    };
    let huge_row = Columns::of(&huge, 1);
    let messages = names.write([("a", &huge_row), ("b", &row)].into_iter());
    assert_eq!(messages.len(), 2);
    assert!(names.write(std::iter::empty()) == [COMMIT]);
}
