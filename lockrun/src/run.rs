//! The main form: obtain, run COMMAND under a watchdog, forward signals, release.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use lock_config::LockConfig;
use lock_core::observe::Observer;
use lock_core::{Attempt, Busy, BusyReason, Key, Mode, ReleaseOutcome, Ttl};
use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

use crate::child::Command;
use crate::metrics_file::MetricsFile;
use crate::{fail, RunArgs, EXIT_BUSY, EXIT_CONFIG, EXIT_LOST};

/// The signals passed on to COMMAND.
const FORWARDED: [(SignalKind, Signal); 6] = [
    (SignalKind::terminate(), Signal::SIGTERM),
    (SignalKind::interrupt(), Signal::SIGINT),
    (SignalKind::hangup(), Signal::SIGHUP),
    (SignalKind::quit(), Signal::SIGQUIT),
    (SignalKind::user_defined1(), Signal::SIGUSR1),
    (SignalKind::user_defined2(), Signal::SIGUSR2),
];

/// How long lockrun waits on its way out for the lock calls left running in the
/// background (each has its backend's deadline, which ends it sooner).
const SETTLE: Duration = Duration::from_secs(10);

/// Runs COMMAND under the lock; with `--metrics-file`, writes the run's metrics on the
/// way out, whatever the exit.
pub(crate) async fn run(
    config: LockConfig,
    key: Key,
    args: &RunArgs,
    command: Vec<OsString>,
) -> ExitCode {
    let Some(path) = &args.metrics_file else {
        return run_locked(config, key, args, command, None).await;
    };
    let metrics = match MetricsFile::install(path) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("lockrun: --metrics-file: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let code = run_locked(config, key, args, command, Some(&metrics)).await;
    if let Err(e) = metrics.write() {
        eprintln!(
            "lockrun: could not write the metrics to {}: {e}",
            path.display()
        );
    }
    code
}

async fn run_locked(
    config: LockConfig,
    key: Key,
    args: &RunArgs,
    command: Vec<OsString>,
    metrics: Option<&MetricsFile>,
) -> ExitCode {
    // Checked before anything runs: refused after COMMAND, it would leave the lock held
    // for a ttl.
    if !args.delay_after.is_zero() {
        if let Err(e) = Ttl::new(args.delay_after) {
            eprintln!("lockrun: --delay-after: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    }
    let mut locker = match config.locker().await {
        Ok(l) => l,
        Err(e) => return fail(&e),
    };
    if let Some(metrics) = metrics {
        let observer: Arc<dyn Observer> = match locker.key(key.as_str()) {
            Ok(full) => metrics.observer(&full),
            Err(e) => return fail(&e),
        };
        locker = locker.with_observer(observer);
    }
    let builder = match (args.permits, args.shared) {
        (Some(n), _) => locker
            .semaphore(key.as_str(), n)
            .weight(args.weight.unwrap_or(1)),
        (None, true) => locker.read(key.as_str()),
        (None, false) => locker.lock(key.as_str()),
    };
    let mut builder = builder.ttl(args.ttl).wait(args.wait).watchdog();
    if let Some(m) = &args.metadata {
        builder = builder.metadata(m.clone());
    }
    if args.dont_queue {
        builder = builder.dont_queue();
    }
    // Listen for signals before the wait, so that a SIGTERM while waiting is not lost.
    let mut signals = Vec::new();
    for (kind, sig) in FORWARDED {
        match signal(kind) {
            Ok(s) => signals.push((s, sig)),
            Err(e) => eprintln!("lockrun: cannot catch {sig}: {e}"),
        }
    }
    let guard = tokio::select! {
        attempt = builder.obtain() => match attempt {
            Ok(Attempt::Obtained(g)) => g,
            Ok(Attempt::Busy(busy)) => {
                report_busy(&key, &busy, args.wait);
                return ExitCode::from(EXIT_BUSY);
            }
            Err(e) => return fail(&e),
        },
        sig = next_signal(&mut signals) => {
            eprintln!("lockrun: {sig} while waiting for {key}; nothing was run");
            // The wait was dropped: the release that takes a waiting writer's marker away
            // runs in the background, and ends with the runtime unless waited for.
            if !lock_core::settle(SETTLE).await {
                eprintln!("lockrun: a clean-up of the wait did not end within {SETTLE:?}; what it left lapses with --ttl");
            }
            return ExitCode::from(128 + sig as u8);
        }
    };
    let (program, rest) = command.split_first().expect("clap requires COMMAND");
    let mode = match guard.mode() {
        Mode::Exclusive => "exclusive",
        Mode::Shared {
            capacity: Mode::UNBOUNDED,
            ..
        } => "read",
        Mode::Shared { .. } => "semaphore",
    };
    // What COMMAND needs to fence its writes: the token to hand the resource, which
    // refuses any lower one (see `--help`).
    let env = [
        ("LOCKRUN_KEY", key.as_str().to_owned()),
        ("LOCKRUN_FENCING", guard.fencing().0.to_string()),
        ("LOCKRUN_MODE", mode.to_owned()),
    ];
    let mut child = match Command::spawn(program, rest, &env) {
        Ok(c) => c,
        Err(e) => {
            let status = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!("lockrun: cannot run {}: {e}", program.to_string_lossy());
            let _ = guard.release().await;
            return ExitCode::from(status);
        }
    };
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut was_lost = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = &mut lost, if !was_lost => {
                was_lost = true;
                eprintln!(
                    "lockrun: lost the lock on {key} while {} ran; sending it SIGTERM \
                     (SIGKILL in {:?})",
                    program.to_string_lossy(),
                    args.kill_after
                );
                child.signal(Signal::SIGTERM);
                match tokio::time::timeout(args.kill_after, child.wait()).await {
                    Ok(status) => break status,
                    Err(_) => {
                        child.signal(Signal::SIGKILL);
                        break child.wait().await;
                    }
                }
            }
            sig = next_signal(&mut signals) => child.signal(sig),
        }
    };
    // The lock covers COMMAND's own children too: none may run on after the release.
    child.finish(args.kill_after).await;
    let code = match status {
        Ok(s) => s
            .code()
            .map(|c| c as u8)
            .or_else(|| s.signal().map(|n| 128 + n as u8))
            .unwrap_or(1),
        Err(e) => {
            eprintln!("lockrun: lost track of the command: {e}");
            1
        }
    };
    if was_lost {
        let _ = guard.release().await;
        return ExitCode::from(EXIT_LOST);
    }
    let released = if args.delay_after.is_zero() {
        guard.release().await
    } else {
        guard.release_after(args.delay_after).await
    };
    match released {
        Ok(ReleaseOutcome::Released | ReleaseOutcome::Decremented { .. }) => {}
        Ok(ReleaseOutcome::ReleasedLate) => {
            eprintln!("lockrun: the lock on {key} had expired before the release (nobody took it)")
        }
        Ok(ReleaseOutcome::Lost) => {
            eprintln!("lockrun: the lock on {key} was lost before the release");
            return ExitCode::from(EXIT_LOST);
        }
        Err(e) => eprintln!("lockrun: release of {key} failed, it expires by its ttl: {e}"),
    }
    ExitCode::from(code)
}

async fn next_signal(signals: &mut [(tokio::signal::unix::Signal, Signal)]) -> Signal {
    if signals.is_empty() {
        return std::future::pending().await;
    }
    let futures = signals.iter_mut().map(|(s, sig)| {
        let sig = *sig;
        Box::pin(async move {
            s.recv().await;
            sig
        })
    });
    futures_select_all(futures).await
}

/// The first of several futures to finish.
async fn futures_select_all<F: std::future::Future<Output = Signal> + Unpin>(
    futures: impl Iterator<Item = F>,
) -> Signal {
    let mut futures: Vec<F> = futures.collect();
    std::future::poll_fn(move |cx| {
        for f in futures.iter_mut() {
            if let std::task::Poll::Ready(sig) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(sig);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn report_busy(key: &Key, busy: &Busy, wait: Duration) {
    let remaining = busy.remaining.as_secs_f64();
    match &busy.holder {
        _ if !matches!(busy.reason, BusyReason::Held | BusyReason::Cooling) => eprintln!(
            "lockrun: {key} is busy: {busy}; gave up after waiting {:.1}s",
            wait.as_secs_f64()
        ),
        Some(h) => {
            let meta = h
                .metadata
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            eprintln!(
                "lockrun: {key} is held by {} pid {}{meta} for another {remaining:.1}s; \
                 gave up after waiting {:.1}s",
                h.host,
                h.pid,
                wait.as_secs_f64()
            )
        }
        None => eprintln!(
            "lockrun: {key} is cooling down for another {remaining:.1}s; gave up after \
             waiting {:.1}s",
            wait.as_secs_f64()
        ),
    }
}
