//! One table of valid and invalid records, read by both variants through a real server: the
//! Lua script and the WATCH variant's decoder must agree on every one.

mod support;

use lock_core::{ErrorKind, Key, LockBackend};
use lock_redis::{RedisBackend, Variant};

include!("support/records.rs");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_variants_agree_on_every_record() {
    let url = support::shared_url();
    let prefix = format!(
        "records-{}:",
        &lock_core::backend::Token::generate().unwrap().to_hex()[..12]
    );
    let mut admin = support::admin(&url).await;
    let key = Key::new("k").unwrap();
    // The record's name, as the Lua variant would write it (found by writing one).
    let lua = RedisBackend::builder(&url)
        .variant(Variant::Lua)
        .prefix(prefix.clone())
        .connect()
        .await
        .unwrap();
    let watch = RedisBackend::builder(&url)
        .variant(Variant::Watch)
        .prefix(prefix.clone())
        .connect()
        .await
        .unwrap();
    obtain(&lua, &key).await;
    let names: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut admin)
        .await
        .unwrap();
    let [name] = names.as_slice() else {
        panic!("one record expected under {prefix}: {names:?}")
    };
    for (raw, valid) in VALID_RECORDS
        .iter()
        .map(|r| (r, true))
        .chain(INVALID_RECORDS.iter().map(|r| (r, false)))
    {
        let _: () = redis::cmd("SET")
            .arg(name)
            .arg(*raw)
            .query_async(&mut admin)
            .await
            .unwrap();
        for backend in [&lua, &watch] {
            let got = backend.inspect(&key).await;
            match (valid, &got) {
                (true, Ok(_)) => {}
                (false, Err(e)) if e.kind() == ErrorKind::Corrupt => {}
                _ => panic!(
                    "{}: record {raw:?} should be {}: got {got:?}",
                    backend.name(),
                    if valid { "read" } else { "Corrupt" }
                ),
            }
        }
    }
    let _: () = redis::cmd("DEL")
        .arg(name)
        .query_async(&mut admin)
        .await
        .unwrap();
}

/// Whoever can GET a record (a read-only user, a replica, a dump, MONITOR) must not learn
/// the token that releases the lock: both variants store and send its digest only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_hold_a_digest_never_the_token() {
    let url = support::shared_url();
    let mut admin = support::admin(&url).await;
    for variant in [Variant::Lua, Variant::Watch] {
        let prefix = format!(
            "digest-{}:",
            &lock_core::backend::Token::generate().unwrap().to_hex()[..12]
        );
        let backend = RedisBackend::builder(&url)
            .variant(variant)
            .prefix(prefix.clone())
            .connect()
            .await
            .unwrap();
        let key = Key::new("k").unwrap();
        let token = obtain(&backend, &key).await;
        let raw: String = redis::cmd("GET")
            .arg(backend.record_name(&key))
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(!raw.contains(&token.to_hex()), "{variant:?}: {raw}");
        assert!(raw.contains(&token.digest()), "{variant:?}: {raw}");
    }
}

/// Obtains the free `key` for a minute with a fresh token, and returns the token.
async fn obtain(backend: &RedisBackend, key: &Key) -> lock_core::backend::Token {
    let token = lock_core::backend::Token::generate().unwrap();
    let holder = lock_core::HolderInfo::current();
    let req = lock_core::backend::ObtainRequest::new(
        key,
        &token,
        lock_core::Ttl::from_millis(60_000).unwrap(),
        &holder,
    );
    assert!(matches!(
        backend.obtain(req).await.unwrap(),
        lock_core::ObtainOutcome::Acquired { .. }
    ));
    token
}
