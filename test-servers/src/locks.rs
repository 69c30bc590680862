//! What the workspace's tests do to locks again and again: take one that must be free, wait
//! for a backend to come back, queue waiters behind a holder.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::{async_trait, ObtainRequest, ProlongRequest};
use lock_core::{
    Attempt, Key, LockBackend, LockBuilder, LockGuard, LockState, Locker, ObtainOutcome,
    ProlongOutcome, ReleaseOutcome, Retry,
};

/// The lock `lock` describes, which must be free: one attempt, and a panic naming the
/// holder if it is busy.
pub async fn held(lock: LockBuilder<'_>) -> LockGuard {
    match lock.try_obtain().await.expect("obtain") {
        Attempt::Obtained(g) => g,
        Attempt::Busy(b) => panic!("the lock should be free: {b}"),
    }
}

/// `key`, which must be free, for 30 s.
pub async fn take(locker: &Locker, key: &str) -> LockGuard {
    held(locker.lock(key).ttl(Duration::from_secs(30))).await
}

/// What the backend says of `key` now.
pub async fn state(locker: &Locker, key: &str) -> LockState {
    let key = Key::new(key).expect("a key");
    locker.backend().inspect(&key).await.expect("inspect")
}

/// Calls `call` until it succeeds, for up to `within`, pausing 100 ms after each retry-safe
/// error (a server restarting, a failover); any other error, or one that lasts, fails the
/// test naming `what`.
pub async fn until_ok<T>(
    what: &str,
    within: Duration,
    mut call: impl AsyncFnMut() -> lock_core::Result<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match call().await {
            Ok(v) => return v,
            Err(e) if e.is_retry_safe() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{what}: not a retry-safe failure, or for over {within:?}: {e}"),
        }
    }
}

