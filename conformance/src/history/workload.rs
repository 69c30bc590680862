//! The workload: clients that take, hold, write through a fence and give back locks on a
//! few keys, while faults are injected, each call recorded in a history.

use std::sync::Arc;
use std::time::Duration;

use lock_core::fence::MemoryFence;
use lock_core::LockBackend;
use tokio::time::Instant;

mod client;
mod process;
mod waker;

pub use process::run_process;

use client::{client, Ctx};
use process::signal;
use waker::waker;

use super::record::Fault;
use super::recorder::Recorder;
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
