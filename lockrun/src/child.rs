//! COMMAND and every process it starts, as one process group that lockrun answers for.
//!
//! The lock covers everything COMMAND does, its own children included, so:
//! - COMMAND runs in a process group of its own, and every signal lockrun passes on (a
//!   forwarded SIGTERM, the SIGTERM and SIGKILL after a lost lock) goes to the whole group;
//! - when COMMAND exits and processes of its group still run, they get SIGTERM, then SIGKILL
//!   after `--kill-after`; the lock is released only once the group is gone;
//! - a guardian process (lockrun itself, run as the hidden `guard` subcommand, in a group of
//!   its own) holds the read end of a pipe whose write end only lockrun holds: when lockrun
//!   dies, however (even `kill -9`), the pipe closes and the guardian kills the group, so
//!   nothing runs on without the lock.
//!
//! When standard input is a terminal, COMMAND stays in lockrun's group (the terminal's
//! foreground group), so that it can read the terminal and gets Ctrl-C from it directly;
//! then only COMMAND itself is signalled, and the guardian kills only COMMAND. A process
//! that leaves the group on purpose (`setsid`, `setpgid`) is out of lockrun's reach.

use std::io::{IsTerminal, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child as StdChild, ChildStdin, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// How long lockrun waits for a group that was sent SIGKILL to be gone.
const KILLED_WITHIN: Duration = Duration::from_secs(5);

/// Whom signals are for.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// COMMAND's own process group.
    Group(Pid),
    /// COMMAND alone (it shares lockrun's group).
    Process(Pid),
}

impl Target {
    fn signal(self, sig: Signal) {
        let _ = match self {
            Target::Group(pgid) => killpg(pgid, sig),
            Target::Process(pid) => kill(pid, sig),
        };
    }

    /// What the guardian is told to kill: `-PGID` or `PID`, as `kill(1)` writes them.
    fn line(self) -> String {
        match self {
            Target::Group(pgid) => format!("-{pgid}"),
            Target::Process(pid) => pid.to_string(),
        }
    }
}

/// COMMAND, running.
pub(crate) struct Command {
    child: tokio::process::Child,
    target: Option<Target>,
    guardian: Option<Guardian>,
}

impl Command {
    /// Starts `program` with `args`, in a group of its own unless standard input is a
    /// terminal, watched by a guardian.
    ///
    /// # Errors
    /// The error of the spawn (COMMAND not found, not executable).
    pub(crate) fn spawn(
        program: &std::ffi::OsStr,
        args: &[std::ffi::OsString],
    ) -> std::io::Result<Command> {
        let isolate = !std::io::stdin().is_terminal();
        // Started first, so that no instant passes with COMMAND running and nobody to kill
        // it if lockrun dies.
        let guardian = Guardian::start();
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args);
        if isolate {
            cmd.process_group(0);
        }
        let child = cmd.spawn()?;
        let target = child.id().map(|id| {
            let pid = Pid::from_raw(i32::try_from(id).unwrap_or(i32::MAX));
            if isolate {
                Target::Group(pid)
            } else {
                Target::Process(pid)
            }
        });
        let guardian = match (guardian, target) {
            (Some(mut g), Some(t)) => g.watch(t).then_some(g),
            _ => None,
        };
        Ok(Command {
            child,
            target,
            guardian,
        })
    }

    /// Sends `sig` to COMMAND's group (or to COMMAND alone; see the module's docs).
    pub(crate) fn signal(&self, sig: Signal) {
        if let Some(target) = self.target {
            target.signal(sig);
        }
    }

    /// Waits for COMMAND itself to exit.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is lost by dropping the future; call again.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// After COMMAND exited: stops what is left of its group (SIGTERM, then SIGKILL after
    /// `kill_after`) and waits until the group is gone, so that the lock can be released.
    /// Then sends the guardian away.
    pub(crate) async fn finish(mut self, kill_after: Duration) {
        if let Some(Target::Group(pgid)) = self.target {
            if group_alive(pgid) {
                eprintln!(
                    "lockrun: processes COMMAND started still run; sending them SIGTERM \
                     (SIGKILL in {kill_after:?}) before the lock is released"
                );
                let _ = killpg(pgid, Signal::SIGTERM);
                if !gone_within(pgid, kill_after).await {
                    let _ = killpg(pgid, Signal::SIGKILL);
                    if !gone_within(pgid, KILLED_WITHIN).await {
                        eprintln!(
                            "lockrun: COMMAND's process group {pgid} outlived SIGKILL by \
                             {KILLED_WITHIN:?}; releasing the lock anyway"
                        );
                    }
                }
            }
        }
        if let Some(guardian) = self.guardian.take() {
            guardian.dismiss();
        }
    }
}

