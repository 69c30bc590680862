//! The routine kit (`lock_core::backend::routine`) and the adapter's batches
//! (`Storage::transact_many`): the whole suite on a backend whose "server" routine decides
//! exclusive holds and defers the rest, as Postgres's function and MariaDB's procedure do;
//! then what the kit owns, one case each: the hint, the one deadline across the routine
//! and the fallback, a reply to another operation, the wake rule, batches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_conformance::{async_trait, Harness};
use lock_core::backend::codec::AsIs;
use lock_core::backend::routine::{Asked, Routed, Routine, Verdict};
use lock_core::backend::rules::{step, wall_clock_floor, Ask, Clock, Record, Reply, State, Wake};
use lock_core::backend::storage::{Change, Commit, Decide, DecideMany, Snapshot, Storage};
use lock_core::backend::{
    Capabilities, ObtainRequest, ProlongRequest, ReleaseRequest, ReleaseSubscription, Token,
    Waiters,
};
use lock_core::{
    ErrorKind, HolderInfo, Key, LockBackend, Mode, ObtainOutcome, Operation, ProlongOutcome,
    ReleaseOutcome, Result, Ttl,
};

type Stored = Record<Token, HolderInfo>;

/// A "server" of records with a routine that decides exclusive holds, and knobs that bend
/// it for one case at a time.
#[derive(Debug)]
struct Local {
    records: Mutex<HashMap<String, Stored>>,
    waiters: Waiters,
    started: Instant,
    /// Calls of the routine (one per `decide` or `decide_many`), and of `transact_many`.
    routine_calls: AtomicU32,
    batches: AtomicU32,
    /// Whom decisions of the routine woke, as the kit said.
    woken: Mutex<Vec<Wake>>,
    /// Each routine call and each transaction takes this long.
    slow: Mutex<Duration>,
    /// The routine answers a release to everything.
    wrong_reply: AtomicBool,
}

impl Local {
    fn new() -> Self {
        Local {
            records: Mutex::default(),
            waiters: Waiters::default(),
            started: Instant::now(),
            routine_calls: AtomicU32::new(0),
            batches: AtomicU32::new(0),
            woken: Mutex::default(),
            slow: Mutex::new(Duration::ZERO),
            wrong_reply: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap()
    }

    fn slow(&self) -> Duration {
        *self.slow.lock().unwrap()
    }

    /// Decides `ask` on `key` under the map's lock, as a routine on a server would: `None`
    /// (defer) when the record holds shares or a writer's marker.
    fn decide_here(&self, key: &Key, ask: Ask<'_, Token, HolderInfo>) -> Result<Option<Reply>> {
        let mut records = self.records.lock().unwrap();
        let record = records.get(key.as_str());
        if record.is_some_and(|r| matches!(r.state, State::Shared(_)) || r.writer.is_some()) {
            return Ok(None);
        }
        let now = self.now();
        let mut ask = ask;
        if let Ask::Obtain(o) = &mut ask {
            o.fencing_floor = wall_clock_floor(0);
        }
        let d = step(record, Clock::nanos(now), ask);
        let reply = d
            .outcome
            .try_into_reply::<lock_core::Error>(Self::NAME, |h| Ok(h.clone()))?;
        if let Some(write) = d.write {
            records.insert(key.as_str().to_owned(), write);
        }
        Ok(Some(reply))
    }
}

impl Storage for Local {
    type Codec = AsIs;
    const NAME: &'static str = "routed";

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .shared(true)
            .release_notification(true)
            .prolong_batch(3)
    }

    async fn transact(
        &self,
        key: &Key,
        _: Operation,
        decide: &mut Decide<'_, Token, HolderInfo>,
    ) -> Result<Commit> {
        tokio::time::sleep(self.slow()).await;
        let now = self.now();
        let wake = {
            let mut records = self.records.lock().unwrap();
            let Change { write, wake } = decide(Snapshot {
                record: records.get(key.as_str()),
                clock: Clock::nanos(now),
                fencing_floor: wall_clock_floor(0),
            })?;
            if let Some(record) = write {
                records.insert(key.as_str().to_owned(), record);
            }
            wake
        };
        self.waiters.wake(key.as_str(), wake);
        Ok(Commit::Done)
    }

