//! One plain async function per rule of the contract, named after the rule.
//!
//! Each takes a [`Suite`] and returns `Err(Failure)` naming the outcome that broke the rule.
//! Ttls are chosen so that every expected outcome is certain on a loaded machine: "still
//! held" checks happen well inside the ttl, "expired" checks well after it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    Attempt, ErrorKind, Fencing, HolderInfo, Key, LockBackend, LockGuard, LockState, Locker,
    ObtainOutcome, ProlongOutcome, ReleaseOutcome, Retry, Ttl,
};
use tokio::time::Instant;

use crate::harness::{ms, Owner};
use crate::{ensure, CaseResult, Failure, Suite};

pub use crate::faults::{
    cancelled_calls_leave_nothing_held, obtain_retried_after_a_lost_reply_holds_once,
    partition_during_a_hold_fires_lost_in_time,
    partition_during_obtain_or_release_leaves_no_orphan, slow_server_never_overstates_validity,
    subscribe_in_a_partition_ends_by_its_deadline,
};
pub use crate::model::{model_sequences, model_sequences_with};
pub use crate::precise::{
    busy_remaining_is_exact_both_ways, inspect_changes_nothing_before_late_calls,
    inspect_counts_reentrant_holds, late_release_with_delay_starts_the_cooldown,
    reacquire_resets_the_ttl,
};
pub use crate::process::{killed_holder_frees_after_ttl, multiprocess_exclusion};

const LONG: Duration = Duration::from_secs(30);

fn acquired(outcome: ObtainOutcome, what: &str) -> Result<Fencing, Failure> {
    match outcome {
        ObtainOutcome::Acquired { fencing, .. } => Ok(fencing),
        other => Err(Failure(format!("{what}: expected Acquired, got {other:?}"))),
    }
}

fn busy(outcome: &ObtainOutcome) -> bool {
    matches!(outcome, ObtainOutcome::Busy(_))
}

/// Obtains `key` through the client layer, failing the case if it is busy.
async fn take(
    locker: &Locker,
    key: &str,
    ttl: Duration,
    watchdog: bool,
) -> Result<LockGuard, Failure> {
    let builder = locker.lock(key).ttl(ttl);
    let builder = if watchdog {
        builder.watchdog()
    } else {
        builder
    };
    match builder.try_obtain().await? {
        Attempt::Obtained(guard) => Ok(guard),
        Attempt::Busy(busy) => Err(Failure(format!("{key} should be free, but it is {busy}"))),
    }
}

async fn pair(suite: &Suite, key: &str) -> (Arc<dyn LockBackend>, Owner, Owner) {
    let backend = suite.harness.backend().await;
    let a = Owner::new(&backend, key, "owner a");
    let b = Owner::new(&backend, key, "owner b");
    (backend, a, b)
}

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

/// An unprolonged lock is Busy to others before its ttl (less a margin) and free after it.
pub async fn unprolonged_lock_expires_after_its_ttl(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "expiry").await;
    let ttl = ms(600);
    let sent = Instant::now();
    let first = acquired(a.obtain(ttl).await?, "obtain")?;
    let answered = Instant::now();
    tokio::time::sleep(ms(100)).await;
    let early = b.obtain(ttl).await?;
    if Instant::now() < sent + ttl {
        ensure!(busy(&early), "before the ttl: expected Busy, got {early:?}");
    }
    tokio::time::sleep_until(answered + ttl + ms(100)).await;
    let second = acquired(b.obtain(ttl).await?, "after the ttl")?;
    ensure!(
        second > first,
        "fencing after expiry {second} does not exceed {first}"
    );
    Ok(())
}

