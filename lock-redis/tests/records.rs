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

/// A semaphore's holds and a writer's marker written by one variant are read and kept by the
/// other: the script's `v2` (scripts/shared.lua) is the WATCH variant's (record.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_variants_share_one_semaphore_and_its_writer_marker() {
    use lock_core::backend::{ObtainRequest, ReleaseRequest, Token};
    use lock_core::{BusyReason, HolderInfo, LockState, Mode, ObtainOutcome, ReleaseOutcome, Ttl};

    let url = support::shared_url();
    let prefix = format!("mixed-{}:", &Token::generate().unwrap().to_hex()[..12]);
    let connect = |variant| {
        RedisBackend::builder(&url)
            .variant(variant)
            .prefix(prefix.clone())
            .connect()
    };
    let (lua, watch) = (
        connect(Variant::Lua).await.unwrap(),
        connect(Variant::Watch).await.unwrap(),
    );
    let key = Key::new("k").unwrap();
    let holder = HolderInfo::current();
    let ttl = Ttl::from_millis(60_000).unwrap();
    let permit = Mode::shared(2, 1).unwrap();
    let ask = |token, mode| ObtainRequest::new(&key, token, ttl, &holder).with_mode(mode);
    let tokens: Vec<Token> = (0..4).map(|_| Token::generate().unwrap()).collect();

    let first = lua.obtain(ask(&tokens[0], permit)).await.unwrap();
    let second = watch.obtain(ask(&tokens[1], permit)).await.unwrap();
    let (ObtainOutcome::Acquired { fencing: f1, .. }, ObtainOutcome::Acquired { fencing: f2, .. }) =
        (first.clone(), second.clone())
    else {
        panic!("two permits of two: {first:?}, {second:?}")
    };
    assert!(f2 > f1, "each admission its own, growing, fencing token");
    for backend in [&lua, &watch] {
        match backend.obtain(ask(&tokens[2], permit)).await.unwrap() {
            ObtainOutcome::Busy(b) => {
                assert_eq!(
                    (b.reason, b.holders),
                    (BusyReason::Full, 2),
                    "{}",
                    backend.name()
                );
            }
            other => panic!("{}: a third permit of two: {other:?}", backend.name()),
        }
        match backend.inspect(&key).await.unwrap() {
            LockState::Shared {
                capacity: 2,
                holds,
                writer_waiting: None,
            } => {
                assert_eq!(holds.len(), 2, "{}", backend.name());
            }
            other => panic!("{}: {other:?}", backend.name()),
        }
    }
    // A writer waiting through one variant keeps the other's readers out.
    let writer = ask(&tokens[3], Mode::Exclusive).with_queue(true);
    assert!(matches!(
        watch.obtain(writer).await.unwrap(),
        ObtainOutcome::Busy(_)
    ));
    let released = lua.release(ReleaseRequest {
        key: &key,
        token: &tokens[0],
        delay_after: None,
    });
    assert_eq!(released.await.unwrap(), ReleaseOutcome::Released);
    match lua.obtain(ask(&tokens[2], permit)).await.unwrap() {
        ObtainOutcome::Busy(b) => assert_eq!(b.reason, BusyReason::WriterWaiting),
        other => panic!("a reader behind a waiting writer: {other:?}"),
    }
    assert_eq!(
        lua.release(ReleaseRequest {
            key: &key,
            token: &tokens[1],
            delay_after: None
        })
        .await
        .unwrap(),
        ReleaseOutcome::Released,
        "the script releases the WATCH variant's hold by its token"
    );
    let writer = ask(&tokens[3], Mode::Exclusive).with_queue(true);
    assert!(matches!(
        lua.obtain(writer).await.unwrap(),
        ObtainOutcome::Acquired { .. }
    ));
    let _ = watch.force_release(&key).await.unwrap();
}
