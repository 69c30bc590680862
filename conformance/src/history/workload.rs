//! The workload: clients that take, hold, write through a fence and give back locks on a
//! few keys, while faults are injected, each call recorded in a history.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lock_core::fence::MemoryFence;
use lock_core::{Attempt, Busy, Fencing, LockBackend, Locker, Result as LockResult, Retry};
use tokio::time::Instant;

use super::record::{Ask, Call, Fault, OpId, Recorder, Return};
use crate::harness::ms;
use crate::worker::{spawn, wait_all, HistoryJob, Job};
use crate::{Failure, Suite};

/// The keys of the workload, each taken one way, so that each has one capacity.
pub const MUTEX: &str = "history/mutex";
/// Taken as 1 or 2 of [`PERMITS`] permits.
pub const SEMAPHORE: &str = "history/semaphore";
/// Taken for reading (shared) or writing (exclusive).
pub const READ_WRITE: &str = "history/read-write";
/// Campaigned for.
pub const LEADER: &str = "history/leader";
/// Taken and given back by three clients that wait for wake-ups (a backend with release
/// notifications only): the key the progress rule watches.
pub const WAKE: &str = "history/wake";
/// The semaphore's permits.
pub const PERMITS: u32 = 3;
/// Sends `sig` to the process `pid`; whether it was sent.
fn signal(pid: u32, sig: rustix::process::Signal) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| rustix::process::kill_process(pid, sig).is_ok())
}

/// What the keys of the clients of several processes are recorded under: they lock the
/// same key names in another namespace, the one the harness shares with other processes.
pub const PROCESSES: &str = "processes:";

/// How long and how hard the workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Clients (tasks), each with a locker of its own.
    pub clients: usize,
    /// How long the clients run.
    pub duration: Duration,
    /// Whether faults are injected (when the harness offers them).
    pub faults: bool,
    /// The seed of the clients' choices.
    pub seed: u64,
}

impl Workload {
    /// Six clients for `LOCK_CONFORMANCE_HISTORY_SECS` seconds (3 by default: CI's run),
    /// faults on, from the suite's seed.
    pub fn from_env(suite: &Suite) -> Self {
        let secs = std::env::var("LOCK_CONFORMANCE_HISTORY_SECS")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(3.0);
        Workload {
            clients: 6,
            duration: Duration::from_secs_f64(secs),
            faults: true,
            seed: suite.sequence_seed(),
        }
    }
}

/// The workload's choices, from its seed.
struct Rng(fastrand::Rng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(fastrand::Rng::with_seed(seed))
    }

    /// One of `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0.u64(0..n.max(1))
    }

    /// True one time in `n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// Milliseconds in `from..to`.
    fn millis(&mut self, from: u64, to: u64) -> Duration {
        ms(self.0.u64(from..to.max(from + 1)))
    }
}

/// The client a `Busy` names, by the metadata each client's locker sets (`c<n>`).
fn named(busy: &Busy) -> Option<usize> {
    busy.holder
        .as_ref()?
        .metadata
        .as_deref()?
        .strip_prefix('c')?
        .parse()
        .ok()
}

fn failed(e: &lock_core::Error) -> Return {
    Return::Failed {
        kind: format!("{:?}", e.kind()),
        message: e.to_string(),
    }
}

fn obtained<T>(r: &LockResult<Attempt<T>>, fencing: impl Fn(&T) -> Fencing) -> Return {
    match r {
        Ok(Attempt::Obtained(g)) => Return::Obtained {
            fencing: fencing(g).0,
        },
        Ok(Attempt::Busy(b)) => Return::Busy { holder: named(b) },
        Err(e) => failed(e),
    }
}

/// What a client holds while it works: a guard or a leadership.
enum Held {
    Guard(lock_core::LockGuard),
    Leader(lock_core::Leadership),
}

impl Held {
    fn valid(&self) -> bool {
        match self {
            Held::Guard(g) => !g.is_lost() && !g.remaining().is_zero(),
            Held::Leader(l) => !l.is_lost() && !l.remaining().is_zero(),
        }
    }

    fn fencing(&self) -> Fencing {
        match self {
            Held::Guard(g) => g.fencing(),
            Held::Leader(l) => l.term(),
        }
    }