/// Prolonging to a longer ttl keeps the lock past the original ttl; remaining after a prolong
/// lies within (0, ttl]; then, unprolonged, it expires.
pub async fn prolong_extends_the_lock(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "prolong").await;
    acquired(a.obtain(ms(400)).await?, "obtain")?;
    let p = a.prolong(ms(2_000)).await?;
    ensure!(
        p == ProlongOutcome::Prolonged,
        "prolong of a live lock: expected Prolonged, got {p:?}"
    );
    let after = Instant::now();
    match a.inspect().await? {
        LockState::Held { remaining, .. } => ensure!(
            remaining > Duration::ZERO && remaining <= ms(2_000),
            "remaining after prolong {remaining:?} not in (0, 2s]"
        ),
        other => return Err(Failure(format!("inspect after prolong: {other:?}"))),
    }
    tokio::time::sleep_until(after + ms(800)).await;
    ensure!(
        busy(&b.obtain(LONG).await?),
        "past the original ttl the prolonged lock must still be held"
    );
    tokio::time::sleep_until(after + ms(2_300)).await;
    acquired(b.obtain(LONG).await?, "after the prolonged ttl")?;
    Ok(())
}

/// Late prolong and late release when nobody took the lock: ProlongedLate (same fencing,
/// same holds) and ReleasedLate (freed whatever the hold count).
pub async fn late_calls_when_untaken_are_late(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "late").await;
    let fencing = acquired(a.obtain(ms(400)).await?, "obtain")?;
    let _ = a.obtain(ms(400)).await?;
    let answered = Instant::now();
    tokio::time::sleep_until(answered + ms(520)).await;
    let p = a.prolong(ms(400)).await?;
    ensure!(
        p == ProlongOutcome::ProlongedLate,
        "late prolong, untaken: expected ProlongedLate, got {p:?}"
    );
    ensure!(
        matches!(a.inspect().await?, LockState::Held { fencing: f, holds: 2, .. } if f == fencing),
        "ProlongedLate must keep fencing and holds"
    );
    let answered = Instant::now();
    tokio::time::sleep_until(answered + ms(520)).await;
    let r = a.release(None).await?;
    ensure!(
        r == ReleaseOutcome::ReleasedLate,
        "late release, untaken: expected ReleasedLate, got {r:?}"
    );
    ensure!(
        a.inspect().await? == LockState::Free,
        "ReleasedLate frees the key whatever the hold count"
    );
    acquired(b.obtain(LONG).await?, "obtain after a late release")?;
    Ok(())
}

/// Late prolong and late release after another owner took the lock: Lost, and the new
/// holder is untouched.
pub async fn late_calls_after_steal_are_lost(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "stolen").await;
    let old = acquired(a.obtain(ms(200)).await?, "obtain")?;
    let answered = Instant::now();
    tokio::time::sleep_until(answered + ms(260)).await;
    let new = acquired(b.obtain(LONG).await?, "steal after expiry")?;
    ensure!(new > old, "the thief's fencing {new} must exceed {old}");
    let p = a.prolong(LONG).await?;
    ensure!(
        p == ProlongOutcome::Lost,
        "prolong after steal: expected Lost, got {p:?}"
    );
    let r = a.release(None).await?;
    ensure!(
        r == ReleaseOutcome::Lost,
        "release after steal: expected Lost, got {r:?}"
    );
    ensure!(
        matches!(b.inspect().await?, LockState::Held { holder, fencing, .. } if holder == b.holder && fencing == new),
        "the thief must still hold the lock"
    );
    Ok(())
}

/// After the grace period the record may vanish: a late call then answers Lost, or Late if
/// the record is still there, never Prolonged.
pub async fn calls_past_grace_are_never_on_time(suite: &Suite) -> CaseResult {
    let (_, a, _) = pair(suite, "grace").await;
    acquired(a.obtain(ms(100)).await?, "obtain")?;
    tokio::time::sleep(ms(450)).await;
    let p = a.prolong(ms(100)).await?;
    ensure!(
        p != ProlongOutcome::Prolonged,
        "prolong past the grace period answered Prolonged"
    );
    Ok(())
}