    async fn transact_many(
        &self,
        keys: &[&Key],
        _: Operation,
        decide: &mut DecideMany<'_, Token, HolderInfo>,
    ) -> Result<Commit> {
        self.batches.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.slow()).await;
        let now = self.now();
        let mut records = self.records.lock().unwrap();
        for (i, key) in keys.iter().enumerate() {
            let Ok(change) = decide(
                i,
                Snapshot {
                    record: records.get(key.as_str()),
                    clock: Clock::nanos(now),
                    fencing_floor: wall_clock_floor(0),
                },
            ) else {
                continue;
            };
            if let Some(record) = change.write {
                records.insert(key.as_str().to_owned(), record);
            }
        }
        Ok(Commit::Done)
    }

    async fn subscribe_releases(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        Ok(Some(self.waiters.subscribe(key.as_str())))
    }
}

impl Routine for Local {
    const BATCH: usize = 4;

    async fn decide(
        &self,
        key: &Key,
        ask: Ask<'_, Token, HolderInfo>,
        _deadline: tokio::time::Instant,
    ) -> Result<Verdict<Reply>> {
        self.routine_calls.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.slow()).await;
        if self.wrong_reply.load(Ordering::Relaxed) {
            return Ok(Verdict::Decided(Reply::Release(ReleaseOutcome::Lost)));
        }
        Ok(match self.decide_here(key, ask)? {
            Some(reply) => Verdict::Decided(reply),
            None => Verdict::Defer,
        })
    }

    async fn decide_many(
        &self,
        asks: &[Asked<'_, Token, HolderInfo>],
        _deadline: tokio::time::Instant,
    ) -> Result<Vec<Verdict<ProlongOutcome>>> {
        self.routine_calls.fetch_add(1, Ordering::Relaxed);
        let mut verdicts = Vec::new();
        for (key, ask) in asks {
            verdicts.push(match self.decide_here(key, *ask)? {
                Some(reply) => Verdict::Decided(reply.into_prolong(Self::NAME)?),
                None => Verdict::Defer,
            });
        }
        Ok(verdicts)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(2)
    }

    fn woken(&self, key: &Key, wake: Wake) {
        self.woken.lock().unwrap().push(wake);
        self.waiters.wake(key.as_str(), wake);
    }
}

/// A fresh "server" per backend.
struct Routines;

#[async_trait]
impl Harness for Routines {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(Routed::new(Arc::new(Local::new())))
    }
}

mod direct {
    lock_conformance::suite!("routed", super::Routines);
}

// Not again as semaphores of one: those go by the hint to the storage, the adapter that the
// memory backend's `as_semaphore` suite already checks; the hint's routing is checked below.

fn routed() -> (Routed<Local>, Arc<Local>) {
    let local = Arc::new(Local::new());
    (Routed::new(Arc::clone(&local)), local)
}

fn ttl() -> Ttl {
    Ttl::from_millis(30_000).unwrap()
}

fn acquired(outcome: ObtainOutcome) -> bool {
    matches!(outcome, ObtainOutcome::Acquired { .. })
}

fn prolong<'a>(key: &'a Key, token: &'a Token) -> ProlongRequest<'a> {
    ProlongRequest {
        key,
        token,
        ttl: ttl(),
    }
}

fn release<'a>(key: &'a Key, token: &'a Token) -> ReleaseRequest<'a> {
    ReleaseRequest {
        key,
        token,
        delay_after: None,
    }
}