    /// Resolves when the lost signal fires.
    fn lost(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let token = match self {
            Held::Guard(g) => g.lost_token(),
            Held::Leader(l) => l.lost_token(),
        };
        Box::pin(token.cancelled_owned())
    }

    async fn release(self) -> LockResult<lock_core::ReleaseOutcome> {
        match self {
            Held::Guard(g) => g.release().await,
            Held::Leader(l) => l.resign().await,
        }
    }
}

/// What a client records through: its number, the recorder, the fence its writes go
/// through (none for the clients of several processes: each process would have a fence
/// of its own), and the label its keys are recorded under (the keys of another namespace
/// are other locks).
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) n: usize,
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) fence: Option<Arc<MemoryFence>>,
    pub(crate) label: &'static str,
}

impl Ctx {
    /// `key` as the history names it.
    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.label)
    }

    /// A write with `fencing` through the fence, if the client has one, recorded.
    fn write(&self, op: OpId, key: &str, fencing: Fencing) {
        let Some(fence) = &self.fence else {
            return;
        };
        match fence.write(&self.key(key), fencing, || self.recorder.now()) {
            Ok(at) => self.recorder.write(op, at, true),
            Err(_) => self.recorder.write(op, self.recorder.now(), false),
        }
    }
}

/// One client's run: obtain, hold (claiming and writing), give back, until `end`.
pub(crate) async fn client(
    ctx: Ctx,
    backend: Arc<dyn LockBackend>,
    shared: bool,
    end: Instant,
    seed: u64,
) -> LockResult<()> {
    let n = ctx.n;
    let recorder = &ctx.recorder;
    let mut rng = Rng::new(seed.wrapping_add(n as u64 + 1));
    let locker = Locker::new(backend)
        .with_metadata(format!("c{n}"))?
        .with_retry(Retry::exponential(ms(2), ms(40)).notified());
    while Instant::now() < end {
        if rng.one_in(7) {
            both(&ctx, &locker, &mut rng).await;
            continue;
        }
        let kind = if shared {
            rng.below(5)
        } else {
            rng.below(2) * 4
        };
        let wait = rng.one_in(2);
        let ttl = rng.millis(150, 600);
        let patience = if wait { rng.millis(50, 600) } else { ms(0) };
        let (key, ask) = match kind {
            0 => (MUTEX, Ask::Exclusive),
            1 => (
                SEMAPHORE,
                Ask::Shared {
                    capacity: PERMITS,
                    weight: 1 + rng.below(2) as u32,
                },
            ),
            2 => (
                READ_WRITE,
                Ask::Shared {
                    capacity: lock_core::Mode::UNBOUNDED,
                    weight: 1,
                },
            ),
            3 => (READ_WRITE, Ask::Exclusive),
            _ => (LEADER, Ask::Leader),
        };
        let watchdog = ask == Ask::Leader || rng.one_in(3);
        // One call in eight is cancelled after a few milliseconds.
        let cancel = rng.one_in(8).then(|| rng.millis(0, 30));
        let call = Call::Obtain { ask, wait };
        let obtain = async {
            match ask {
                Ask::Leader => {
                    let campaign = locker
                        .elect(key)
                        .ttl(ttl)
                        .wait(patience)
                        .identity(format!("c{n}"));
                    let r = recorder
                        .call(n, &ctx.key(key), call, campaign.lead(), |r| {
                            obtained(r, |l: &lock_core::Leadership| l.term())
                        })
                        .await;
                    (r.0, r.1.map(|a| a.obtained().map(Held::Leader)))
                }
                _ => {
                    let builder = match ask {
                        Ask::Shared {
                            capacity: lock_core::Mode::UNBOUNDED,
                            ..
                        } => locker.read(key),
                        Ask::Shared { weight, .. } => locker.semaphore(key, PERMITS).weight(weight),
                        _ if key == READ_WRITE => locker.write(key),
                        _ => locker.lock(key),
                    };
                    let builder = builder.ttl(ttl).wait(patience);
                    let builder = if watchdog {
                        builder.watchdog()
                    } else {
                        builder
                    };
                    let r = recorder
                        .call(n, &ctx.key(key), call, builder.obtain(), |r| {
                            obtained(r, lock_core::LockGuard::fencing)
                        })
                        .await;
                    (r.0, r.1.map(|a| a.obtained().map(Held::Guard)))
                }
            }
        };
        let got = match cancel {
            Some(after) => match tokio::time::timeout(after, obtain).await {
                Ok(r) => r,
                Err(_) => continue,
            },
            None => obtain.await,
        };
        let (op, held) = match got {
            (op, Ok(Some(held))) => (op, held),
            (_, Ok(None) | Err(_)) => {
                tokio::time::sleep(rng.millis(0, 20)).await;
                continue;
            }
        };
        hold(op, held, &mut rng, &ctx, key, ttl).await;
    }
    Ok(())
}

