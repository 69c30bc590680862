//! The statements' texts: values escaped, names checked, the function's call and batch.

use super::*;
use lock_core::backend::Token;

#[test]
fn names_are_plain_identifiers_only() {
    assert!(Names::new("public", "locks").is_some());
    assert!(Names::new("_a1", "b_2").is_some());
    for (s, t) in [
        ("", "t"),
        ("s", "T"),
        ("s", "t;drop"),
        ("1s", "t"),
        ("s", "t\""),
    ] {
        assert!(Names::new(s, t).is_none(), "{s}.{t}");
    }
    assert!(Names::new("s", &"t".repeat(49)).is_none());
}

#[test]
fn text_values_are_hex_only() {
    let sql = text("it's \\ \"x\" ünï");
    let open = "pg_catalog.convert_from(pg_catalog.decode('";
    assert!(sql.starts_with(open));
    let inner = &sql[open.len()..sql.len() - "', 'hex'), 'UTF8')".len()];
    assert!(inner.bytes().all(|b| b.is_ascii_hexdigit()), "{inner}");
}

#[test]
fn statements_carry_a_digest_never_the_token() {
    let token = Token::generate().unwrap();
    let names = Names::new("s", "t").unwrap();
    let digest = token.digest();
    let args = Args {
        token: Some(&digest),
        ..Args::default()
    };
    let sql = names.call(
        &Session::new(Duration::from_secs(1), true),
        "obtain",
        "k",
        &args,
    );
    let hex_of = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    assert!(sql.contains(&hex_of(&digest)));
    assert!(!sql.contains(&token.to_hex()) && !sql.contains(&hex_of(&token.to_hex())));

    let batch = Prolongs {
        keys: vec!["k'; DROP TABLE t; --".to_owned()],
        locks: vec![names.lock_id("k")],
        tokens: vec![digest.clone()],
        ttls: vec![1000],
        graces: vec![1000],
    };
    let sql = names.prolongs(&Session::new(Duration::from_secs(1), true), &batch);
    assert!(sql.contains(&hex_of(&digest)));
    assert!(!sql.contains(&token.to_hex()) && !sql.contains(&hex_of(&token.to_hex())));
    assert!(!sql.contains("DROP"), "keys travel as hex: {sql}");
    assert!(sql.starts_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED;"));
}

#[test]
fn the_preamble_pins_isolation_and_the_deadline() {
    let p = Session::new(Duration::from_millis(2500), false).preamble;
    assert!(p.starts_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED;"));
    assert!(p.contains("statement_timeout = 2500;"));
    assert!(p.contains("synchronous_commit = off"));
    assert!(!Session::new(Duration::MAX, true)
        .preamble
        .contains("synchronous_commit"));
}

#[test]
fn advisory_ids_are_stable() {
    // Documented: the first 8 bytes of SHA-256, big-endian. SHA-256("a") starts ca978112ca1bbdca.
    assert_eq!(
        advisory_id("a"),
        i64::from_be_bytes(0xca97_8112_ca1b_bdca_u64.to_be_bytes())
    );
}

#[test]
fn the_migration_names_everything() {
    let m = Names::new("s", "t").unwrap().migration();
    for placeholder in ["{schema}", "{table}", "{fn}", "{channel}"] {
        assert!(
            !m.contains(placeholder),
            "{placeholder} left in the migration"
        );
    }
    assert!(m.contains("\"s\".\"t_op_v7\""));
    assert!(
        m.contains("'s.t '"),
        "the sweep hashes the ids the client does"
    );
}