/// A release with a cooldown blocks every obtain, the former holder's too, with no holder
/// named; prolong and release by the former holder are Lost; then the key is free.
pub async fn cooldown_blocks_everyone_then_frees(suite: &Suite) -> CaseResult {
    let (_, a, b) = pair(suite, "cooldown").await;
    acquired(a.obtain(LONG).await?, "obtain")?;
    let delay = ms(700);
    let sent = Instant::now();
    ensure!(
        a.release(Some(delay)).await? == ReleaseOutcome::Released,
        "release with cooldown"
    );
    let answered = Instant::now();
    for (who, owner) in [("former holder", &a), ("other owner", &b)] {
        match owner.obtain(LONG).await? {
            ObtainOutcome::Busy(busy) if Instant::now() < sent + delay => {
                ensure!(
                    busy.holder.is_none(),
                    "{who}: cooldown Busy must name no holder, got {:?}",
                    busy.holder
                );
                ensure!(
                    busy.remaining <= delay,
                    "{who}: cooldown remaining {:?} > {delay:?}",
                    busy.remaining
                );
            }
            other => {
                return Err(Failure(format!(
                    "{who} during cooldown: expected Busy, got {other:?}"
                )))
            }
        }
    }
    ensure!(
        matches!(a.inspect().await?, LockState::Cooling { .. }),
        "inspect during cooldown"
    );
    ensure!(
        a.prolong(LONG).await? == ProlongOutcome::Lost,
        "former holder's prolong during cooldown must be Lost"
    );
    ensure!(
        a.release(None).await? == ReleaseOutcome::Lost,
        "former holder's release during cooldown must be Lost"
    );
    tokio::time::sleep_until(answered + delay + ms(100)).await;
    acquired(b.obtain(LONG).await?, "obtain after the cooldown")?;
    Ok(())
}

/// A decrementing release ignores the cooldown.
pub async fn decrement_ignores_cooldown(suite: &Suite) -> CaseResult {
    let (_, a, _) = pair(suite, "decrement-cooldown").await;
    acquired(a.obtain(LONG).await?, "obtain")?;
    let _ = a.obtain(LONG).await?;
    let d = a.release(Some(LONG)).await?;
    ensure!(
        d == ReleaseOutcome::Decremented { holds: 1 },
        "expected Decremented, got {d:?}"
    );
    ensure!(
        a.release(None).await? == ReleaseOutcome::Released,
        "the last release frees, no cooldown pending"
    );
    ensure!(
        a.inspect().await? == LockState::Free,
        "no cooldown may be left from the decrement"
    );
    Ok(())
}

/// Fencing tokens strictly increase across release, expiry, re-obtain by the same token,
/// cooldown and out-of-band deletion; a stale holder's token is lower.
pub async fn fencing_grows_across_everything(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "fencing").await;
    let mut seen = vec![acquired(a.obtain(LONG).await?, "obtain")?];
    let _ = a.release(None).await?;
    seen.push(acquired(b.obtain(ms(150)).await?, "after release")?);
    tokio::time::sleep(ms(250)).await;
    seen.push(acquired(
        b.obtain(ms(150)).await?,
        "same token after expiry",
    )?);
    tokio::time::sleep(ms(250)).await;
    seen.push(acquired(a.obtain(LONG).await?, "other token after expiry")?);
    let _ = a.release(Some(ms(150))).await?;
    tokio::time::sleep(ms(250)).await;
    seen.push(acquired(b.obtain(LONG).await?, "after cooldown")?);
    let _ = backend.force_release(&b.key).await?;
    seen.push(acquired(
        a.obtain(LONG).await?,
        "after out-of-band deletion",
    )?);
    ensure!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must strictly increase: {seen:?}"
    );
    Ok(())
}