/// Whether any process of group `pgid` is alive (zombies waiting to be reaped do not count:
/// they do nothing more, and where no init reaps them they would stay for ever).
fn group_alive(pgid: Pid) -> bool {
    match live_members(pgid) {
        Some(n) => n > 0,
        // No /proc: a signal 0 counts zombies too, which errs on the side of waiting.
        None => killpg(pgid, None).is_ok(),
    }
}

/// How many processes of group `pgid` are alive and not zombies, read from /proc.
fn live_members(pgid: Pid) -> Option<usize> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut live = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let (Some(state), Some(_ppid), Some(pgrp)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if pgrp == pgid.to_string() && state != "Z" && state != "X" {
            live += 1;
        }
    }
    Some(live)
}

/// Polls until group `pgid` is gone or `within` has passed; true when gone.
async fn gone_within(pgid: Pid, within: Duration) -> bool {
    // `--kill-after` may be as long as a duration can be: past what an instant can hold,
    // the wait has no end but the group's.
    let deadline = tokio::time::Instant::now().checked_add(within);
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The process that kills COMMAND's group if lockrun dies first.
struct Guardian {
    process: StdChild,
    pipe: ChildStdin,
}

impl Guardian {
    /// Starts the guardian: this very program, as `lockrun guard`. `None`, with a warning,
    /// when it cannot be started (COMMAND then runs unguarded, as before lockrun had one).
    fn start() -> Option<Guardian> {
        let started = std::env::current_exe().and_then(|exe| {
            std::process::Command::new(exe)
                .arg("guard")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                // Its own group: Ctrl-C on the terminal, or a signal to lockrun's group, must
                // not take it away while COMMAND runs.
                .process_group(0)
                .spawn()
        });
        match started {
            Ok(mut process) => {
                let pipe = process.stdin.take()?;
                Some(Guardian { process, pipe })
            }
            Err(e) => {
                eprintln!(
                    "lockrun: cannot start the guardian that stops COMMAND if lockrun is \
                     killed: {e}; running without it"
                );
                None
            }
        }
    }

    /// Tells the guardian whom to kill; false if it is gone.
    fn watch(&mut self, target: Target) -> bool {
        writeln!(self.pipe, "{}", target.line())
            .and_then(|()| self.pipe.flush())
            .is_ok()
    }

    /// Sends the guardian away without killing anything, and reaps it.
    fn dismiss(mut self) {
        let _ = writeln!(self.pipe, "done");
        drop(self.pipe);
        let _ = self.process.wait();
    }
}

/// `lockrun guard`: reads whom to kill (`-PGID` or `PID`) from standard input, then waits;
/// kills that target with SIGKILL when standard input closes (lockrun died) unless it was
/// told `done` first. Returns the exit status.
pub(crate) fn guard() -> std::process::ExitCode {
    let mut lines = std::io::stdin().lines();
    let Some(Ok(target)) = lines.next() else {
        return std::process::ExitCode::SUCCESS;
    };
    let done = matches!(lines.next(), Some(Ok(line)) if line == "done");
    if done {
        return std::process::ExitCode::SUCCESS;
    }
    let target = match target.strip_prefix('-') {
        Some(pgid) => pgid.parse().ok().map(|n| Target::Group(Pid::from_raw(n))),
        None => target
            .parse()
            .ok()
            .map(|n| Target::Process(Pid::from_raw(n))),
    };
    match target {
        // Never 0, 1 or a negative number read as "every process".
        Some(t @ (Target::Group(p) | Target::Process(p))) if p.as_raw() > 1 => {
            eprintln!("lockrun guard: lockrun is gone; killing {}", t.line());
            t.signal(Signal::SIGKILL);
        }
        _ => {}
    }
    std::process::ExitCode::SUCCESS
}