/// Works under a hold for a while (now and then past its ttl), then gives it back: by a
/// release, a cancelled release, or by dropping it.
async fn hold(mut op: OpId, mut held: Held, rng: &mut Rng, ctx: &Ctx, key: &str, ttl: Duration) {
    let (n, recorder) = (ctx.n, &ctx.recorder);
    let lost = held.lost();
    let watcher = {
        let recorder = Arc::clone(recorder);
        tokio::spawn(async move {
            lost.await;
            recorder.lost(op);
        })
    };
    let work = ttl.mul_f64(0.2 + rng.below(130) as f64 / 100.0);
    let until = Instant::now() + work;
    // Halfway, one hold in three changes its mode (a read-write key's) or prolongs.
    let mut midway = rng.one_in(3).then(|| Instant::now() + work / 2);
    while Instant::now() < until {
        if midway.is_some_and(|at| Instant::now() >= at) {
            midway = None;
            if let Some(changed) = midway_call(op, &mut held, ctx, key, ttl).await {
                op = changed;
            }
        }
        if !recorder.claim(op, || held.valid()) {
            break;
        }
        ctx.write(op, key, held.fencing());
        tokio::time::sleep(rng.millis(3, 25)).await;
    }
    recorder.claim(op, || held.valid());
    let release = Call::Release { hold: op };
    match rng.below(10) {
        0 => drop(held),
        1 => {
            let after = rng.millis(0, 5);
            let _ = tokio::time::timeout(
                after,
                recorder.call(n, &ctx.key(key), release, held.release(), released),
            )
            .await;
        }
        _ => {
            // Its outcome is in the history; an error is one more outcome there.
            let _ = recorder
                .call(n, &ctx.key(key), release, held.release(), released)
                .await;
        }
    }
    watcher.abort();
}

/// A client of [`WAKE`]: it waits for the key with its fallback poll at 3 s, so that only
/// a wake-up gets it the key sooner, holds it up to 300 ms, releases it and stays away
/// for about two seconds.
async fn waker(
    n: usize,
    backend: Arc<dyn LockBackend>,
    recorder: Arc<Recorder>,
    end: Instant,
    seed: u64,
) -> LockResult<()> {
    let mut rng = Rng::new(seed.wrapping_add(1000 + n as u64));
    let locker = Locker::new(backend)
        .with_metadata(format!("c{n}"))?
        .with_retry(Retry::exponential(ms(3000), ms(3000)).notified());
    while Instant::now() < end {
        let call = Call::AwaitWake {
            ask: Ask::Exclusive,
        };
        let obtain = locker.lock(WAKE).ttl(ms(3000)).wait(ms(5000)).obtain();
        let (op, got) = recorder
            .call(n, WAKE, call, obtain, |r| {
                obtained(r, lock_core::LockGuard::fencing)
            })
            .await;
        if let Ok(Attempt::Obtained(guard)) = got {
            let held = Held::Guard(guard);
            let until = Instant::now() + rng.millis(50, 300);
            while Instant::now() < until && recorder.claim(op, || held.valid()) {
                tokio::time::sleep(ms(5)).await;
            }
            let release = Call::Release { hold: op };
            let _ = recorder
                .call(n, WAKE, release, held.release(), released)
                .await;
            // Away for longer than the progress bound: whoever waits now must be woken,
            // as the releaser will not take the key back in the meantime.
            tokio::time::sleep(rng.millis(1700, 2000)).await;
        }
    }
    Ok(())
}

