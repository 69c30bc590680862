//! Listing: who holds what under a prefix ([`LockBackend::list_keys`], and
//! [`lock_core::listing::list`] over it). A listing agrees with `inspect` key by key, shows
//! what is live and nothing else, and its pages cover every key exactly once in key order
//! (at least once, for a backend that walks by a server's cursor) while keys come and go.

use lock_core::backend::{Cursor, KeysRequest, Listing};
use lock_core::listing;

use super::*;
use crate::Suite;

/// Keys in every state under a prefix of the case's own, listed two per page: the keys
/// with a hold, a cooldown or a writer's marker show, each with the state `inspect` gives
/// (its times aside), and nothing else does: a key released, a key expired past its grace,
/// a key outside the prefix. Pages hold at most their limit, in key order where the
/// backend says so. A prefix with no keys lists nothing, and no error. A backend that
/// cannot list says so with `Unsupported`, for both the names and the listing.
pub async fn listing_agrees_with_inspect(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let caps = backend.capabilities();
    let prefix = format!("listing-{:x}/", fastrand::u64(..));
    let all = KeysRequest {
        prefix: &prefix,
        cursor: None,
        limit: 2,
    };
    if caps.listing == Listing::Unsupported {
        for answer in [
            backend.list_keys(all).await.err(),
            listing::list(&*backend, all).await.err(),
        ] {
            ensure!(
                answer.as_ref().map(lock_core::Error::kind) == Some(ErrorKind::Unsupported),
                "a backend whose capabilities say it cannot list answered {answer:?}, not \
                 Unsupported"
            );
        }
        return Ok(());
    }
    let key = |name: &str| format!("{prefix}{name}");
    let owner = |name: &str, who: &str| Owner::new(&backend, &key(name), who);
    let short = Duration::from_millis(300);
    let expired = owner("expired", "expires");
    acquired(expired.obtain(short).await?, "a fresh key")?;
    let expired_at = Instant::now();

    let mut live = vec![key("held"), key("twice"), key("cooling")];
    acquired(owner("held", "holder").obtain(LONG).await?, "a fresh key")?;
    let twice = owner("twice", "reentrant");
    acquired(twice.obtain(LONG).await?, "a fresh key")?;
    ensure!(
        matches!(twice.obtain(LONG).await?, ObtainOutcome::Reacquired { .. }),
        "the same token's second obtain was not Reacquired"
    );
    let cooling = owner("cooling", "cools");
    acquired(cooling.obtain(LONG).await?, "a fresh key")?;
    cooling.release(Some(LONG)).await?;
    let released = owner("released", "releases");
    acquired(released.obtain(LONG).await?, "a fresh key")?;
    released.release(None).await?;
    let outside = Owner::new(
        &backend,
        &format!("{}-outside", prefix.trim_end_matches('/')),
        "x",
    );
    acquired(outside.obtain(LONG).await?, "a fresh key")?;
    if caps.shared {
        let permits = lock_core::Mode::shared(3, 1)?;
        for who in ["reader a", "reader b"] {
            acquired(
                owner("shared", who).obtain_as(LONG, permits, false).await?,
                "a share of a semaphore with room",
            )?;
        }
        acquired(
            owner("marked", "reader")
                .obtain_as(LONG, lock_core::Mode::READ, false)
                .await?,
            "a fresh read lock",
        )?;
        let writer = owner("marked", "writer");
        ensure!(
            busy(
                &writer
                    .obtain_as(LONG, lock_core::Mode::Exclusive, true)
                    .await?
            ),
            "a writer beside a reader was not Busy"
        );
        live.extend([key("shared"), key("marked")]);
    }
    live.sort();
    // The expired key past its ttl and its grace (the ttl), as the server may round them.
    let gone = caps.expiry.longest(short) * 2 + Duration::from_millis(300);
    tokio::time::sleep_until(expired_at + gone).await;

    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<Cursor> = None;
    for page_number in 0.. {
        ensure!(
            page_number < 100,
            "the listing of 5 keys took over 100 pages"
        );
        let page = listing::list(
            &*backend,
            KeysRequest {
                prefix: &prefix,
                cursor: cursor.as_ref(),
                limit: 2,
            },
        )
        .await?;
        if caps.listing == Listing::InKeyOrder {
            ensure!(
                page.locks.len() <= 2,
                "a page asked for 2 keys held {}",
                page.locks.len()
            );
        }
        for listed in &page.locks {
            let name = listed.key.as_str().to_owned();
            ensure!(
                name.starts_with(&prefix),
                "the listing of {prefix:?} showed {name:?}, outside the prefix"
            );
            let inspected = backend.inspect(&listed.key).await?;
            ensure!(
                timeless(&listed.state) == timeless(&inspected),
                "the listing showed {name:?} as {:?}, and inspect as {inspected:?}",
                listed.state
            );
            seen.push(name);
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if caps.listing == Listing::InKeyOrder {
        ensure!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "a backend that lists in key order listed {seen:?}"
        );
    }
    seen.sort();
    seen.dedup();
    ensure!(
        seen == live,
        "the listing of {prefix:?} showed {seen:?}; the keys with something live are {live:?} \
         (a key released or expired past its grace must not show, every live one must)"
    );
    let nothing = format!("{}-none/", prefix.trim_end_matches('/'));
    let empty = listing::list(
        &*backend,
        KeysRequest {
            prefix: &nothing,
            cursor: None,
            limit: 2,
        },
    )
    .await?;
    ensure!(
        empty.locks.is_empty(),
        "a prefix with no keys listed {:?}",
        empty.locks
    );
    Ok(())
}

/// Forty keys held under a prefix, walked three names a page while other keys of the
/// prefix are taken and released all along: every key held throughout shows exactly once
/// (at least once, for a backend that walks by a server's cursor), in key order where the
/// backend says so, and no page holds a name outside the prefix.
pub async fn listing_pages_cover_every_key_while_keys_come_and_go(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let caps = backend.capabilities();
    if caps.listing == Listing::Unsupported {
        return Ok(());
    }
    let prefix = format!("pages-{:x}/", fastrand::u64(..));
    let mut stable = Vec::new();
    for i in 0..40 {
        let name = format!("{prefix}stable-{i:02}");
        acquired(
            Owner::new(&backend, &name, "stays").obtain(LONG).await?,
            "a fresh key",
        )?;
        stable.push(name);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (backend, prefix, stop) = (Arc::clone(&backend), prefix.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut round = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // Names between the stable ones and after them.
                let name = format!("{prefix}stable-{:02}-churn-{round}", round % 40);
                let o = Owner::new(&backend, &name, "comes and goes");
                acquired(o.obtain(LONG).await?, "a fresh key")?;
                tokio::task::yield_now().await;
                o.release(None).await?;
                round += 1;
            }
            Ok::<u32, Failure>(round)
        })
    };
    let walk = async {
        let mut names: Vec<String> = Vec::new();
        let mut cursor: Option<Cursor> = None;
        for page_number in 0.. {
            ensure!(page_number < 2_000, "the walk took over 2,000 pages");
            let page = backend
                .list_keys(KeysRequest {
                    prefix: &prefix,
                    cursor: cursor.as_ref(),
                    limit: 3,
                })
                .await?;
            if caps.listing == Listing::InKeyOrder {
                ensure!(
                    page.keys.len() <= 3,
                    "a page asked for 3 names held {}",
                    page.keys.len()
                );
            }
            names.extend(page.keys.iter().map(|k| k.as_str().to_owned()));
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok::<_, Failure>(names),
            }
        }
        unreachable!("the loop returns or fails")
    };
    let walked = walk.await;
    stop.store(true, Ordering::Relaxed);
    let rounds = churn
        .await
        .map_err(|e| Failure(format!("the churning task: {e}")))??;
    let names = walked?;
    if let Some(stray) = names.iter().find(|n| !n.starts_with(&prefix)) {
        return Err(Failure(format!("the walk of {prefix:?} showed {stray:?}")));
    }
    if caps.listing == Listing::InKeyOrder {
        ensure!(
            names.windows(2).all(|w| w[0] < w[1]),
            "a walk in key order (while {rounds} keys came and went) listed names twice or out \
             of order: {names:?}"
        );
    }
    for name in &stable {
        let times = names.iter().filter(|n| *n == name).count();
        ensure!(
            times >= 1,
            "{name:?}, held throughout the walk, was not listed (while {rounds} keys came and \
             went): {names:?}"
        );
    }
    Ok(())
}