/// Polls `check` every 20 ms for up to `within`; panics naming `what` if it never holds.
pub async fn eventually<F: Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Queues `waiters` tasks behind `guard` on its key, each with a 20 s fallback poll (so only
/// a release notification wakes one in time), releases `guard` after 500 ms, and returns
/// once each waiter has held the lock for `hold` and released it: the time from the queue's
/// start. `locker` makes each waiter's `Locker`.
pub async fn queue_behind(
    guard: LockGuard,
    waiters: usize,
    hold: Duration,
    locker: impl Fn() -> Locker,
) -> Duration {
    let key = guard.key().as_str().to_owned();
    let started = Instant::now();
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let (locker, key) = (locker(), key.clone());
            tokio::spawn(async move {
                let got = locker
                    .lock(&key)
                    .wait(Duration::from_secs(60))
                    .retry(Retry::linear(Duration::from_secs(20)).notified())
                    .obtain()
                    .await
                    .expect("obtain");
                let Attempt::Obtained(g) = got else {
                    panic!("still busy after 60 s")
                };
                tokio::time::sleep(hold).await;
                assert_eq!(
                    g.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    for t in tasks {
        t.await.expect("a waiter");
    }
    started.elapsed()
}

/// Two waiters of one process queue behind a holder of one key on `backend`: each release
/// must wake the next, so both get the lock in turn long before their 20 s fallback poll.
pub async fn releases_wake_the_waiters_of_the_process_in_turn(backend: Arc<dyn LockBackend>) {
    let holder = Locker::new(backend.clone());
    let guard = take(&holder, "queue").await;
    let took = queue_behind(guard, 2, Duration::from_millis(100), || {
        Locker::new(backend.clone())
    })
    .await;
    assert!(
        took < Duration::from_secs(15),
        "took {took:?}: a waiter slept until its fallback poll"
    );
}

/// `guard`'s prolong for 30 s, retried (for up to 30 s) while the backend comes back from a
/// fault: the answer once it is reachable again.
pub async fn prolong_when_back(guard: &LockGuard) -> ProlongOutcome {
    until_ok(
        "prolong after the fault",
        Duration::from_secs(30),
        async || guard.prolongate(Duration::from_secs(30)).await,
    )
    .await
}

/// Prolongs each of `guards` for 30 s and releases it, after the server killed the pool's
/// connections: the first call may find its connection dead and fail, retry-safe (and is
/// asked again); it closes every dead idle connection, so no other call fails.
pub async fn prolong_each_after_dead_connections(guards: Vec<LockGuard>) {
    let mut failed = 0;
    for guard in guards {
        let p = match guard.prolongate(Duration::from_secs(30)).await {
            Err(e) if e.is_retry_safe() && failed == 0 => {
                failed += 1;
                guard.prolongate(Duration::from_secs(30)).await.unwrap()
            }
            other => other.unwrap(),
        };
        assert_eq!(p, ProlongOutcome::Prolonged);
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// A backend that counts the obtain and prolong calls made through it on locks (each a
/// round trip on a real backend; the calls on waiters' records, `lock_core::waiting`, are
/// not counted: they are not attempts) and passes every call on to `inner`.
#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn LockBackend>,
    obtains: AtomicU64,
    prolongs: AtomicU64,
    /// Each `prolongate_many` call: its size and how long it took.
    batches: std::sync::Mutex<Vec<(usize, Duration)>>,
}

impl Counting {
    /// A backend that counts the calls to `inner` (its counts through `Deref`).
    pub fn new(inner: Arc<dyn LockBackend>) -> Layered<Self> {
        Layered(Counting {
            inner,
            obtains: AtomicU64::new(0),
            prolongs: AtomicU64::new(0),
            batches: std::sync::Mutex::default(),
        })
    }

    /// Obtain calls so far.
    pub fn obtains(&self) -> u64 {
        self.obtains.load(Ordering::Relaxed)
    }

    /// Locks prolonged so far, one at a time or in batches.
    pub fn prolongs(&self) -> u64 {
        self.prolongs.load(Ordering::Relaxed)
    }

    /// Every `prolongate_many` call so far (the watchdog's batches), in order: its size
    /// and how long it took.
    pub fn batches(&self) -> Vec<(usize, Duration)> {
        self.batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A waiter's record (`lock_core::waiting`), not a lock.
fn is_record(key: &lock_core::Key) -> bool {
    key.as_str().starts_with(lock_core::waiting::RECORD_PREFIX)
}

#[async_trait]
impl Layer for Counting {
    fn inner(&self) -> &dyn LockBackend {
        &*self.inner
    }
    async fn obtain(&self, req: ObtainRequest<'_>) -> lock_core::Result<ObtainOutcome> {
        if !is_record(req.key) {
            self.obtains.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.obtain(req).await
    }
    async fn prolongate(&self, req: ProlongRequest<'_>) -> lock_core::Result<ProlongOutcome> {
        if !is_record(req.key) {
            self.prolongs.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.prolongate(req).await
    }
    async fn prolongate_many(
        &self,
        reqs: &[ProlongRequest<'_>],
    ) -> Vec<lock_core::Result<ProlongOutcome>> {
        self.prolongs
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        let started = Instant::now();
        let answers = self.inner.prolongate_many(reqs).await;
        self.batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((reqs.len(), started.elapsed()));
        answers
    }
}

/// A loopback port nothing listens on: one the system just gave a listener, let go.
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port")
        .port()
}

/// `backend`, pointed at `port` where nothing listens and given a deadline of 30 s, says
/// that the connection was refused, naming the address, long before that deadline (a pool
/// that retries a refused connection would say only that time ran out, at the deadline).
pub async fn refused_early(backend: &dyn LockBackend, port: u16) {
    let (key, token, holder) = (
        Key::new("refused").expect("a valid key"),
        lock_core::backend::Token::generate().expect("OS random generator"),
        lock_core::HolderInfo::current(),
    );
    let ttl = lock_core::Ttl::from_millis(1_000).expect("a valid ttl");
    let started = Instant::now();
    let err = backend
        .obtain(ObtainRequest::new(&key, &token, ttl, &holder))
        .await
        .expect_err("nothing listens there");
    assert_eq!(err.kind(), lock_core::ErrorKind::Unavailable, "{err}");
    let said = err.to_string();
    assert!(said.contains("refused"), "{said}");
    assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
    assert!(!said.contains("deadline"), "{said}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "said after {:?}, the deadline being 30 s",
        started.elapsed()
    );
}

/// Two readers hold `key` and a writer waits (its marker keeps new readers out): the first
/// reader's release must wake nobody, since nobody can get in (a woken herd of readers
/// would only queue the writer's next attempt behind theirs), and the second one's must
/// wake the waiters. For a backend with release notifications.
pub async fn a_shared_release_that_lets_nobody_in_wakes_nobody(backend: &dyn LockBackend) {
    use lock_core::backend::{ReleaseRequest, Token};
    use lock_core::{HolderInfo, Mode, Ttl};
    let key = Key::new(crate::bench::fresh_prefix("herd")).expect("a key");
    let holder = HolderInfo::current();
    let ttl = Ttl::from_millis(30_000).expect("a ttl");
    let [first, second, writer] = [(); 3].map(|()| Token::generate().expect("a token"));
    for reader in [&first, &second] {
        let req = ObtainRequest::new(&key, reader, ttl, &holder).with_mode(Mode::READ);
        let got = backend.obtain(req).await.expect("a read obtain");
        assert!(
            matches!(got, ObtainOutcome::Acquired { .. }),
            "a reader: {got:?}"
        );
    }
    let req = ObtainRequest::new(&key, &writer, ttl, &holder).with_queue(true);
    let got = backend.obtain(req).await.expect("the writer's obtain");
    assert!(matches!(got, ObtainOutcome::Busy(_)), "the writer: {got:?}");
    let mut sub = backend
        .subscribe(&key)
        .await
        .expect("subscribe")
        .expect("a backend with release notifications");
    // Subscriptions may take a moment to reach the server (LISTEN, SUBSCRIBE).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let release = |token| ReleaseRequest {
        key: &key,
        token,
        delay_after: None,
    };
    let out = backend.release(release(&first)).await.expect("a release");
    assert_eq!(out, ReleaseOutcome::Released);
    assert!(
        !sub.released_within(Duration::from_millis(500)).await,
        "a release that let nobody in woke a waiter"
    );
    let out = backend.release(release(&second)).await.expect("a release");
    assert_eq!(out, ReleaseOutcome::Released);
    assert!(
        sub.released_within(Duration::from_secs(5)).await,
        "the last reader's release woke nobody"
    );
    let _ = backend.force_release(&key).await;
}