/// A shared obtain goes to the storage, never the routine; the prolong and release of that
/// hold skip the routine too (the hint); an exclusive hold goes through it.
#[tokio::test]
async fn shared_holds_skip_the_routine_exclusive_ones_go_through_it() {
    let (b, local) = routed();
    let (key, token, holder) = (
        Key::new("k").unwrap(),
        Token::generate().unwrap(),
        HolderInfo::current(),
    );
    let shared =
        ObtainRequest::new(&key, &token, ttl(), &holder).with_mode(Mode::shared(2, 1).unwrap());
    assert!(matches!(
        b.obtain(shared).await.unwrap(),
        ObtainOutcome::Acquired { .. }
    ));
    let prolong = prolong(&key, &token);
    assert_eq!(
        b.prolongate(prolong).await.unwrap(),
        ProlongOutcome::Prolonged
    );
    assert_eq!(
        b.release(release(&key, &token)).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        local.routine_calls.load(Ordering::Relaxed),
        0,
        "a shared hold reached the routine"
    );
    let exclusive = ObtainRequest::new(&key, &token, ttl(), &holder);
    assert!(matches!(
        b.obtain(exclusive).await.unwrap(),
        ObtainOutcome::Acquired { .. }
    ));
    assert_eq!(local.routine_calls.load(Ordering::Relaxed), 1);
}

/// One deadline for the routine and the fallback after its `defer`: each taking 60 % of
/// the deadline, the call fails at the deadline (safe to retry), not at 120 %.
#[tokio::test(start_paused = true)]
async fn a_deferred_call_ends_by_one_deadline() {
    let (b, local) = routed();
    let (key, token, holder) = (
        Key::new("k").unwrap(),
        Token::generate().unwrap(),
        HolderInfo::current(),
    );
    let shared =
        ObtainRequest::new(&key, &token, ttl(), &holder).with_mode(Mode::shared(2, 1).unwrap());
    assert!(acquired(b.obtain(shared).await.unwrap()));
    *local.slow.lock().unwrap() = local.timeout() * 6 / 10;
    let other = Token::generate().unwrap();
    let started = tokio::time::Instant::now();
    // An exclusive obtain: the routine defers (the key holds a share), the storage decides.
    let err = b
        .obtain(ObtainRequest::new(&key, &other, ttl(), &holder))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retry_safe(), "{err}");
    assert_eq!(started.elapsed(), local.timeout(), "{err}");
}

