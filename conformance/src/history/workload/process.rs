//! The clients of another process: a history worker's side, and the signal that pauses
//! one.

use std::sync::Arc;
use std::time::Duration;

use lock_core::LockBackend;
use tokio::time::Instant;

use super::client::{client, Ctx};
use super::PROCESSES;
use crate::history::recorder::Recorder;
use crate::worker::HistoryJob;
use crate::Failure;

/// Sends `sig` to the process `pid`; whether it was sent.
pub(super) fn signal(pid: u32, sig: rustix::process::Signal) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| rustix::process::kill_process(pid, sig).is_ok())
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
