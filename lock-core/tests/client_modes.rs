//! `LockGuard::downgrade` and `LockGuard::upgrade` through the client layer, over the memory
//! backend under paused time: what they hold, what they refuse before any I/O, and what a
//! cancelled change or a lost reply leaves.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{async_trait, ObtainRequest};
use lock_core::{
    Attempt, BusyReason, Error, ErrorKind, Key, LockBackend, LockState, Locker, MemoryBackend,
    Mode, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome, Result,
};
use test_servers::locks::{held, state};

/// The memory backend behind a network: obtains travel `obtain_in_flight` before the
/// server applies them, whether or not their caller still waits; a reply can be lost.
#[derive(Debug, Default)]
struct Wire {
    inner: Arc<MemoryBackend>,
    obtain_in_flight: Duration,
    /// The next obtain is applied, and its reply lost.
    lose_next_reply: AtomicBool,
    /// The next obtain travels this many milliseconds instead (a second pooled connection
    /// that is slower than the first): later calls overtake it.
    slow_next_obtain: AtomicU64,
    obtains: AtomicUsize,
}

#[async_trait]
impl Layer for Wire {
    fn inner(&self) -> &dyn LockBackend {
        &*self.inner
    }

    fn name(&self) -> &'static str {
        "wire"
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.obtains.fetch_add(1, Ordering::SeqCst);
        let delay = match self.slow_next_obtain.swap(0, Ordering::SeqCst) {
            0 => self.obtain_in_flight,
            slow => ms(slow),
        };
        let inner = Arc::clone(&self.inner);
        let (key, token, ttl, holder) = (req.key.clone(), *req.token, req.ttl, req.holder.clone());
        let (mode, queue, change) = (req.mode, req.queue, req.change);
        let applied = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut req = ObtainRequest::new(&key, &token, ttl, &holder)
                .with_mode(mode)
                .with_queue(queue);
            req.change = change;
            inner.obtain(req).await
        });
        let outcome = applied.await.expect("the server task ran")?;
        if self.lose_next_reply.swap(false, Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "wire",
                Operation::Obtain,
                "the reply was lost",
            ));
        }
        Ok(outcome)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn wire(obtain_in_flight: Duration) -> (Arc<Layered<Wire>>, Locker) {
    let wire = Arc::new(Layered(Wire {
        obtain_in_flight,
        ..Wire::default()
    }));
    (Arc::clone(&wire), Locker::new(wire as Arc<dyn LockBackend>))
}

