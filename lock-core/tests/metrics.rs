//! `MetricsObserver` through a recording recorder: each metric of the README's table
//! checked through a real scenario (memory backend, time paused).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lock_core::observe::metrics::{self as m, MetricsObserver};
use lock_core::{Locker, MemoryBackend};
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use test_servers::locks::held;
use tokio::sync::{Mutex, MutexGuard};

/// The recorder, installed once for this test binary; tests take turns, since a snapshot
/// drains what every test recorded.
async fn recorder() -> (MutexGuard<'static, ()>, &'static Snapshotter) {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    static TURN: Mutex<()> = Mutex::const_new(());
    let turn = TURN.lock().await;
    let snapshotter = SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        snapshotter
    });
    snapshotter.snapshot();
    (turn, snapshotter)
}

/// One recorded series: its name, its labels (sorted), its value.
#[derive(Debug)]
struct Series {
    name: String,
    unit: Option<Unit>,
    labels: Vec<(String, String)>,
    value: DebugValue,
}

fn snapshot(s: &Snapshotter) -> Vec<Series> {
    s.snapshot()
        .into_vec()
        .into_iter()
        .map(|(ck, unit, _, value)| {
            let (_, key) = ck.into_parts();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            Series {
                name: key.name().to_owned(),
                unit,
                labels,
                value,
            }
        })
        .collect()
}