/// After an operator breaks a lock and another owner takes it, the old holder's prolong and
/// release are Lost and the new holder stays.
pub async fn force_release_then_retake_fences_the_old_holder(suite: &Suite) -> CaseResult {
    let (backend, a, b) = pair(suite, "force").await;
    let old = acquired(a.obtain(LONG).await?, "obtain")?;
    let broken = backend.force_release(&a.key).await?;
    ensure!(
        matches!(&broken, LockState::Held { holder, .. } if *holder == a.holder),
        "force_release returns what it broke, got {broken:?}"
    );
    ensure!(
        a.inspect().await? == LockState::Free,
        "free after force_release"
    );
    let new = acquired(b.obtain(LONG).await?, "retake")?;
    ensure!(new > old, "fencing after force release must grow");
    ensure!(
        a.release(None).await? == ReleaseOutcome::Lost,
        "old holder's release must be Lost"
    );
    ensure!(
        a.prolong(LONG).await? == ProlongOutcome::Lost,
        "old holder's prolong must be Lost"
    );
    ensure!(
        matches!(b.inspect().await?, LockState::Held { holder, .. } if holder == b.holder),
        "new holder stays"
    );
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
            eprintln!(
                "{}: namespaces_never_interfere: prefix-completion pairs skipped, the harness \
                 has no named namespaces (Harness::namespaced)",
                suite.name
            );
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

/// N tasks contend for one key for M rounds through the client layer: never two inside at
/// once, fencing strictly increasing in acquisition order, every acquisition released.
pub async fn exclusion_under_contention(suite: &Suite) -> CaseResult {
    const TASKS: usize = 16;
    const ROUNDS: usize = 5;
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend).with_retry(Retry::exponential(ms(1), ms(20)).notified());
    let inside = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (locker, inside, order) = (locker.clone(), Arc::clone(&inside), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = match locker
                    .lock("contended")
                    .ttl(LONG)
                    .wait(ms(60_000))
                    .obtain()
                    .await?
                {
                    Attempt::Obtained(g) => g,
                    Attempt::Busy(b) => return Err(Failure(format!("gave up waiting: {b}"))),
                };
                ensure!(
                    inside.fetch_add(1, Ordering::SeqCst) == 0,
                    "two holders inside at once"
                );
                order
                    .lock()
                    .map_err(|_| Failure("poisoned".into()))?
                    .push(guard.fencing());
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                let r = guard.release().await?;
                ensure!(
                    r == ReleaseOutcome::Released,
                    "release under contention: {r:?}"
                );
            }
            Ok::<(), Failure>(())
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| Failure(format!("task panicked: {e}")))??;
    }
    let order = order
        .lock()
        .map_err(|_| Failure("poisoned".into()))?
        .clone();
    ensure!(
        order.len() == TASKS * ROUNDS,
        "{} acquisitions, expected {}",
        order.len(),
        TASKS * ROUNDS
    );
    ensure!(
        order.windows(2).all(|w| w[0] < w[1]),
        "fencing not increasing in acquisition order: {order:?}"
    );
    Ok(())
}

/// Many locks held at once (distinct keys), then all released: no pool exhaustion, no leak.
pub async fn many_locks_held_at_once(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    let mut guards = Vec::new();
    for i in 0..200 {
        match locker
            .lock(format!("many-{i}"))
            .ttl(LONG)
            .try_obtain()
            .await?
        {
            Attempt::Obtained(g) => guards.push(g),
            Attempt::Busy(b) => return Err(Failure(format!("key many-{i} busy: {b}"))),
        }
    }
    let fencings: HashSet<_> = guards
        .iter()
        .map(|g| (g.key().clone(), g.fencing()))
        .collect();
    ensure!(fencings.len() == 200, "distinct locks");
    ensure!(locker.held_count() == 200, "registry counts 200 held");
    let released = locker.release_all().await;
    ensure!(
        released
            .iter()
            .all(|(_, r)| matches!(r, Ok(ReleaseOutcome::Released))),
        "release_all: {:?}",
        released
            .iter()
            .find(|(_, r)| !matches!(r, Ok(ReleaseOutcome::Released)))
    );
    drop(guards);
    ensure!(
        locker
            .lock("many-7")
            .try_obtain()
            .await?
            .obtained()
            .is_some(),
        "free after release_all"
    );
    Ok(())
}

