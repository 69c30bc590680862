//! What an observer and `Locker::stats` see: every obtain with how it ended, every hold
//! with how it ended, losses with their cause, the watchdog's batches, backend errors.
//! Memory backend underneath (behind a switch that makes it fail or hang), time paused.

use std::future::pending;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{
    async_trait, Capabilities, ObtainRequest, ProlongRequest, ReleaseRequest,
};
use lock_core::observe::{Event, HoldEnd, LostCause, Observer, ObtainEnd};
use lock_core::{
    Error, ErrorKind, LockBackend, LockState, Locker, MemoryBackend, ObtainOutcome, Operation,
    ProlongOutcome, ReleaseOutcome, Result, Retry,
};
use test_servers::locks::{held, state};

/// An event, owned.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    ObtainStarted(String),
    ObtainEnded {
        key: String,
        end: ObtainEnd,
        waited: Duration,
        attempts: u32,
    },
    HoldStarted(String),
    HoldEnded {
        key: String,
        end: HoldEnd,
        held: Duration,
    },
    Lost(String, LostCause),
    Renewal {
        locks: usize,
        failed: usize,
    },
    Error(ErrorKind, Operation),
}

#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<Seen>>, Mutex<Vec<Duration>>);

impl Observer for Recorder {
    fn event(&self, event: &Event<'_>) {
        let seen = match *event {
            Event::ObtainStarted { key, .. } => Seen::ObtainStarted(key.to_string()),
            Event::ObtainEnded {
                key,
                end,
                waited,
                attempts,
                ..
            } => Seen::ObtainEnded {
                key: key.to_string(),
                end,
                waited,
                attempts,
            },
            Event::HoldStarted { key, .. } => Seen::HoldStarted(key.to_string()),
            Event::HoldEnded { key, end, held, .. } => Seen::HoldEnded {
                key: key.to_string(),
                end,
                held,
            },
            Event::Lost { key, cause, .. } => Seen::Lost(key.to_string(), cause),
            Event::Renewal {
                locks,
                failed,
                latency,
                ..
            } => {
                self.1.lock().unwrap().push(latency);
                Seen::Renewal { locks, failed }
            }
            Event::BackendError {
                kind, operation, ..
            } => Seen::Error(kind, operation),
            _ => return,
        };
        self.0.lock().unwrap().push(seen);
    }
}

impl Recorder {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A memory backend whose calls can be made to fail (`Unavailable`) or prolongs to hang.
#[derive(Debug, Default)]
struct Switch {
    inner: MemoryBackend,
    fail: AtomicBool,
    hang_prolongs: AtomicBool,
    /// Prolongs take this many milliseconds.
    slow_prolongs: std::sync::atomic::AtomicU64,
}

impl Switch {
    fn check(&self, op: Operation) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "switch",
                op,
                "switched off",
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl Layer for Switch {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn name(&self) -> &'static str {
        "switch"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none().prolong_batch(16)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.check(Operation::Obtain)?;
        self.inner.obtain(req).await
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        if self.hang_prolongs.load(Ordering::SeqCst) {
            pending::<()>().await;
        }
        let slow = self.slow_prolongs.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(slow)).await;
        self.check(Operation::Prolongate)?;
        self.inner.prolongate(req).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.check(Operation::Release)?;
        self.inner.release(req).await
    }
}