fn shared_holds(state: &LockState) -> usize {
    match state {
        LockState::Shared { holds, .. } => holds.len(),
        other => panic!("expected shared holds, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_writer_downgrades_lets_readers_in_and_upgrades_once_alone() {
    let (_, locker) = wire(Duration::ZERO);
    let mut writer = held(locker.write("doc")).await;
    let written = writer.fencing();
    let busy = locker.read("doc").try_obtain().await.unwrap();
    assert!(matches!(busy, Attempt::Busy(ref b) if b.reason == BusyReason::Held));

    assert!(writer.downgrade().await.unwrap().obtained().is_some());
    assert_eq!(writer.mode(), Mode::READ);
    assert_eq!(
        writer.fencing(),
        written,
        "a downgrade keeps the fencing token"
    );
    let reader = held(locker.read("doc")).await;
    assert!(reader.fencing() > written);

    // Up again: busy while the reader holds on, and the guard keeps its read hold.
    match writer.upgrade().await.unwrap() {
        Attempt::Busy(b) => assert_eq!((b.reason, b.holders), (BusyReason::Shared, 1)),
        Attempt::Obtained(()) => panic!("upgraded beside a live reader"),
    }
    assert_eq!(writer.mode(), Mode::READ);
    assert_eq!(shared_holds(&state(&locker, "doc").await), 2);
    assert!(!writer.is_lost());

    assert_eq!(reader.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(writer.upgrade().await.unwrap().obtained().is_some());
    assert_eq!(writer.mode(), Mode::Exclusive);
    assert!(
        writer.fencing() > written,
        "an upgrade gets a fresh fencing token"
    );
    match state(&locker, "doc").await {
        LockState::Held { fencing, holds, .. } => {
            assert_eq!((fencing, holds), (writer.fencing(), 1))
        }
        other => panic!("expected the upgraded hold, got {other:?}"),
    }
    let busy = locker.read("doc").try_obtain().await.unwrap();
    assert!(matches!(busy, Attempt::Busy(ref b) if b.reason == BusyReason::Held));
    assert_eq!(writer.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(state(&locker, "doc").await, LockState::Free);
}

#[tokio::test(start_paused = true)]
async fn mode_changes_that_cannot_apply_are_refused_before_io() {
    let (wire, locker) = wire(Duration::ZERO);
    let mut reader = held(locker.read("r")).await;
    let mut writer = held(locker.write("w")).await;
    let sent = wire.obtains.load(Ordering::SeqCst);

    let refused = |e: Error, why: &str| {
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(why), "{e}");
    };
    refused(reader.downgrade().await.unwrap_err(), "already holds");
    refused(writer.upgrade().await.unwrap_err(), "already holds");
    let again = writer.reenter().await.unwrap().obtained().unwrap();
    let sent = sent + 1;
    refused(writer.downgrade().await.unwrap_err(), "reentrant guards");
    assert_eq!(
        again.release().await.unwrap(),
        ReleaseOutcome::Decremented { holds: 1 }
    );
    assert_eq!(
        wire.obtains.load(Ordering::SeqCst),
        sent,
        "nothing was sent"
    );

    // A guard whose validity ran out is lost: no change brings it back.
    tokio::time::sleep(ms(31_000)).await;
    assert!(writer.is_lost());
    refused(writer.downgrade().await.unwrap_err(), "lost");
    assert_eq!(
        wire.obtains.load(Ordering::SeqCst),
        sent,
        "nothing was sent"
    );
    drop((reader, writer));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_downgrade_keeps_the_hold_and_counts_as_shared() {
    let (wire, locker) = wire(ms(20));
    let mut guard = held(locker.write("k")).await;
    let fencing = guard.fencing();
    // Cut off before the server applied it: it still applies, and nothing gives it back.
    let cut = tokio::time::timeout(ms(5), guard.downgrade()).await;
    assert!(cut.is_err(), "the downgrade was cut off");
    assert_eq!(
        guard.mode(),
        Mode::READ,
        "counted as shared from the moment it was sent"
    );
    tokio::time::sleep(ms(100)).await;
    assert_eq!(
        shared_holds(&state(&locker, "k").await),
        1,
        "the hold is still there"
    );
    assert_eq!(guard.fencing(), fencing);
    // Whether it applied is unknown to the guard: no further change starts.
    let sent = wire.obtains.load(Ordering::SeqCst);
    let e = guard.upgrade().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("never got its answer"), "{e}");
    assert_eq!(wire.obtains.load(Ordering::SeqCst), sent);
    assert!(!guard.is_lost());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(state(&locker, "k").await, LockState::Free);
}

#[tokio::test(start_paused = true)]
async fn an_upgrade_whose_reply_is_lost_claims_nothing_and_still_releases() {
    let (wire, locker) = wire(ms(1));
    let mut guard = held(locker.read("k")).await;
    let fencing = guard.fencing();
    wire.lose_next_reply.store(true, Ordering::SeqCst);
    let e = guard.upgrade().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    // The backend upgraded it; the guard claims only its read hold and its old token.
    assert!(matches!(state(&locker, "k").await, LockState::Held { .. }));
    assert_eq!((guard.mode(), guard.fencing()), (Mode::READ, fencing));
    assert!(
        guard.upgrade().await.is_err(),
        "no second change on an unknown state"
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(state(&locker, "k").await, LockState::Free);
}

#[tokio::test(start_paused = true)]
async fn a_downgraded_guard_is_renewed_by_its_watchdog() {
    let (_, locker) = wire(ms(1));
    let mut guard = locker
        .write("k")
        .ttl(ms(1_000))
        .watchdog()
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert!(guard.downgrade().await.unwrap().obtained().is_some());
    tokio::time::sleep(ms(5_000)).await;
    assert!(!guard.is_lost(), "the watchdog kept the read hold");
    assert_eq!(shared_holds(&state(&locker, "k").await), 1);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// Whether another owner can take `key` in `mode` now (given back at once if it could).
async fn another_gets(locker: &Locker, key: &str, mode: Mode) -> bool {
    let other = Locker::new(Arc::clone(locker.backend()));
    let builder = match mode {
        Mode::Exclusive => other.write(key),
        _ => other.read(key),
    };
    match builder.try_obtain().await.unwrap() {
        Attempt::Obtained(guard) => {
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            true
        }
        Attempt::Busy(_) => false,
    }
}

/// A reentrant read obtain cut off by its caller runs on; an upgrade sent after it must
/// not be overtaken by it (landing on the write hold, it would turn it back into a read
/// hold, and its give-back would free the key under a guard that believes it writes).
#[tokio::test(start_paused = true)]
async fn an_upgrade_waits_for_a_cut_off_reenter_still_in_flight() {
    let (wire, locker) = wire(Duration::ZERO);
    let mut guard = held(locker.read("k")).await;
    wire.slow_next_obtain.store(300, Ordering::SeqCst);
    let cut = tokio::time::timeout(ms(50), guard.reenter()).await;
    assert!(cut.is_err(), "the reenter was cut off");
    assert!(guard.upgrade().await.unwrap().obtained().is_some());
    assert_eq!(guard.mode(), Mode::Exclusive);
    tokio::time::sleep(ms(1_000)).await;
    assert!(!guard.is_lost());
    match state(&locker, "k").await {
        LockState::Held { fencing, holds, .. } => assert_eq!(
            (fencing, holds),
            (guard.fencing(), 1),
            "the backend holds the key for the upgraded guard alone"
        ),
        other => panic!("the guard believes it writes, and the backend has {other:?}"),
    }
    assert!(!another_gets(&locker, "k", Mode::Exclusive).await);
    assert!(!another_gets(&locker, "k", Mode::READ).await);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(state(&locker, "k").await, LockState::Free);
}

/// The same with a downgrade: a cut-off reentrant write obtain landing after it would
/// upgrade the read hold behind the guard's back (and free it with its give-back).
#[tokio::test(start_paused = true)]
async fn a_downgrade_waits_for_a_cut_off_reenter_still_in_flight() {
    let (wire, locker) = wire(Duration::ZERO);
    let mut guard = held(locker.write("k")).await;
    wire.slow_next_obtain.store(300, Ordering::SeqCst);
    let cut = tokio::time::timeout(ms(50), guard.reenter()).await;
    assert!(cut.is_err(), "the reenter was cut off");
    assert!(guard.downgrade().await.unwrap().obtained().is_some());
    assert_eq!(guard.mode(), Mode::READ);
    tokio::time::sleep(ms(1_000)).await;
    assert!(!guard.is_lost());
    assert_eq!(shared_holds(&state(&locker, "k").await), 1);
    assert!(
        !another_gets(&locker, "k", Mode::Exclusive).await,
        "a writer beside a read hold"
    );
    assert!(another_gets(&locker, "k", Mode::READ).await);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(state(&locker, "k").await, LockState::Free);
}

/// A mode change cut off by its caller runs on; the guard's release sent after it frees
/// the key only once the change landed, so the change never grants the key to nobody.
#[tokio::test(start_paused = true)]
async fn a_release_waits_for_a_cut_off_mode_change_still_in_flight() {
    for (from, to) in [(Mode::Exclusive, Mode::READ), (Mode::READ, Mode::Exclusive)] {
        let (wire, locker) = wire(Duration::ZERO);
        let mut guard = match from {
            Mode::Exclusive => held(locker.write("k")).await,
            _ => held(locker.read("k")).await,
        };
        wire.slow_next_obtain.store(300, Ordering::SeqCst);
        let change = async {
            match to {
                Mode::Exclusive => guard.upgrade().await,
                _ => guard.downgrade().await,
            }
        };
        assert!(
            tokio::time::timeout(ms(50), change).await.is_err(),
            "the change to {to} was cut off"
        );
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        // Long after the change landed, too.
        tokio::time::sleep(ms(1_000)).await;
        assert_eq!(
            state(&locker, "k").await,
            LockState::Free,
            "released after a cut-off change to {to}: the key must be free"
        );
        assert!(another_gets(&locker, "k", Mode::Exclusive).await);
    }
}

/// A guard is lost for a mode change when either its lost signal fired (a prolong answered
/// `Lost`, its validity still running) or its validity ran out (nobody having asked yet):
/// each alone refuses the change before any I/O.
#[tokio::test(start_paused = true)]
async fn a_change_is_refused_when_the_guard_is_lost_either_way() {
    let (wire, locker) = wire(Duration::ZERO);
    // Lost by an answer, with time left.
    let mut taken = held(locker.write("taken")).await;
    wire.inner
        .force_release(&Key::new("taken").unwrap())
        .await
        .unwrap();
    assert_eq!(
        taken.prolongate(ms(30_000)).await.unwrap(),
        ProlongOutcome::Lost
    );
    assert!(taken.remaining() > Duration::ZERO);
    // Run out, with nobody having looked.
    let mut expired = held(locker.write("expired").ttl(ms(100))).await;
    tokio::time::sleep(ms(200)).await;
    let sent = wire.obtains.load(Ordering::SeqCst);
    for guard in [&mut taken, &mut expired] {
        let e = guard.downgrade().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("lost"), "{e}");
    }
    assert_eq!(
        wire.obtains.load(Ordering::SeqCst),
        sent,
        "nothing was sent"
    );
    drop((taken, expired));
}

/// Issue #35, item 3: an upgrade of a read hold whose share is gone (force-released, and a
/// writer held the key in between) answered `Obtained` with a fresh fencing token and the
/// guard not lost: a lost update. Now the backend changes the guard's own share or nothing,
/// and the guard learns it is lost. The same for a downgrade of a write lock that is gone.
#[tokio::test]
async fn a_change_of_a_hold_that_is_gone_loses_the_guard() {
    let (wire, locker) = wire(Duration::ZERO);
    let key = Key::new("gone").unwrap();
    let mut reader = held(locker.read("gone")).await;
    wire.inner.force_release(&key).await.unwrap();
    let writer = held(locker.write("gone")).await;
    let _ = writer.release().await.unwrap();
    let e = reader.upgrade().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(e.to_string().contains("obtain the lock anew"), "{e}");
    assert!(reader.is_lost());
    assert!(
        tokio::time::timeout(ms(1_000), reader.lost()).await.is_ok(),
        "the lost signal fired"
    );
    assert_eq!(wire.inner.inspect(&key).await.unwrap(), LockState::Free);
    drop(reader);

    let mut writer = held(locker.write("gone")).await;
    wire.inner.force_release(&key).await.unwrap();
    let e = writer.downgrade().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(writer.is_lost());
    assert_eq!(wire.inner.inspect(&key).await.unwrap(), LockState::Free);
}
