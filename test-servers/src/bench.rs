//! What every benchmark of the workspace does the same way: the runtime, the obtain+release
//! loops, the rate of a number of concurrent tasks, medians of interleaved rounds, and the
//! handoff between waiters on one key. Each bench keeps only its baseline (the raw commands
//! of its backend) and its report.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::backend::{ObtainRequest, ReleaseRequest, Token};
use lock_core::{
    Attempt, HolderInfo, Key, LockBackend, Locker, Mode, ObtainOutcome, ReleaseOutcome, Retry, Ttl,
};

/// The runtime of every bench: two worker threads, like the 2-core machines CI runs on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A prefix no other measurement uses.
pub fn fresh_prefix(what: &str) -> String {
    format!(
        "{what}-{}-",
        &Token::generate().expect("a token").to_hex()[..12]
    )
}

/// `n` obtain+release cycles straight on the backend trait, over 64 keys under `prefix`;
/// every obtain must be `Acquired` and every release `Released`. Returns each cycle's time.
pub async fn backend_cycles(
    backend: Arc<dyn LockBackend>,
    prefix: String,
    n: usize,
) -> Vec<Duration> {
    let ttl = Ttl::new(Duration::from_secs(30)).expect("a ttl");
    let holder = HolderInfo::current();
    let keys: Vec<Key> = (0..64)
        .map(|i| Key::new(format!("{prefix}{i}")).expect("a key"))
        .collect();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let key = &keys[i % keys.len()];
        let token = Token::generate().expect("a token");
        let req = ObtainRequest::new(key, &token, ttl, &holder);
        let o = backend.obtain(req).await.expect("obtain");
        assert!(matches!(o, ObtainOutcome::Acquired { .. }), "{o:?}");
        let req = ReleaseRequest {
            key,
            token: &token,
            delay_after: None,
        };
        let r = backend.release(req).await.expect("release");
        assert_eq!(r, ReleaseOutcome::Released);
        times.push(started.elapsed());
    }
    times
}

/// `n` obtain+release cycles through the client layer over 64 keys under `prefix`:
/// `try_obtain()` (one attempt), or with `waiting`, `obtain()` with a notified retry (which
/// must cost the same on a free lock). Returns each cycle's time.
pub async fn locker_cycles(
    locker: Locker,
    prefix: String,
    n: usize,
    waiting: bool,
) -> Vec<Duration> {
    let keys: Vec<String> = (0..64).map(|i| format!("{prefix}{i}")).collect();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let lock = locker.lock(&keys[i % keys.len()]);
        let got = if waiting {
            lock.retry(Retry::default().notified()).obtain().await
        } else {
            lock.try_obtain().await
        };
        let guard = got.expect("obtain").obtained().expect("a free key");
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        times.push(started.elapsed());
    }
    times
}

/// As [`locker_cycles`] without waiting, in `mode`: the mutex (`lock`), a read hold
/// (`read`) or one permit of a semaphore (`semaphore(key, capacity)`), so that the shared
/// holds' cycles sit next to the mutex's of the same run.
pub async fn mode_cycles(locker: Locker, prefix: String, n: usize, mode: Mode) -> Vec<Duration> {
    let keys: Vec<String> = (0..64).map(|i| format!("{prefix}{i}")).collect();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let key = &keys[i % keys.len()];
        let lock = match mode {
            Mode::Exclusive => locker.lock(key),
            Mode::Shared {
                capacity: Mode::UNBOUNDED,
                ..
            } => locker.read(key),
            Mode::Shared { capacity, .. } => locker.semaphore(key, capacity),
        };
        let guard = lock
            .try_obtain()
            .await
            .expect("obtain")
            .obtained()
            .expect("a free key");
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        times.push(started.elapsed());
    }
    times
}

/// What one measurement of cycles found: the rate and the per-cycle latencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    /// Cycles per second, all tasks together.
    pub rate: f64,
    /// The median cycle, in microseconds.
    pub p50_us: f64,
    /// The 99th percentile cycle, in microseconds.
    pub p99_us: f64,
}

/// Cycles per second of `tasks` concurrent tasks, each running `f(prefix, cycles / tasks)`
/// and returning its cycles' times; task `t` gets the prefix `bench-{t}-` on every call, so
/// that rounds reuse their keys.
pub async fn run<F, Fut>(tasks: usize, cycles: usize, f: F) -> Run
where
    F: Fn(String, usize) -> Fut,
    Fut: Future<Output = Vec<Duration>> + Send + 'static,
{
    let each = cycles / tasks;
    let start = Instant::now();
    // The same keys for task `t` in every call: a measurement's rounds reuse them.
    let handles: Vec<_> = (0..tasks)
        .map(|t| tokio::spawn(f(format!("bench-{t}-"), each)))
        .collect();
    let mut all = Vec::with_capacity(each * tasks);
    for h in handles {
        all.extend(h.await.expect("a bench task"));
    }
    let rate = all.len() as f64 / start.elapsed().as_secs_f64();
    all.sort();
    let us = |p: f64| {
        let i = ((all.len() as f64 - 1.0) * p).round() as usize;
        all[i].as_secs_f64() * 1e6
    };
    Run {
        rate,
        p50_us: us(0.5),
        p99_us: us(0.99),
    }
}