/// A `lock_all` of the mutex and the read-write lock (both exclusive): obtained, each key
/// held and written as one hold of its own, then each released.
async fn both(ctx: &Ctx, locker: &Locker, rng: &mut Rng) {
    let (n, recorder) = (ctx.n, &ctx.recorder);
    let keys = [MUTEX, READ_WRITE];
    let wait = rng.one_in(2);
    let ttl = rng.millis(150, 600);
    let patience = rng.millis(50, 600);
    let builder = locker.lock_all(keys).ttl(ttl);
    let builder = if rng.one_in(3) {
        builder.watchdog()
    } else {
        builder
    };
    let call = Call::ObtainAll { wait };
    let obtain = async {
        if wait {
            builder.wait(patience).obtain().await
        } else {
            builder.try_obtain().await
        }
    };
    let labelled = keys.map(|k| ctx.key(k));
    let labelled = [labelled[0].as_str(), labelled[1].as_str()];
    let (ops, got) = recorder
        .call_many(n, &labelled, call, obtain, |r| match r {
            Ok(Attempt::Obtained(all)) => keys
                .iter()
                .map(|key| Return::Obtained {
                    fencing: all
                        .fencing()
                        .find(|(k, _)| k.as_str() == *key)
                        .map_or(0, |(_, f)| f.0),
                })
                .collect(),
            // A set's Busy does not say which key was busy: its holder is named on none.
            Ok(Attempt::Busy(_)) => vec![Return::Busy { holder: None }; keys.len()],
            Err(e) => vec![failed(e); keys.len()],
        })
        .await;
    let Ok(Attempt::Obtained(all)) = got else {
        tokio::time::sleep(rng.millis(0, 20)).await;
        return;
    };
    let guards: Vec<(OpId, &str, lock_core::LockGuard)> = all
        .into_guards()
        .into_iter()
        .filter_map(|g| {
            let i = keys.iter().position(|k| *k == g.key().as_str())?;
            Some((ops[i], keys[i], g))
        })
        .collect();
    let until = Instant::now() + ttl.mul_f64(0.2 + rng.below(130) as f64 / 100.0);
    'work: while Instant::now() < until {
        for (op, key, g) in &guards {
            if !recorder.claim(*op, || !g.is_lost() && !g.remaining().is_zero()) {
                break 'work;
            }
            ctx.write(*op, key, g.fencing());
        }
        tokio::time::sleep(rng.millis(3, 25)).await;
    }
    for (op, key, g) in guards {
        recorder.claim(op, || !g.is_lost() && !g.remaining().is_zero());
        let _ = recorder
            .call(
                n,
                &ctx.key(key),
                Call::Release { hold: op },
                g.release(),
                released,
            )
            .await;
    }
}

/// A call in the middle of a hold: on the read-write key a mode change (an upgrade of a
/// read hold, a downgrade of the write lock), else an explicit prolong. Returns the hold's
/// new name when a mode change went through.
async fn midway_call(
    op: OpId,
    held: &mut Held,
    ctx: &Ctx,
    key: &str,
    ttl: Duration,
) -> Option<OpId> {
    let (n, recorder) = (ctx.n, &ctx.recorder);
    let labelled = ctx.key(key);
    let Held::Guard(guard) = held else {
        return None;
    };
    if key != READ_WRITE {
        let prolong = guard.prolongate(ttl);
        let _ = recorder
            .call(
                n,
                &labelled,
                Call::Prolong { hold: op },
                prolong,
                |r| match r {
                    Ok(outcome) => Return::Prolonged(format!("{outcome:?}")),
                    Err(e) => failed(e),
                },
            )
            .await;
        return None;
    }
    let shared = guard.mode().is_shared();
    let ask = if shared {
        Ask::Exclusive
    } else {
        Ask::Shared {
            capacity: lock_core::Mode::UNBOUNDED,
            weight: 1,
        }
    };
    let change = async {
        let r = if shared {
            guard.upgrade().await
        } else {
            guard.downgrade().await
        };
        (r, guard.fencing())
    };
    let (changed, (r, _)) = recorder
        .call(
            n,
            &labelled,
            Call::Change { from: op, ask },
            change,
            |(r, f)| match r {
                Ok(Attempt::Obtained(())) => Return::Obtained { fencing: f.0 },
                Ok(Attempt::Busy(b)) => Return::Busy { holder: named(b) },
                Err(e) => failed(e),
            },
        )
        .await;
    matches!(r, Ok(Attempt::Obtained(()))).then_some(changed)
}