/// The series named `name` whose labels include every one of `with`.
fn find<'a>(all: &'a [Series], name: &str, with: &[(&str, &str)]) -> Vec<&'a Series> {
    all.iter()
        .filter(|s| {
            s.name == name
                && with
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .collect()
}

/// The values a histogram recorded.
fn samples(all: &[Series], name: &str, with: &[(&str, &str)]) -> Vec<f64> {
    find(all, name, with)
        .iter()
        .flat_map(|s| -> Vec<f64> {
            match &s.value {
                DebugValue::Histogram(v) => v.iter().map(|f| f.0).collect(),
                other => panic!("{name} is not a histogram: {other:?}"),
            }
        })
        .collect()
}

fn count(all: &[Series], name: &str, with: &[(&str, &str)]) -> u64 {
    find(all, name, with)
        .iter()
        .map(|s| match s.value {
            DebugValue::Counter(n) => n,
            ref other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

/// A gauge's net change since the last snapshot.
fn gauge(all: &[Series], name: &str, with: &[(&str, &str)]) -> f64 {
    find(all, name, with)
        .iter()
        .map(|s| match s.value {
            DebugValue::Gauge(v) => v.0,
            ref other => panic!("{name} is not a gauge: {other:?}"),
        })
        .sum()
}

fn locker(test: &str) -> Locker {
    Locker::new(Arc::new(MemoryBackend::new()))
        .with_observer(Arc::new(MetricsObserver::new().with_label("test", test)))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn a_busy_obtain_and_a_grant_after_a_wait() {
    let (_turn, rec) = recorder().await;
    let locker = locker("busy");
    let holder = held(locker.lock("a")).await;
    assert!(locker.lock("a").try_obtain().await.unwrap().is_busy());
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("a").wait(ms(5_000)).obtain().await })
    };
    tokio::time::sleep(ms(200)).await;
    let all = snapshot(rec);
    assert_eq!(
        gauge(&all, m::OBTAIN_PENDING, &[("backend", "memory")]),
        1.0,
        "one task waits: {all:?}"
    );
    assert_eq!(gauge(&all, m::LOCKS_HELD, &[("test", "busy")]), 1.0);
    let _ = holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap().obtained().unwrap();
    let _ = guard.release().await.unwrap();
    let all = snapshot(rec);
    let obtained = samples(
        &all,
        m::OBTAIN_DURATION,
        &[("test", "busy"), ("result", "obtained")],
    );
    assert_eq!(obtained.len(), 1, "{all:?}");
    assert!(
        obtained[0] >= 0.2 && obtained[0] < 0.5,
        "waited {obtained:?} s"
    );
    let attempts = samples(
        &all,
        m::OBTAIN_ATTEMPTS,
        &[("test", "busy"), ("result", "obtained")],
    );
    assert!(attempts[0] >= 2.0, "{attempts:?}");
    // The first snapshot drained what came before it (the busy try, the waiter's and the
    // holder's +1): since then, one obtain ended and one hold more ended than started.
    assert_eq!(gauge(&all, m::OBTAIN_PENDING, &[("test", "busy")]), -1.0);
    assert_eq!(gauge(&all, m::LOCKS_HELD, &[("test", "busy")]), -1.0);
    let held = samples(
        &all,
        m::HOLD_DURATION,
        &[("test", "busy"), ("end", "released")],
    );
    assert_eq!(held.len(), 2, "{all:?}");
    assert!(held.iter().any(|s| *s >= 0.2), "{held:?}");
}

#[tokio::test(start_paused = true)]
async fn a_busy_try_is_recorded_with_its_result() {
    let (_turn, rec) = recorder().await;
    let locker = locker("try");
    let holder = held(locker.lock("a")).await;
    assert!(locker.lock("a").try_obtain().await.unwrap().is_busy());
    assert!(locker
        .lock("a")
        .wait(ms(300))
        .obtain()
        .await
        .unwrap()
        .is_busy());
    let _ = holder.release().await.unwrap();
    let all = snapshot(rec);
    let with = |result| [("test", "try"), ("result", result)];
    assert_eq!(samples(&all, m::OBTAIN_DURATION, &with("busy")), [0.0]);
    assert_eq!(samples(&all, m::OBTAIN_DURATION, &with("timeout")), [0.3]);
    assert_eq!(samples(&all, m::OBTAIN_ATTEMPTS, &with("busy")), [1.0]);
    let units: Vec<_> = find(&all, m::OBTAIN_DURATION, &[("test", "try")])
        .iter()
        .map(|s| s.unit)
        .collect();
    assert!(units.iter().all(|u| *u == Some(Unit::Seconds)), "{units:?}");
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_records_its_batches_and_a_lost_lock_its_cause() {
    let (_turn, rec) = recorder().await;
    let locker = locker("watchdog");
    let ttl = ms(300);
    let a = held(locker.lock("a").ttl(ttl).watchdog()).await;
    let b = held(locker.lock("b").ttl(ttl).watchdog()).await;
    tokio::time::sleep(ms(500)).await;
    // Someone breaks the lock: the next renewal answers Lost.
    let key = lock_core::Key::new("a").unwrap();
    locker.backend().force_release(&key).await.unwrap();
    tokio::time::timeout(ttl, a.lost())
        .await
        .expect("lost() fired");
    let _ = a.release().await.unwrap();
    let _ = b.release().await.unwrap();
    let all = snapshot(rec);
    let sizes = samples(&all, m::RENEWAL_BATCH_SIZE, &[("test", "watchdog")]);
    // The memory backend prolongs one lock per call, so a batch is one lock: at 100 and
    // 200 ms, and on for `b` until its release.
    assert!(
        sizes.len() >= 4 && sizes.iter().all(|s| *s == 1.0),
        "{sizes:?}"
    );
    let latency = samples(&all, m::RENEWAL_DURATION, &[("test", "watchdog")]);
    assert_eq!(latency.len(), sizes.len());
    assert_eq!(
        count(
            &all,
            m::LOCKS_LOST,
            &[("test", "watchdog"), ("cause", "taken")]
        ),
        1
    );
    assert_eq!(
        count(
            &all,
            m::LOCKS_LOST,
            &[("test", "watchdog"), ("cause", "expired")]
        ),
        0
    );
    assert_eq!(
        samples(
            &all,
            m::HOLD_DURATION,
            &[("test", "watchdog"), ("end", "lost")]
        )
        .len(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn named_keys_get_a_label_and_the_rest_share_one() {
    let (_turn, rec) = recorder().await;
    let observer = MetricsObserver::new()
        .with_label("test", "keys")
        .with_keys(["nightly-report"]);
    let locker = Locker::new(Arc::new(MemoryBackend::new())).with_observer(Arc::new(observer));
    for key in ["nightly-report", "invoice-1", "invoice-2"] {
        let g = held(locker.lock(key)).await;
        let _ = g.release().await.unwrap();
    }
    let all = snapshot(rec);
    let of = |key| samples(&all, m::HOLD_DURATION, &[("test", "keys"), ("key", key)]).len();
    assert_eq!((of("nightly-report"), of(m::OTHER_KEY)), (1, 2));
    assert!(
        find(&all, m::HOLD_DURATION, &[("key", "invoice-1")]).is_empty(),
        "no series per unnamed key"
    );
}

#[tokio::test(start_paused = true)]
async fn backend_errors_are_counted_by_kind_and_operation() {
    use lock_core::backend::{
        async_trait, Capabilities, ObtainRequest, ProlongRequest, ReleaseRequest,
    };
    use lock_core::{
        Error, ErrorKind, Key, LockBackend, LockState, ObtainOutcome, Operation, ProlongOutcome,
        ReleaseOutcome, Result,
    };

    #[derive(Debug)]
    struct Down;
    fn down(op: Operation) -> Error {
        Error::new(ErrorKind::Unavailable, "down", op, "connection refused")
    }
    #[async_trait]
    impl LockBackend for Down {
        fn name(&self) -> &'static str {
            "down"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::none()
        }
        async fn obtain(&self, _: ObtainRequest<'_>) -> Result<ObtainOutcome> {
            Err(down(Operation::Obtain))
        }
        async fn prolongate(&self, _: ProlongRequest<'_>) -> Result<ProlongOutcome> {
            Err(down(Operation::Prolongate))
        }
        async fn release(&self, _: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
            Err(down(Operation::Release))
        }
        async fn inspect(&self, _: &Key) -> Result<LockState> {
            Err(down(Operation::Inspect))
        }
        async fn force_release(&self, _: &Key) -> Result<LockState> {
            Err(down(Operation::ForceRelease))
        }
    }

    let (_turn, rec) = recorder().await;
    // One observer on two backends: each event is recorded under its own backend's label.
    let observer = Arc::new(MetricsObserver::new().with_label("test", "errors"));
    assert!(format!("{observer:?}").contains("errors"), "{observer:?}");
    let locker = Locker::new(Arc::new(Down)).with_observer(observer.clone());
    let memory = Locker::new(Arc::new(MemoryBackend::new())).with_observer(observer);
    let _ = held(memory.lock("a")).await.release().await.unwrap();
    assert!(locker.lock("a").try_obtain().await.is_err());
    assert!(locker.lock("a").wait(ms(100)).obtain().await.is_err());
    let all = snapshot(rec);
    let obtains = |backend, result| {
        let with = [("test", "errors"), ("backend", backend), ("result", result)];
        samples(&all, m::OBTAIN_DURATION, &with).len()
    };
    assert_eq!(obtains("memory", "obtained"), 1, "{all:?}");
    assert_eq!(obtains("memory", "error"), 0, "{all:?}");
    let errors = count(
        &all,
        m::ERRORS,
        &[
            ("test", "errors"),
            ("backend", "down"),
            ("kind", "unavailable"),
            ("operation", "obtain"),
        ],
    );
    assert!(errors >= 2, "{all:?}");
    assert_eq!(
        samples(
            &all,
            m::OBTAIN_DURATION,
            &[("test", "errors"), ("result", "error")]
        )
        .len(),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn an_expired_loss_is_recorded_under_its_cause() {
    let (_turn, rec) = recorder().await;
    let locker = locker("expired");
    // Held past its ttl without a watchdog: lost when the validity ends.
    let short = held(locker.lock("short").ttl(ms(100))).await;
    tokio::time::timeout(ms(200), short.lost())
        .await
        .expect("lost() fired");
    let _ = short.release().await.unwrap();
    let all = snapshot(rec);
    let lost = |cause| {
        count(
            &all,
            m::LOCKS_LOST,
            &[("test", "expired"), ("cause", cause)],
        )
    };
    assert_eq!((lost("expired"), lost("taken")), (1, 0), "{all:?}");
}