fn setup() -> (Arc<Layered<Switch>>, Locker, Arc<Recorder>) {
    let backend = Arc::new(Layered(Switch::default()));
    let recorder = Arc::new(Recorder::default());
    let locker = Locker::new(backend.clone()).with_observer(recorder.clone());
    (backend, locker, recorder)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn ended(seen: &[Seen]) -> Vec<(ObtainEnd, u32)> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::ObtainEnded { end, attempts, .. } => Some((*end, *attempts)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_obtain_and_its_hold_start_and_end_once_each() {
    let (_, locker, seen) = setup();
    let guard = held(locker.lock("a")).await;
    tokio::time::sleep(ms(250)).await;
    let _ = guard.release().await.unwrap();
    assert_eq!(
        seen.take(),
        vec![
            Seen::ObtainStarted("a".into()),
            Seen::HoldStarted("a".into()),
            Seen::ObtainEnded {
                key: "a".into(),
                end: ObtainEnd::Obtained,
                waited: Duration::ZERO,
                attempts: 1
            },
            Seen::HoldEnded {
                key: "a".into(),
                end: HoldEnd::Released,
                held: ms(250)
            },
        ]
    );
    let stats = locker.stats();
    assert_eq!((stats.obtained, stats.held, stats.waiting), (1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_busy_try_and_a_wait_that_runs_out_are_told_apart() {
    let (_, locker, seen) = setup();
    let _held = held(locker.lock("a")).await;
    seen.take();
    assert!(locker.lock("a").try_obtain().await.unwrap().is_busy());
    assert_eq!(ended(&seen.take()), vec![(ObtainEnd::Busy, 1)]);

    let retry = Retry::linear(ms(100));
    let waited = locker.lock("a").wait(ms(350)).retry(retry).obtain();
    assert!(waited.await.unwrap().is_busy());
    let all = seen.take();
    let Some(Seen::ObtainEnded {
        end,
        waited,
        attempts,
        ..
    }) = all.last().cloned()
    else {
        panic!("no end: {all:?}")
    };
    assert_eq!(end, ObtainEnd::TimedOut);
    assert_eq!(waited, ms(350));
    // Every 50 to 150 ms (the jitter), and once more when the wait ends.
    assert!((3..=8).contains(&attempts), "{attempts} attempts");

    // A retry strategy that gives up before the wait ends: busy, not a timeout.
    let once = locker
        .lock("a")
        .wait(ms(10_000))
        .retry(Retry::none())
        .obtain();
    assert!(once.await.unwrap().is_busy());
    assert_eq!(ended(&seen.take()), vec![(ObtainEnd::Busy, 1)]);
    let stats = locker.stats();
    assert_eq!((stats.busy, stats.timed_out, stats.waiting), (2, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_ends_in_a_grant_reports_the_time_waited() {
    let (_, locker, seen) = setup();
    let holder = held(locker.lock("a")).await;
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let retry = Retry::linear(ms(50));
            let guard = locker.lock("a").wait(ms(5_000)).retry(retry).obtain().await;
            let _ = guard.unwrap().obtained().unwrap().release().await.unwrap();
        })
    };
    tokio::time::sleep(ms(120)).await;
    assert_eq!(locker.stats().waiting, 1, "one task waits");
    let _ = holder.release().await.unwrap();
    waiter.await.unwrap();
    let all = seen.take();
    let grants: Vec<_> = all
        .iter()
        .filter_map(|s| match s {
            Seen::ObtainEnded {
                end: ObtainEnd::Obtained,
                waited,
                attempts,
                ..
            } => Some((*waited, *attempts)),
            _ => None,
        })
        .collect();
    let [(first, 1), (waited, attempts)] = grants[..] else {
        panic!("two grants: {all:?}");
    };
    assert_eq!(first, Duration::ZERO);
    // Released at 120 ms; the waiter tries every 25 to 75 ms (the jitter). Time is paused,
    // so a try that comes due at the very instant of the release obtains at 120 ms: no
    // time passes between the two (CI saw it once).
    assert!(waited >= ms(120) && waited <= ms(195), "waited {waited:?}");
    assert!(attempts >= 3, "{attempts} attempts");
    assert_eq!(locker.stats().waiting, 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_obtain_counts_as_cancelled() {
    let (_, locker, seen) = setup();
    let _held = held(locker.lock("a")).await;
    let wait = locker.lock("a").wait(ms(5_000)).obtain();
    assert!(tokio::time::timeout(ms(100), wait).await.is_err());
    let all = seen.take();
    assert!(
        matches!(
            all.last(),
            Some(Seen::ObtainEnded {
                end: ObtainEnd::Cancelled,
                waited,
                ..
            }) if *waited == ms(100)
        ),
        "{all:?}"
    );
    let stats = locker.stats();
    assert_eq!((stats.cancelled, stats.waiting), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn holds_end_released_late_lost_or_dropped() {
    let (backend, locker, seen) = setup();
    // Late: expired, nobody took it.
    let late = held(locker.lock("late").ttl(ms(100))).await;
    // Lost: expired and taken by another owner.
    let lost = held(locker.lock("lost").ttl(ms(100))).await;
    tokio::time::sleep(ms(150)).await;
    let other = Locker::new(backend.clone());
    let thief = held(other.lock("lost")).await;
    assert_eq!(late.release().await.unwrap(), ReleaseOutcome::ReleasedLate);
    assert_eq!(lost.release().await.unwrap(), ReleaseOutcome::Lost);
    // Dropped: released in the background.
    drop(held(locker.lock("dropped")).await);
    tokio::time::sleep(ms(10)).await;
    let ends: Vec<String> = seen
        .take()
        .into_iter()
        .filter_map(|s| match s {
            Seen::HoldEnded { key, end, .. } => Some(format!("{key} ended {end}")),
            Seen::Lost(key, cause) => Some(format!("{key} lost ({cause})")),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        [
            "late ended late",
            "lost lost (taken)",
            "lost ended lost",
            "dropped ended dropped"
        ]
    );
    let stats = locker.stats();
    assert_eq!((stats.held, stats.lost), (0, 1));
    assert!(
        matches!(state(&other, "dropped").await, LockState::Free),
        "the dropped guard's lock was released"
    );
    let _ = thief.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn reentrant_guards_share_one_hold() {
    let (_, locker, seen) = setup();
    let first = held(locker.lock("a")).await;
    let second = first.reenter().await.unwrap().obtained().unwrap();
    assert_eq!(locker.stats().held, 1);
    let _ = first.release().await.unwrap();
    assert_eq!(locker.stats().held, 1, "the second guard still holds it");
    let _ = second.release().await.unwrap();
    // Dropping a reentrant guard drops no hold: the other guard still holds it, and its
    // release ends the hold as released.
    let third = held(locker.lock("b")).await;
    drop(third.reenter().await.unwrap().obtained().unwrap());
    tokio::time::sleep(ms(10)).await;
    assert_eq!(locker.stats().held, 1, "the first guard still holds it");
    let _ = third.release().await.unwrap();
    let all = seen.take();
    let holds = |f: fn(&Seen) -> bool| all.iter().filter(|s| f(s)).count();
    assert_eq!(holds(|s| matches!(s, Seen::HoldStarted(_))), 2, "{all:?}");
    let released = |s: &Seen| {
        matches!(
            s,
            Seen::HoldEnded {
                end: HoldEnd::Released,
                ..
            }
        )
    };
    assert_eq!(holds(released), 2, "{all:?}");
    assert_eq!(locker.stats().held, 0);
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_reports_its_batches_and_a_partition_reports_an_expired_loss() {
    let (backend, locker, seen) = setup();
    let ttl = ms(300);
    let mut guards = Vec::new();
    for key in ["a", "b", "c"] {
        guards.push(held(locker.lock(key).ttl(ttl).watchdog()).await);
    }
    tokio::time::sleep(ms(700)).await;
    let all = seen.take();
    let batches: Vec<_> = all
        .iter()
        .filter(|s| matches!(s, Seen::Renewal { .. }))
        .collect();
    assert!(!batches.is_empty(), "{all:?}");
    assert!(
        batches.iter().all(|b| **b
            == Seen::Renewal {
                locks: 3,
                failed: 0
            }),
        "the three locks of one ttl renew together: {batches:?}"
    );
    assert_eq!(locker.stats().renewals, 3 * batches.len() as u64);
    // A batch's latency is its round trip.
    backend.slow_prolongs.store(20, Ordering::SeqCst);
    seen.1.lock().unwrap().clear();
    tokio::time::sleep(ms(250)).await;
    let latencies = std::mem::take(&mut *seen.1.lock().unwrap());
    assert!(
        !latencies.is_empty(),
        "a batch in 250 ms at a 100 ms period"
    );
    assert!(latencies.iter().all(|l| *l == ms(20)), "{latencies:?}");
    backend.slow_prolongs.store(0, Ordering::SeqCst);
    seen.take();

    // The prolongs hang now: each lock is lost when its validity runs out.
    backend.hang_prolongs.store(true, Ordering::SeqCst);
    let lost = guards[0].lost();
    tokio::time::timeout(ttl + ms(10), lost)
        .await
        .expect("lost in time");
    tokio::time::sleep(ms(10)).await;
    let all = seen.take();
    let losses: Vec<_> = all
        .iter()
        .filter_map(|s| match s {
            Seen::Lost(key, cause) => Some((key.as_str(), *cause)),
            _ => None,
        })
        .collect();
    assert_eq!(
        losses,
        vec![
            ("a", LostCause::Expired),
            ("b", LostCause::Expired),
            ("c", LostCause::Expired)
        ],
        "{all:?}"
    );
    assert!(
        all.contains(&Seen::Renewal {
            locks: 3,
            failed: 3
        }),
        "a batch that never came back counts as failed: {all:?}"
    );
    backend.hang_prolongs.store(false, Ordering::SeqCst);
    for g in guards {
        let _ = g.release().await.unwrap();
    }
    let ends = seen
        .take()
        .into_iter()
        .filter(|s| {
            matches!(
                s,
                Seen::HoldEnded {
                    end: HoldEnd::Lost,
                    ..
                }
            )
        })
        .count();
    assert_eq!(ends, 3);
    assert_eq!(locker.stats().lost, 3);
}

#[tokio::test(start_paused = true)]
async fn backend_errors_are_reported_with_kind_and_operation() {
    let (backend, locker, seen) = setup();
    let guard = held(locker.lock("a").watchdog()).await;
    seen.take();
    backend.fail.store(true, Ordering::SeqCst);
    let err = locker.lock("b").try_obtain().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(guard.prolongate(ms(30_000)).await.is_err());
    // The watchdog's next renewal fails too, and is retried.
    tokio::time::sleep(ms(11_000)).await;
    assert!(guard.release().await.is_err());
    let all = seen.take();
    for op in [Operation::Obtain, Operation::Prolongate, Operation::Release] {
        assert!(
            all.contains(&Seen::Error(ErrorKind::Unavailable, op)),
            "{op:?}: {all:?}"
        );
    }
    assert!(
        all.iter()
            .any(|s| matches!(s, Seen::Renewal { failed: 1, .. })),
        "{all:?}"
    );
    assert!(all.iter().any(|s| matches!(
        s,
        Seen::ObtainEnded {
            end: ObtainEnd::Failed(ErrorKind::Unavailable),
            ..
        }
    )));
    assert!(all.iter().any(|s| matches!(
        s,
        Seen::HoldEnded {
            end: HoldEnd::Failed,
            ..
        }
    )));
    let stats = locker.stats();
    assert!(stats.backend_errors >= 4, "{stats:?}");
    assert!(stats.renewal_failures >= 1, "{stats:?}");
    assert_eq!((stats.failed, stats.held), (1, 0));
}

/// An observer that panics on every event.
#[derive(Debug)]
struct Panics;

impl Observer for Panics {
    fn event(&self, _: &Event<'_>) {
        panic!("an observer's bug");
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_observer_changes_nothing() {
    let locker = Locker::new(Arc::new(MemoryBackend::new())).with_observer(Arc::new(Panics));
    let guard = held(locker.lock("a").ttl(ms(300)).watchdog()).await;
    tokio::time::sleep(ms(1_000)).await;
    assert!(!guard.is_lost(), "the watchdog kept it");
    assert!(locker.lock("a").try_obtain().await.unwrap().is_busy());
    let _ = guard.release().await.unwrap();
    let stats = locker.stats();
    assert_eq!((stats.obtained, stats.busy, stats.held), (1, 1, 0));
    assert!(stats.renewals >= 2, "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn clones_share_the_counters() {
    let (_, locker, _) = setup();
    let plain = locker.clone().with_observer(Arc::new(Recorder::default()));
    let guard = held(plain.lock("a")).await;
    assert_eq!(locker.stats().held, 1);
    let _ = guard.release().await.unwrap();
    assert_eq!(locker.stats().obtained, 1);
}

#[tokio::test(start_paused = true)]
async fn clones_with_their_own_observers_each_see_their_own_renewals() {
    let (_, locker, first) = setup();
    let second = Arc::new(Recorder::default());
    let other = locker.clone().with_observer(second.clone());
    let ttl = ms(300);
    let a = held(locker.lock("a").ttl(ttl).watchdog()).await;
    let b = held(other.lock("b").ttl(ttl).watchdog()).await;
    // Both clones share one watchdog: the two locks renew in one batch, and each observer
    // hears of its own lock only.
    tokio::time::sleep(ms(450)).await;
    for seen in [&first, &second] {
        let batches: Vec<_> = seen
            .take()
            .into_iter()
            .filter(|s| matches!(s, Seen::Renewal { .. }))
            .collect();
        assert!(!batches.is_empty(), "no renewal seen");
        assert!(
            batches.iter().all(|s| *s
                == Seen::Renewal {
                    locks: 1,
                    failed: 0
                }),
            "{batches:?}"
        );
    }
    assert_eq!(locker.stats().renewals, other.stats().renewals);
    let _ = (a.release().await, b.release().await);
}

/// An observer that takes its time over a loss, as one that writes a log line or takes a
/// lock of its own does.
#[derive(Debug, Default)]
struct SlowToHearOfLosses(std::sync::atomic::AtomicU64);

impl Observer for SlowToHearOfLosses {
    fn event(&self, event: &Event<'_>) {
        if let Event::Lost { .. } = event {
            std::thread::sleep(Duration::from_millis(200));
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Whoever wakes on `lost()` finds the loss counted by `stats()` and told to the observer:
/// the signal fires after both, never before (a test that read the counts the moment
/// `lost()` returned failed 1 run in 10 when it fired first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_is_counted_before_the_lost_signal_fires() {
    let backend = Arc::new(MemoryBackend::new());
    let observer = Arc::new(SlowToHearOfLosses::default());
    let locker = Locker::new(backend.clone()).with_observer(observer.clone());
    let guard = held(locker.lock("k").ttl(ms(100))).await;
    let lost = guard.lost_token();
    // A thread of its own wakes on the signal and reads the counts at once (a task could
    // share the worker thread the observer keeps busy).
    let waiter = std::thread::spawn({
        let locker = locker.clone();
        let observer = observer.clone();
        move || {
            for _ in 0..10_000 {
                if lost.is_cancelled() {
                    return Some((locker.stats().lost, observer.0.load(Ordering::SeqCst)));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        }
    });
    let seen = tokio::task::spawn_blocking(move || waiter.join().unwrap())
        .await
        .unwrap();
    let (stats_lost, heard) = seen.expect("lost() fired within 10 s");
    assert_eq!(
        (stats_lost, heard),
        (1, 1),
        "woken by lost(), the waiter found {stats_lost} loss(es) in stats() and the observer \
         had heard of {heard}"
    );
    drop(guard);
}