/// A routine that answers another operation than it was asked is a protocol error, not
/// an outcome.
#[tokio::test]
async fn a_reply_to_another_operation_is_a_protocol_error() {
    let (b, local) = routed();
    local.wrong_reply.store(true, Ordering::Relaxed);
    let (key, token, holder) = (
        Key::new("k").unwrap(),
        Token::generate().unwrap(),
        HolderInfo::current(),
    );
    let err = b
        .obtain(ObtainRequest::new(&key, &token, ttl(), &holder))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    let err = b.inspect(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
}

/// The wake rule of decided calls: a release that frees an exclusive hold wakes one
/// waiter, a forced release all of them, a release that frees nothing nobody.
#[tokio::test]
async fn a_decided_release_wakes_one_and_a_forced_release_all() {
    let (b, local) = routed();
    let (key, token, holder) = (
        Key::new("k").unwrap(),
        Token::generate().unwrap(),
        HolderInfo::current(),
    );
    let obtained = b.obtain(ObtainRequest::new(&key, &token, ttl(), &holder));
    assert!(acquired(obtained.await.unwrap()));
    b.release(release(&key, &token)).await.unwrap();
    assert_eq!(
        b.release(release(&key, &token)).await.unwrap(),
        ReleaseOutcome::Lost
    );
    let obtained = b.obtain(ObtainRequest::new(&key, &token, ttl(), &holder));
    assert!(acquired(obtained.await.unwrap()));
    b.force_release(&key).await.unwrap();
    assert_eq!(*local.woken.lock().unwrap(), vec![Wake::One, Wake::All]);
}

/// Batches: exclusive holds decided by the routine in chunks of `Routine::BATCH`; the
/// shared ones it defers prolonged by the storage in transactions of its
/// `prolong_batch` (3), a key asked twice decided twice; every answer in its place.
#[tokio::test]
async fn a_batch_goes_through_the_routine_and_the_rest_through_transact_many() {
    let (b, local) = routed();
    let holder = HolderInfo::current();
    let keys: Vec<Key> = (0..6).map(|i| Key::new(format!("k{i}")).unwrap()).collect();
    let tokens: Vec<Token> = (0..6).map(|_| Token::generate().unwrap()).collect();
    for (i, (key, token)) in keys.iter().zip(&tokens).enumerate() {
        let mut req = ObtainRequest::new(key, token, ttl(), &holder);
        if i % 2 == 1 {
            req = req.with_mode(Mode::shared(2, 1).unwrap());
        }
        assert!(acquired(b.obtain(req).await.unwrap()));
    }
    let calls_before = local.routine_calls.load(Ordering::Relaxed);
    let stranger = Token::generate().unwrap();
    let mut reqs: Vec<ProlongRequest<'_>> = keys
        .iter()
        .zip(&tokens)
        .map(|(k, t)| prolong(k, t))
        .collect();
    reqs.push(prolong(&keys[1], &stranger));
    reqs.push(prolong(&keys[1], &tokens[1]));
    let answers = b.prolongate_many(&reqs).await;
    let answers: Vec<ProlongOutcome> = answers.into_iter().map(|a| a.unwrap()).collect();
    let mut expected = vec![ProlongOutcome::Prolonged; 8];
    expected[6] = ProlongOutcome::Lost;
    assert_eq!(answers, expected);
    // 8 requests: two chunks of the routine (4 + 4); each chunk's deferred shares (2 and 3)
    // in one transaction of the storage.
    assert_eq!(
        local.routine_calls.load(Ordering::Relaxed) - calls_before,
        2
    );
    assert_eq!(local.batches.load(Ordering::Relaxed), 2);
}

/// A storage that declares batches but keeps the default `transact_many` says so.
#[tokio::test]
async fn a_storage_that_declares_batches_without_transact_many_says_so() {
    #[derive(Debug)]
    struct NoMany(Local);
    impl Storage for NoMany {
        type Codec = AsIs;
        const NAME: &'static str = "no-many";
        fn storage_capabilities(&self) -> Capabilities {
            self.0.storage_capabilities()
        }
        async fn transact(
            &self,
            key: &Key,
            op: Operation,
            decide: &mut Decide<'_, Token, HolderInfo>,
        ) -> Result<Commit> {
            self.0.transact(key, op, decide).await
        }
    }
    let b = NoMany(Local::new());
    let (key, token) = (Key::new("k").unwrap(), Token::generate().unwrap());
    let answers = LockBackend::prolongate_many(&b, &[prolong(&key, &token)]).await;
    let err = answers[0].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("transact_many"), "{err}");
}

/// A batch whose deferred part runs past the deadline fails those locks alone: the ones the
/// routine decided were committed, and keep their answers.
#[tokio::test(start_paused = true)]
async fn a_deferred_part_past_the_deadline_fails_alone() {
    let (b, local) = routed();
    let holder = HolderInfo::current();
    let (exclusive, shared) = (Key::new("x").unwrap(), Key::new("s").unwrap());
    let (t1, t2) = (Token::generate().unwrap(), Token::generate().unwrap());
    let obtained = b.obtain(ObtainRequest::new(&exclusive, &t1, ttl(), &holder));
    assert!(acquired(obtained.await.unwrap()));
    let req =
        ObtainRequest::new(&shared, &t2, ttl(), &holder).with_mode(Mode::shared(2, 1).unwrap());
    assert!(acquired(b.obtain(req).await.unwrap()));
    // Every transaction of the storage now outlasts the call's deadline.
    *local.slow.lock().unwrap() = local.timeout() * 2;
    let answers = b
        .prolongate_many(&[prolong(&exclusive, &t1), prolong(&shared, &t2)])
        .await;
    assert_eq!(*answers[0].as_ref().unwrap(), ProlongOutcome::Prolonged);
    let err = answers[1].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}