fn released(r: &LockResult<lock_core::ReleaseOutcome>) -> Return {
    match r {
        Ok(outcome) => Return::Released(format!("{outcome:?}")),
        Err(e) => failed(e),
    }
}

/// Runs `workload` against the suite's backend (through its network faults when the
/// harness offers them: half the clients behind them, half direct), recording it.
///
/// # Errors
/// When the workload cannot start (a backend or a locker that cannot be made), or a
/// client task panicked.
pub async fn run(suite: &Suite, workload: Workload) -> Result<super::History, Failure> {
    let faulty = if workload.faults {
        suite.harness.behind_faults().await
    } else {
        None
    };
    let (behind, direct, faults) = match faulty {
        Some(f) => (f.backend, f.direct, Some(f.faults)),
        None => {
            let b = suite.harness.backend().await;
            (Arc::clone(&b), b, None)
        }
    };
    let shared = direct.capabilities().shared;
    let recorder = Arc::new(Recorder::new());
    let fence = Arc::new(MemoryFence::new());
    let end = Instant::now() + workload.duration;
    let mut tasks = Vec::new();
    for n in 0..workload.clients {
        let backend = if n % 2 == 0 {
            Arc::clone(&direct)
        } else {
            Arc::clone(&behind)
        };
        let ctx = Ctx {
            n,
            recorder: Arc::clone(&recorder),
            fence: Some(Arc::clone(&fence)),
            label: "",
        };
        tasks.push(tokio::spawn(client(
            ctx,
            backend,
            shared,
            end,
            workload.seed,
        )));
    }
    if direct.capabilities().release_notification {
        for n in workload.clients..workload.clients + 3 {
            tasks.push(tokio::spawn(waker(
                n,
                Arc::clone(&direct),
                Arc::clone(&recorder),
                end,
                workload.seed,
            )));
        }
    }
    // A backend that other processes reach: two more processes of two clients each, and
    // one more client here, on a namespace of their own (their keys are recorded under
    // `PROCESSES`).
    let processes = async {
        if !direct.capabilities().cross_process {
            return Ok(Vec::new());
        }
        let Some(config) = suite.harness.shared_config().await else {
            return Ok(Vec::new());
        };
        let first = workload.clients + 3;
        let here = Ctx {
            n: first,
            recorder: Arc::clone(&recorder),
            fence: None,
            label: PROCESSES,
        };
        let backend = suite.harness.connect(&config).await;
        let mine = tokio::spawn(client(here, backend, shared, end, workload.seed));
        let dir = tempfile::tempdir().map_err(|e| Failure(format!("tempdir: {e}")))?;
        let jobs = (0..2).map(|w| Job {
            config: config.clone(),
            key: String::new(),
            keys: Vec::new(),
            mode: "history".into(),
            rounds: 0,
            ttl_ms: 0,
            out: dir.path().join(format!("history-{w}.jsonl")),
            history: Some(HistoryJob {
                first_client: first + 1 + 2 * w,
                clients: 2,
                first_op: (w + 1) * 1_000_000_000,
                epoch: recorder.epoch(),
                duration_ms: u64::try_from(workload.duration.as_millis()).unwrap_or(u64::MAX),
                seed: workload.seed,
            }),
        });
        let mut children = Vec::new();
        for job in jobs {
            children.push((spawn(suite, &job)?, job.out));
        }
        // Halfway, the first worker is stopped (SIGSTOP) for longer than most ttls, then
        // let go: a holder paused past its lock, as a long GC pause or a stopped VM does.
        if workload.faults {
            if let Some(pid) = children[0].0.id() {
                let mut rng = Rng::new(workload.seed.rotate_left(17));
                tokio::time::sleep(workload.duration / 2).await;
                let at = recorder.now();
                let pause = rng.millis(300, 900);
                if signal(pid, rustix::process::Signal::STOP) {
                    tokio::time::sleep(pause).await;
                    let _ = signal(pid, rustix::process::Signal::CONT);
                    let done = recorder.now();
                    recorder.fault_at(Fault::ProcessPaused { done }, at);
                }
            }
        }
        let logs = wait_all(children).await?;
        mine.await
            .map_err(|e| Failure(format!("a workload client panicked: {e}")))?
            .map_err(|e| Failure(format!("a workload client could not start: {e}")))?;
        let mut events = Vec::new();
        for log in logs {
            let text = std::fs::read_to_string(&log)
                .map_err(|e| Failure(format!("a history process's log {}: {e}", log.display())))?;
            for line in text.lines() {
                events
                    .push(serde_json::from_str::<super::Event>(line).map_err(|e| {
                        Failure(format!("a history process's event {line:?}: {e}"))
                    })?);
            }
        }
        Ok::<_, Failure>(events)
    };
    let injected = inject(suite, &workload, &recorder, &direct, faults.as_deref(), end);
    let (events, ()) = tokio::join!(processes, injected);
    recorder.extend(events?);
    for t in tasks {
        t.await
            .map_err(|e| Failure(format!("a workload client panicked: {e}")))?
            .map_err(|e| Failure(format!("a workload client could not start: {e}")))?;
    }
    Ok(recorder.history())
}

