//! Histories: many clients recorded under faults, and a checker of what they saw.
//!
//! The suite's other cases are scenarios written in advance, or one call at a time
//! against a model. This one records what six clients saw while they took, held, wrote
//! through a fence and gave back locks on four keys (a mutex, a semaphore of 3 permits
//! taken 1 or 2 at a time, a read-write lock, a leadership), and, on a backend with
//! release notifications, three more that pass a fifth key back and forth waiting for
//! wake-ups only (their fallback poll is 6 s), with calls cancelled at random, holds kept
//! past their ttl, releases dropped or cancelled, and, when the harness offers them, the
//! network to the server frozen, slowed and cut and the server's data lost. On a backend
//! other processes reach, two more processes of two clients each and one more client here
//! work the same keys in the namespace the harness shares
//! ([`Harness::shared_config`](crate::Harness::shared_config)), recorded on the same clock
//! (`CLOCK_MONOTONIC`) under [`PROCESSES`]. Then [`check`] holds the history to the rules
//! every backend must keep, key by key (see [`check`]'s module for each rule and why it is
//! sound).
//!
//! A failure prints the rule, the holds it names and the events that show it, and writes
//! an HTML timeline of the key (one lane per client, the holds as bars, the violating ones
//! outlined in red) and the whole history as text to files whose paths the failure gives.
//! Now and then a client inspects a key, or takes the mutex and the read-write lock
//! together (`lock_all`), and one hold in three makes a call halfway (a mode change on the
//! read-write lock, an explicit prolong elsewhere).
//!
//! ```
//! use std::time::Duration;
//! use lock_conformance::history::{check, Ask, Call, Event, History, Return};
//!
//! // Two clients each relied on an exclusive hold of "k" from 10 ms to 50 ms.
//! let ms = Duration::from_millis;
//! let obtain = |op, client, at| Event::Invoke {
//!     op, client, key: "k".into(), call: Call::Obtain { ask: Ask::Exclusive, wait: false }, at,
//! };
//! let history = History { events: vec![
//!     obtain(0, 0, ms(0)),
//!     Event::Return { op: 0, result: Return::Obtained { fencing: 1 }, at: ms(10) },
//!     obtain(1, 1, ms(1)),
//!     Event::Return { op: 1, result: Return::Obtained { fencing: 2 }, at: ms(11) },
//!     Event::Claim { hold: 0, at: ms(50) },
//!     Event::Claim { hold: 1, at: ms(50) },
//! ]};
//! let violation = check(&history).unwrap_err();
//! assert_eq!(violation.ops, vec![0, 1]);
//! println!("{violation}");
//! ```

mod check;
mod record;
mod recorder;
mod timeline;
mod workload;

#[cfg(test)]
mod tests;

pub use check::{check, Rule, Verdict, Violation, PROGRESS_BOUND};
pub use record::{Ask, At, Call, Event, Fault, History, OpId, Return};
pub use recorder::{monotonic_ns, Recorder};
pub use timeline::render;
pub use workload::{
    run, run_process, Workload, LEADER, MUTEX, PERMITS, PROCESSES, READ_WRITE, SEMAPHORE, WAKE,
};

use crate::{CaseResult, Failure, Suite};

/// Writes the timeline of `violation`'s key to a new file in the temporary directory and
/// returns its path.
///
/// # Errors
/// When the file cannot be written.
pub fn write_timeline(
    name: &str,
    history: &History,
    violation: &Violation,
) -> std::io::Result<std::path::PathBuf> {
    write_file(
        name,
        ".html",
        &render(history, &violation.key, Some(violation)),
    )
}

/// Writes `text` to a new file `lock-history-<name>-<random><suffix>` in the temporary
/// directory, which is kept.
fn write_file(name: &str, suffix: &str, text: &str) -> std::io::Result<std::path::PathBuf> {
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let file = tempfile::Builder::new()
        .prefix(&format!("lock-history-{safe}-"))
        .suffix(suffix)
        .tempfile()?;
    let (_, path) = file.keep().map_err(|e| e.error)?;
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Records a workload of many clients under faults ([`Workload::from_env`]) and checks
/// its history: no two holds relied on at once where the contract forbids it, shares
/// within their capacity, fencing tokens and terms growing in real-time order, the fence
/// never admitting a lower token, every `Busy` naming a client that may have held the key.
pub async fn histories_check_out(suite: &Suite) -> CaseResult {
    let workload = Workload::from_env(suite);
    let history = run(suite, workload).await?;
    let checking = std::time::Instant::now();
    let checked = check(&history);
    let took = checking.elapsed();
    match checked {
        Ok(verdict) => {
            crate::check::report(format_args!(
                "{}: histories_check_out: {verdict:?} in {:?}, checked in {took:.1?} (seed {})",
                suite.name, workload.duration, workload.seed
            ));
            if verdict.holds == 0 {
                return Err(Failure(format!(
                    "the workload obtained no hold in {:?}: nothing was checked",
                    workload.duration
                )));
            }
            Ok(())
        }
        Err(violation) => {
            let page = match write_timeline(suite.name, &history, &violation) {
                Ok(path) => format!("timeline: {}", path.display()),
                Err(e) => format!("(the timeline could not be written: {e})"),
            };
            let whole = match write_file(suite.name, ".txt", &history.to_string()) {
                Ok(path) => format!("the whole history: {}", path.display()),
                Err(e) => format!("(the history could not be written: {e})"),
            };
            Err(Failure(format!(
                "{violation}\n{page}\n{whole}\n(seed {}: LOCK_CONFORMANCE_SEED={} runs the same \
                 choices; the threads' timing differs)",
                workload.seed, workload.seed
            )))
        }
    }
}
