//! Who holds a key: ownership, reentrancy, holder info, names, namespaces, bad input.

use super::*;

/// The backend reports the name the suite was wired with.
pub async fn backend_reports_its_name(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    ensure!(
        backend.name() == suite.name,
        "backend calls itself {:?}, the suite was wired as {:?}",
        backend.name(),
        suite.name
    );
    Ok(())
}

/// A free lock is obtained; a second owner gets Busy naming the holder; another key is
/// independent; after release the key can be obtained again.
pub async fn second_owner_gets_busy(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "busy").await;
    acquired(a.obtain(LONG).await?, "first obtain")?;
    match b.obtain(LONG).await? {
        ObtainOutcome::Busy(busy) => {
            ensure!(
                busy.holder.as_ref() == Some(&a.holder),
                "Busy names {:?}, not the holder",
                busy.holder
            );
            ensure!(
                busy.remaining <= LONG && busy.remaining > LONG - ms(5_000),
                "Busy remaining {:?} for a {LONG:?} lock",
                busy.remaining
            );
        }
        other => {
            return Err(Failure(format!(
                "second owner: expected Busy, got {other:?}"
            )))
        }
    }
    acquired(b.on("busy-other").obtain(LONG).await?, "another key")?;
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "release by the holder"
    );
    acquired(b.obtain(LONG).await?, "obtain after release")?;
    Ok(())
}

/// A failed obtain leaves the holder, its fencing and its ttl untouched.
pub async fn failed_obtain_leaves_holder_untouched(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "untouched").await;
    let fencing = acquired(a.obtain(LONG).await?, "first obtain")?;
    ensure!(busy(&b.obtain(ms(1)).await?), "second owner must be Busy");
    match a.inspect().await? {
        LockState::Held {
            holder,
            fencing: f,
            holds: 1,
            remaining,
        } => {
            ensure!(
                holder == a.holder && f == fencing,
                "holder or fencing changed: {holder:?} {f}"
            );
            ensure!(
                remaining > ms(20_000),
                "remaining {remaining:?}: the failed obtain shortened the ttl"
            );
        }
        other => {
            return Err(Failure(format!(
                "inspect: expected Held once, got {other:?}"
            )))
        }
    }
    Ok(())
}

/// Same token again: Reacquired with a growing hold count and the same fencing; each release
/// gives back one hold and only the last frees the key. Another token is another owner.
pub async fn reentrant_obtain_counts_holds(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "reentrant").await;
    let fencing = acquired(a.obtain(LONG).await?, "first obtain")?;
    for holds in 2..=3 {
        let got = a.obtain(LONG).await?;
        ensure!(
            got == ObtainOutcome::Reacquired { holds },
            "re-obtain: expected Reacquired {{ holds: {holds} }}, got {got:?}"
        );
    }
    ensure!(
        matches!(a.inspect().await?, LockState::Held { holds: 3, fencing: f, .. } if f == fencing),
        "inspect after 3 holds"
    );
    ensure!(
        busy(&b.obtain(LONG).await?),
        "another token is another owner"
    );
    for holds in [2, 1] {
        let got = a.release(Some(ms(5_000))).await?;
        ensure!(
            got == ReleaseOutcome::Decremented { holds },
            "release: expected Decremented {{ holds: {holds} }}, got {got:?}"
        );
        ensure!(busy(&b.obtain(LONG).await?), "still held after a decrement");
    }
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "last release frees"
    );
    acquired(b.obtain(LONG).await?, "obtain after the last release")?;
    Ok(())
}

/// Releasing twice: the second answers Lost and changes nothing.
pub async fn second_release_is_lost(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "twice").await;
    acquired(a.obtain(LONG).await?, "obtain")?;
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "first release"
    );
    let second = a.release(None).await?;
    ensure!(
        second == ReleaseOutcome::Lost,
        "second release: expected Lost, got {second:?}"
    );
    acquired(b.obtain(LONG).await?, "obtain after")?;
    let third = a.release(None).await?;
    ensure!(
        third == ReleaseOutcome::Lost,
        "release of someone else's lock: expected Lost, got {third:?}"
    );
    ensure!(
        matches!(b.inspect().await?, LockState::Held { holder, .. } if holder == b.holder),
        "the new holder must be untouched"
    );
    Ok(())
}

/// Prolong or release by a token that does not hold the lock changes nothing.
pub async fn foreign_token_changes_nothing(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "foreign").await;
    let fencing = acquired(a.obtain(LONG).await?, "obtain")?;
    let p = b.prolong(ms(10)).await?;
    ensure!(
        p == ProlongOutcome::Lost,
        "foreign prolong: expected Lost, got {p:?}"
    );
    let r = b.release(None).await?;
    ensure!(
        r == ReleaseOutcome::Lost,
        "foreign release: expected Lost, got {r:?}"
    );
    match a.inspect().await? {
        LockState::Held {
            holder,
            fencing: f,
            remaining,
            holds: 1,
        } if holder == a.holder && f == fencing => {
            ensure!(
                remaining > ms(20_000),
                "a foreign prolong shortened the lock to {remaining:?}"
            );
        }
        other => {
            return Err(Failure(format!(
                "after foreign calls: expected the holder untouched, got {other:?}"
            )))
        }
    }
    Ok(())
}