/// Measurements taken in turns: one uncounted round first (it creates the keys — files,
/// records, rows — that the counted rounds reuse, as a running service would), then
/// `rounds` rounds that each run every measurement once, so that all of them see the same
/// machine. For each measurement, the round of median rate.
pub async fn rounds<const N: usize>(
    rounds: usize,
    mut round: impl AsyncFnMut() -> [Run; N],
) -> [Run; N] {
    let _ = round().await;
    let mut all: [Vec<Run>; N] = std::array::from_fn(|_| Vec::new());
    for _ in 0..rounds.max(1) {
        for (i, r) in round().await.into_iter().enumerate() {
            all[i].push(r);
        }
    }
    all.map(|mut runs| {
        runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        runs[runs.len() / 2]
    })
}

/// Sorted latencies.
#[derive(Debug, Clone)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    /// Latencies measured by a caller's own loop, in any order.
    pub fn new(mut measured: Vec<Duration>) -> Self {
        measured.sort();
        Latencies(measured)
    }

    /// The `p` quantile (0 to 1), in milliseconds.
    pub fn ms(&self, p: f64) -> f64 {
        let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
        self.0[i].as_secs_f64() * 1000.0
    }

    /// How many were measured.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.2} ms p99 {:.2} ms ({} handoffs)",
            self.ms(0.5),
            self.ms(0.99),
            self.len()
        )
    }
}

/// What [`rw_handoff`] measured.
pub struct RwHandoff {
    /// The writer's wait: from its `obtain()` call to `Acquired`, while readers come and go.
    pub writer_waits: Latencies,
    /// From the writer's release call to the first reader's `Acquired` after it.
    pub readers_in: Latencies,
    /// Read holds granted while the writer measured its waits.
    pub reads: usize,
}

/// One writer and `readers` readers on one key (each holds 1 ms): the writer waits for the
/// write lock `handoffs` times (it queues: its marker keeps new readers out), pausing 2 ms
/// after each release; the readers take read holds in a loop meanwhile.
pub async fn rw_handoff(
    backend: Arc<dyn LockBackend>,
    retry: Retry,
    readers: usize,
    handoffs: usize,
) -> RwHandoff {
    let key = fresh_prefix("rw-handoff");
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let readers_in: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let wait = Duration::from_secs(30);
    let reader_tasks: Vec<_> = (0..readers)
        .map(|_| {
            let locker = Locker::new(backend.clone());
            let (key, released_at, readers_in, done, reads, retry) = (
                key.clone(),
                released_at.clone(),
                readers_in.clone(),
                done.clone(),
                reads.clone(),
                retry.clone(),
            );
            tokio::spawn(async move {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let attempt = locker.read(&key).wait(wait).retry(retry.clone()).obtain();
                    let Attempt::Obtained(guard) = attempt.await.expect("a read obtain") else {
                        continue;
                    };
                    if let Some(r) = released_at.lock().unwrap().take() {
                        readers_in.lock().unwrap().push(r.elapsed());
                    }
                    reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let _ = guard.release().await.expect("a read release");
                }
            })
        })
        .collect();
    let locker = Locker::new(backend);
    let mut writer_waits = Vec::with_capacity(handoffs);
    // The readers get going first.
    tokio::time::sleep(Duration::from_millis(20)).await;
    while writer_waits.len() < handoffs {
        let asked = Instant::now();
        let attempt = locker.write(&key).wait(wait).retry(retry.clone()).obtain();
        let Attempt::Obtained(guard) = attempt.await.expect("a write obtain") else {
            continue;
        };
        writer_waits.push(asked.elapsed());
        tokio::time::sleep(Duration::from_millis(1)).await;
        *released_at.lock().unwrap() = Some(Instant::now());
        let _ = guard.release().await.expect("a write release");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in reader_tasks {
        t.await.expect("a reader");
    }
    writer_waits.sort();
    let mut readers_in = readers_in.lock().unwrap().clone();
    readers_in.sort();
    RwHandoff {
        writer_waits: Latencies(writer_waits),
        readers_in: Latencies(readers_in),
        reads: reads.load(std::sync::atomic::Ordering::SeqCst),
    }
}

/// Handoff between `waiters` tasks on one key, until `handoffs` were measured: the time
/// from the holder's release call to the next holder's `Acquired` (each holds 1 ms).
pub async fn handoff(
    backend: Arc<dyn LockBackend>,
    retry: Retry,
    waiters: usize,
    handoffs: usize,
) -> Latencies {
    let key = fresh_prefix("handoff");
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let locker = Locker::new(backend.clone());
            let (key, released_at, latencies) =
                (key.clone(), released_at.clone(), latencies.clone());
            let retry = retry.clone();
            tokio::spawn(async move {
                while latencies.lock().unwrap().len() < handoffs {
                    let attempt = locker
                        .lock(&key)
                        .wait(Duration::from_secs(30))
                        .retry(retry.clone())
                        .obtain()
                        .await
                        .expect("obtain");
                    let Attempt::Obtained(guard) = attempt else {
                        continue;
                    };
                    let now = Instant::now();
                    if let Some(r) = released_at.lock().unwrap().take() {
                        latencies.lock().unwrap().push(now - r);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    *released_at.lock().unwrap() = Some(Instant::now());
                    let _ = guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a waiter");
    }
    let mut v = latencies.lock().unwrap().clone();
    v.sort();
    Latencies(v)
}