/// A state with its times set to zero: what a listing and a later `inspect` must agree on.
fn timeless(state: &LockState) -> LockState {
    let mut state = state.clone();
    match &mut state {
        LockState::Free => {}
        LockState::Held { remaining, .. } | LockState::Cooling { remaining } => {
            *remaining = Duration::ZERO;
        }
        LockState::Shared {
            holds,
            writer_waiting,
            ..
        } => {
            for h in holds {
                h.remaining = Duration::ZERO;
            }
            if let Some(w) = writer_waiting {
                *w = Duration::ZERO;
            }
        }
    }
    state
}

/// Waiters show in the listing while they wait and leave it when their wait ends: two
/// obtains wait for a held key (counted as two tasks of one process once they have waited
/// [`ANNOUNCE_AFTER`](lock_core::waiting::ANNOUNCE_AFTER)); one is cancelled and the count
/// drops to one; the holder releases, the other obtains, and nobody is counted any more.
/// The waiting records themselves never show as locks. On a backend without shared holds
/// nothing is recorded, and nothing shows.
pub async fn waiters_show_in_the_listing_while_they_wait(suite: &Suite) -> CaseResult {
    let backend = suite.harness.backend().await;
    let caps = backend.capabilities();
    if caps.listing == Listing::Unsupported || !caps.shared {
        return Ok(());
    }
    let prefix = format!("waiters-{:x}/", fastrand::u64(..));
    let key = format!("{prefix}job");
    let holder = Owner::new(&backend, &key, "holder");
    acquired(holder.obtain(LONG).await?, "a fresh key")?;
    let locker = Locker::new(Arc::clone(&backend));
    let wait = |who: &'static str| {
        let (locker, key) = (locker.clone(), key.clone());
        tokio::spawn(async move {
            let builder = locker.lock(&key).ttl(LONG).wait(LONG);
            let builder = builder.metadata(who);
            builder.obtain().await
        })
    };
    let (first, second) = (
        wait("waits, then obtains"),
        wait("waits, then is cancelled"),
    );
    let waiting = || async {
        let page = listing::list(
            &*backend,
            KeysRequest {
                prefix: "",
                cursor: None,
                limit: KeysRequest::MAX_LIMIT,
            },
        )
        .await?;
        if let Some(record) = page
            .locks
            .iter()
            .find(|l| l.key.as_str().starts_with('\u{1}'))
        {
            return Err(Failure(format!(
                "a waiting record listed as a lock: {record:?}"
            )));
        }
        let ours = page.locks.into_iter().find(|l| l.key.as_str() == key);
        Ok::<_, Failure>(ours.and_then(|l| l.waiting).map(|w| (w.tasks, w.processes)))
    };
    let until = |want: Option<(u32, u32)>, what: &'static str| {
        let waiting = &waiting;
        async move {
            // The records come after ANNOUNCE_AFTER and go with a release: well within the
            // records' ttl, so that a record left to expire is not taken for one released.
            let deadline = Instant::now() + lock_core::waiting::RECORD_TTL * 2 / 5;
            loop {
                let now = waiting().await?;
                if now == want {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err(Failure(format!(
                        "{what}: the listing showed waiters {now:?} (tasks, processes), not {want:?}"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    until(Some((2, 1)), "two obtains waiting").await?;
    second.abort();
    let _ = second.await;
    until(Some((1, 1)), "one waiter cancelled").await?;
    holder.release(None).await?;
    let guard = first
        .await
        .map_err(|e| Failure(format!("the waiting task: {e}")))??
        .obtained()
        .ok_or_else(|| Failure("the waiter did not obtain the released key".into()))?;
    until(None, "the wait over").await?;
    guard.release().await?;
    Ok(())
}