/// A waiting obtain succeeds once the holder releases, and a wait on a lock that stays held
/// ends within its deadline plus a small bound.
pub async fn waiting_obtain_honours_release_and_deadline(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    let holder = take(&locker, "wait", LONG, false).await?;
    let start = Instant::now();
    let got = locker.lock("wait").wait(ms(400)).obtain().await?;
    let waited = start.elapsed();
    ensure!(got.is_busy(), "a wait on a held lock must end Busy");
    ensure!(
        waited >= ms(400) && waited < ms(1_400),
        "wait of 400 ms ended after {waited:?}"
    );
    let start = Instant::now();
    let got = locker
        .lock("wait")
        .wait(ms(5_000))
        .dont_queue()
        .obtain()
        .await?;
    ensure!(
        got.is_busy() && start.elapsed() < ms(1_000),
        "dont_queue must give up at once on a 30 s holder"
    );
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("wait").wait(ms(20_000)).obtain().await })
    };
    tokio::time::sleep(ms(200)).await;
    let _ = holder.release().await?;
    let got = waiter
        .await
        .map_err(|e| Failure(format!("waiter panicked: {e}")))??;
    ensure!(
        got.obtained().is_some(),
        "the waiter must obtain after the release"
    );
    Ok(())
}

/// Cancelling a waiting obtain (dropping its future) ends it promptly and leaves nothing:
/// after the holder releases, another owner obtains at once.
pub async fn cancelled_wait_leaves_nothing_behind(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    let holder = take(&locker, "cancel", LONG, false).await?;
    let cut = tokio::time::timeout(ms(300), locker.lock("cancel").wait(ms(20_000)).obtain()).await;
    ensure!(
        cut.is_err(),
        "the wait should still be running when cancelled"
    );
    let _ = holder.release().await?;
    tokio::time::sleep(ms(100)).await;
    let got = locker.lock("cancel").try_obtain().await?;
    ensure!(
        got.obtained().is_some(),
        "a cancelled waiter left a hold behind"
    );
    Ok(())
}

/// The watchdog keeps a lock past many ttls; the lost signal does not fire on release, fires
/// within a bound when the lock is stolen, and at once for a guard already lost.
pub async fn lost_signal_fires_only_when_lost(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(Arc::clone(&backend));
    let guard = take(&locker, "watch", ms(600), true).await?;
    tokio::time::sleep(ms(1_500)).await;
    ensure!(!guard.is_lost(), "the watchdog let the lock go");
    ensure!(
        locker.lock("watch").try_obtain().await?.is_busy(),
        "held past 2.5 ttls by the watchdog"
    );
    let lost = guard.lost_token();
    let _ = guard.release().await?;
    tokio::time::sleep(ms(700)).await;
    ensure!(!lost.is_cancelled(), "lost fired on a normal release");

    let guard = take(&locker, "watch", ms(600), true).await?;
    let _ = backend.force_release(guard.key()).await?;
    let _thief = take(&locker, "watch", LONG, false).await?;
    let start = Instant::now();
    tokio::time::timeout(ms(2_000), guard.lost())
        .await
        .map_err(|_| Failure("lost did not fire within 2 s of a steal".into()))?;
    ensure!(start.elapsed() < ms(2_000), "lost fired late");
    tokio::time::timeout(ms(50), guard.lost())
        .await
        .map_err(|_| Failure("lost must resolve at once when already lost".into()))?;
    Ok(())
}

/// A guard dropped without release does not hold the lock for ever.
pub async fn dropped_guard_does_not_hold_forever(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    drop(
        locker
            .lock("dropped")
            .ttl(LONG)
            .watchdog()
            .try_obtain()
            .await?
            .obtained(),
    );
    let got = locker.lock("dropped").wait(ms(5_000)).obtain().await?;
    ensure!(
        got.obtained().is_some(),
        "a dropped guard still holds the lock after 5 s"
    );
    Ok(())
}