/// Injects faults until `end`: every 150-500 ms the network to the server frozen, cut or
/// slowed (when the harness offers it), and once, past the middle, the data lost.
async fn inject(
    suite: &Suite,
    workload: &Workload,
    recorder: &Recorder,
    direct: &Arc<dyn LockBackend>,
    faults: Option<&dyn crate::NetworkFaults>,
    end: Instant,
) {
    let mut rng = Rng::new(workload.seed);
    let mut lost_data = false;
    while Instant::now() < end {
        tokio::time::sleep(rng.millis(150, 500)).await;
        if !workload.faults || Instant::now() >= end {
            continue;
        }
        if let Some(faults) = &faults {
            match rng.below(4) {
                0 => {
                    recorder.fault(Fault::Freeze);
                    faults.freeze();
                    tokio::time::sleep(rng.millis(50, 400)).await;
                    faults.heal();
                    recorder.fault(Fault::Heal);
                }
                1 => {
                    recorder.fault(Fault::Cut);
                    faults.cut();
                }
                2 => {
                    let latency = rng.millis(20, 200);
                    recorder.fault(Fault::Latency(latency));
                    faults.delay_replies(latency);
                    tokio::time::sleep(rng.millis(200, 800)).await;
                    faults.heal();
                    recorder.fault(Fault::Heal);
                }
                _ => {}
            }
        }
        // Once a run, past its middle, the server loses its records.
        if !lost_data && Instant::now() + workload.duration / 2 >= end {
            lost_data = true;
            let at = recorder.now();
            if suite.harness.lose_data(direct).await {
                let done = recorder.now();
                recorder.fault_at(Fault::DataLoss { done }, at);
            }
        }
    }
    if let Some(faults) = faults {
        faults.heal();
    }
}

/// The history process's side: its clients on `backend` until the parent's run ends,
/// their events written to `out`, one JSON line each.
///
/// # Errors
/// When a client panicked or could not start, or `out` cannot be written.
pub async fn run_process(
    backend: Arc<dyn LockBackend>,
    job: &HistoryJob,
    out: &std::path::Path,
) -> crate::CaseResult {
    let recorder = Arc::new(Recorder::since(job.epoch, job.first_op));
    let left = Duration::from_millis(job.duration_ms).saturating_sub(recorder.now());
    let end = Instant::now() + left;
    let shared = backend.capabilities().shared;
    let mut tasks = Vec::new();
    for n in job.first_client..job.first_client + job.clients {
        let ctx = Ctx {
            n,
            recorder: Arc::clone(&recorder),
            fence: None,
            label: PROCESSES,
        };
        tasks.push(tokio::spawn(client(
            ctx,
            Arc::clone(&backend),
            shared,
            end,
            job.seed,
        )));
    }
    for t in tasks {
        t.await
            .map_err(|e| Failure(format!("a history process's client panicked: {e}")))?
            .map_err(|e| Failure(format!("a history process's client could not start: {e}")))?;
    }
    let mut text = String::new();
    for e in recorder.history().events {
        text.push_str(&serde_json::to_string(&e).map_err(|e| Failure(e.to_string()))?);
        text.push('\n');
    }
    std::fs::write(out, text).map_err(|e| Failure(format!("{}: {e}", out.display())))
}