/// Holder info (host, pid, metadata) round-trips through Busy and inspect.
pub async fn holder_info_round_trips(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let mut a = Owner::new(&backend, "holder-info", "x");
    a.holder = HolderInfo {
        host: "host-ü.example".into(),
        pid: 4_294_967_295,
        metadata: Some(format!(
            "{{\"job\":\"report\",\"quote\":\"\\\"\"}}{}",
            "m".repeat(HolderInfo::MAX_METADATA - 40)
        )),
    };
    acquired(a.obtain(LONG).await?, "obtain")?;
    match a.inspect().await? {
        LockState::Held { holder, .. } => ensure!(
            holder == a.holder,
            "holder info changed on the way: {holder:?}"
        ),
        other => return Err(Failure(format!("inspect: {other:?}"))),
    }
    let mut bare = Owner::new(&backend, "holder-info-bare", "x");
    bare.holder.metadata = None;
    acquired(bare.obtain(LONG).await?, "obtain")?;
    ensure!(
        matches!(bare.inspect().await?, LockState::Held { holder, .. } if holder.metadata.is_none()),
        "no metadata stays none"
    );
    Ok(())
}

/// Keys that break naive mappings (spaces, unicode, `/`, `..`, `:`, `{}`, `*`, case, 1024
/// bytes, backslashes, path-like) are independent locks.
pub async fn odd_keys_are_independent_locks(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let long_a = "a".repeat(1024);
    let long_b = format!("{}b", "a".repeat(1023));
    let keys = [
        "k",
        "K",
        "k ",
        " k",
        "k/../k",
        "../../etc/passwd",
        "/abs/path",
        "a:b",
        "{tag}",
        "*",
        "?",
        "\\",
        "\\\\",
        "ключ",
        "🔒",
        ".",
        "..",
        "con",
        "a/b",
        "a_b",
        "a%2Fb",
        "trailing.",
        long_a.as_str(),
        long_b.as_str(),
    ];
    let owners: Vec<Owner> = keys
        .iter()
        .map(|k| Owner::new(&backend, k, "odd"))
        .collect();
    for o in &owners {
        acquired(o.obtain(LONG).await?, &format!("key {:?}", o.key))?;
    }
    let other = Owner::new(&backend, "k", "other");
    for o in &owners {
        let probe = other.on(o.key.as_str());
        ensure!(
            busy(&probe.obtain(LONG).await?),
            "key {:?} must be held by its own owner",
            o.key
        );
        ensure!(
            matches!(o.inspect().await?, LockState::Held { holder, .. } if holder == o.holder),
            "key {:?} lost its holder: another key shares its record",
            o.key
        );
    }
    for o in &owners {
        ensure!(
            o.release(None).await? == ReleaseOutcome::Released,
            "release {:?}",
            o.key
        );
    }
    Ok(())
}

/// Two backends from the harness (two namespaces) never see each other's locks.
pub async fn namespaces_never_interfere(suite: &Suite) -> CaseResult {
    let one = suite.harness.backend().await;
    let two = suite.harness.backend().await;
    let a = Owner::new(&one, "shared-name", "a");
    let b = Owner::new(&two, "shared-name", "b");
    acquired(a.obtain(LONG).await?, "namespace one")?;
    acquired(b.obtain(LONG).await?, "namespace two, same key")?;
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "release in one"
    );
    ensure!(
        matches!(b.inspect().await?, LockState::Held { .. }),
        "namespace two untouched"
    );
    // Namespaces that are prefixes of each other, with keys that complete them to the
    // same string: a backend that concatenates would put both on one record.
    let pairs = [
        ("app", "x:y", "appx:", "y"),
        ("", "ab", "a", "b"),
        ("a:", "b", "a", ":b"),
        ("p{", "k", "p", "{k"),
    ];
    for (ns_one, key_one, ns_two, key_two) in pairs {
        let (Some(one), Some(two)) = (
            suite.harness.namespaced(ns_one).await,
            suite.harness.namespaced(ns_two).await,
        ) else {
            report(format_args!(
                "{}: namespaces_never_interfere: prefix-completion pairs skipped, the harness \
                 has no named namespaces (Harness::namespaced)",
                suite.name
            ));
            return Ok(());
        };
        let a = Owner::new(&one, key_one, "a");
        let b = Owner::new(&two, key_two, "b");
        acquired(a.obtain(LONG).await?, "the first namespace")?;
        acquired(
            b.obtain(LONG).await?,
            &format!("{ns_two:?} + {key_two:?} after {ns_one:?} + {key_one:?}"),
        )?;
        for o in [&a, &b] {
            ensure!(
                o.release(None).await? == ReleaseOutcome::Released,
                "release in {:?}",
                o.key
            );
        }
    }
    Ok(())
}

/// Bad keys, ttls, metadata and watchdog fractions are refused with InvalidInput before any
/// I/O, and leave nothing behind.
pub async fn invalid_input_is_refused_before_io(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(Arc::clone(&backend));
    let attempts = [
        locker.lock("").try_obtain().await,
        locker.lock("x".repeat(1025)).try_obtain().await,
        locker.lock("nul\0").try_obtain().await,
        locker.lock("k").ttl(Duration::ZERO).try_obtain().await,
        locker
            .lock("k")
            .ttl(Duration::from_micros(999))
            .try_obtain()
            .await,
        locker.lock("k").ttl(Duration::MAX).try_obtain().await,
        locker
            .lock("k")
            .metadata("m".repeat(4097))
            .try_obtain()
            .await,
        locker.lock("k").watchdog_every(0.0).try_obtain().await,
    ];
    for (i, attempt) in attempts.into_iter().enumerate() {
        match attempt {
            Err(e) if e.kind() == ErrorKind::InvalidInput => {}
            other => {
                return Err(Failure(format!(
                    "bad input #{i}: expected InvalidInput, got {other:?}"
                )))
            }
        }
    }
    ensure!(
        Ttl::from_millis(0).is_err() && Key::new("").is_err(),
        "validation"
    );
    ensure!(
        backend.inspect(&Key::new("k")?).await? == LockState::Free,
        "a refused obtain left a record"
    );
    Ok(())
}