/// A holder paused longer than its ttl: another owner takes the lock with a higher fencing
/// token, the old holder's prolong and release are Lost, its lost signal fires, and a
/// resource that remembers the highest token refuses its stale write.
pub async fn paused_holder_is_fenced_out(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let locker = Locker::new(backend);
    let stale = take(&locker, "paused", ms(300), false).await?;
    tokio::time::sleep(ms(500)).await;
    let fresh = take(&locker, "paused", LONG, false).await?;
    let mut resource = Fencing(0);
    let mut write = |f: Fencing| {
        let ok = f >= resource;
        resource = resource.max(f);
        ok
    };
    ensure!(write(fresh.fencing()), "the new holder's write");
    ensure!(
        !write(stale.fencing()),
        "the stale holder's token must be lower: {} vs {}",
        stale.fencing(),
        fresh.fencing()
    );
    let p = stale.prolongate(LONG).await?;
    ensure!(
        p == ProlongOutcome::Lost,
        "stale prolong: expected Lost, got {p:?}"
    );
    ensure!(stale.is_lost(), "lost must fire after a Lost prolong");
    ensure!(
        stale.release().await? == ReleaseOutcome::Lost,
        "stale release must be Lost"
    );
    ensure!(
        fresh.release().await? == ReleaseOutcome::Released,
        "the new holder is untouched"
    );
    Ok(())
}

/// After the backend loses its data, a holder's prolong answers Lost (never Prolonged) and
/// fencing still grows.
pub async fn data_loss_is_lost_and_fencing_still_grows(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let a = Owner::new(&backend, "data-loss", "a");
    let b = Owner::new(&backend, "data-loss", "b");
    let before = acquired(a.obtain(LONG).await?, "obtain")?;
    if !suite.harness.lose_data(&backend).await {
        return Err(Failure(
            "the harness cannot make the backend lose its data; implement Harness::lose_data"
                .into(),
        ));
    }
    let p = retry_once(|| a.prolong(LONG)).await?;
    ensure!(
        p == ProlongOutcome::Lost,
        "prolong after data loss: expected Lost, got {p:?}"
    );
    let after = acquired(
        retry_once(|| b.obtain(LONG)).await?,
        "obtain after data loss",
    )?;
    ensure!(
        after > before,
        "fencing after data loss {after} does not exceed {before}"
    );
    Ok(())
}

/// After the backend's connections are cut, every call either answers correctly or errors,
/// and a retry of the same call is safe.
pub async fn dropped_connections_leave_a_safe_state(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let a = Owner::new(&backend, "cut", "a");
    let b = Owner::new(&backend, "cut", "b");
    let fencing = acquired(a.obtain(LONG).await?, "obtain")?;
    if !suite.harness.drop_connections(&backend).await {
        ensure!(
            !backend.capabilities().cross_host,
            "a networked backend must let the harness cut its connections (Harness::drop_connections)"
        );
        return Ok(());
    }
    let p = retry_once(|| a.prolong(LONG)).await?;
    ensure!(
        p == ProlongOutcome::Prolonged,
        "prolong after reconnect: expected Prolonged, got {p:?}"
    );
    ensure!(
        busy(&retry_once(|| b.obtain(LONG)).await?),
        "the lock must survive a dropped connection"
    );
    ensure!(
        matches!(retry_once(|| a.inspect()).await?, LockState::Held { fencing: f, .. } if f == fencing),
        "fencing changed across a reconnect"
    );
    ensure!(
        retry_once(|| a.release(None)).await? == ReleaseOutcome::Released,
        "release after reconnect"
    );
    Ok(())
}

async fn retry_once<T, F, Fut>(mut call: F) -> lock_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lock_core::Result<T>>,
{
    match call().await {
        Err(e) if e.is_retry_safe() => {
            tokio::time::sleep(ms(200)).await;
            call().await
        }
        other => other,
    }
}
