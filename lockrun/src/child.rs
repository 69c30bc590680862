//! COMMAND and every process it starts, as one process group that lockrun answers for.
//!
//! The lock covers everything COMMAND does, its own children included, so:
//! - COMMAND runs in a process group of its own, and every signal lockrun passes on (a
//!   forwarded SIGTERM, the SIGTERM and SIGKILL after a lost lock) goes to the whole group;
//! - when COMMAND exits and processes of its group still run, they get SIGTERM, then SIGKILL
//!   after `--kill-after`; the lock is released only once the group is gone;
//! - a guardian process (lockrun itself, run as the hidden `guard` subcommand) holds the
//!   read end of a pipe whose write end only lockrun holds: when lockrun dies, however
//!   (even `kill -9`), the pipe closes and the guardian kills the group, so nothing runs on
//!   without the lock.
//!
//! The group is the guardian's own: the guardian starts first, as the leader of a new
//! group, learns that it is to kill that group, and only then is COMMAND started into it.
//! So no instant passes with COMMAND running and the guardian not knowing whom to kill
//! (lockrun killed right after the spawn), and the group's id cannot be reused by another
//! group while the guardian lives, which it does until lockrun dismisses it after the group
//! is otherwise gone (lockrun killed after it reaped COMMAND). The guardian ignores the
//! signals lockrun passes on to the group; it is not counted as a process of COMMAND's.
//! Where `/proc` is missing (not Linux), COMMAND leads a group of its own as before, and
//! the guardian is told it after the spawn.
//!
//! When standard input is a terminal, COMMAND stays in lockrun's group (the terminal's
//! foreground group), so that it can read the terminal and gets Ctrl-C from it directly;
//! then only COMMAND itself is signalled, and the guardian kills only COMMAND, identified
//! by its pid and its start time (a reused pid is left alone). There the guardian learns
//! the pid after the spawn: a lockrun killed by SIGKILL in between leaves COMMAND running in
//! the terminal, where its user sees it. A process that leaves the group on purpose
//! (`setsid`, `setpgid`) is out of lockrun's reach.

use std::io::{IsTerminal, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child as StdChild, ChildStdin, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// How long lockrun waits for a group that was sent SIGKILL to be gone.
const KILLED_WITHIN: Duration = Duration::from_secs(5);

/// Whom signals are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// COMMAND's process group.
    Group(Pid),
    /// COMMAND alone (it shares lockrun's group), with its start time when known: the
    /// guardian kills the pid only while the process there started then.
    Process(Pid, Option<u64>),
}

impl Target {
    fn signal(self, sig: Signal) {
        let _ = match self {
            Target::Group(pgid) => killpg(pgid, sig),
            Target::Process(pid, _) => kill(pid, sig),
        };
    }

    /// What the guardian is told to kill: `-PGID`, or `PID` and its start time, as
    /// [`Target::parse`] reads them.
    fn line(self) -> String {
        match self {
            Target::Group(pgid) => format!("-{pgid}"),
            Target::Process(pid, Some(start)) => format!("{pid} {start}"),
            Target::Process(pid, None) => pid.to_string(),
        }
    }

    /// A line of [`Target::line`]; never a target of pid 0, 1 or below, which `kill` reads
    /// as "every process" or init.
    fn parse(line: &str) -> Option<Target> {
        let target = match line.strip_prefix('-') {
            Some(pgid) => Target::Group(Pid::from_raw(pgid.parse().ok()?)),
            None => {
                let mut words = line.split(' ');
                let pid = Pid::from_raw(words.next()?.parse().ok()?);
                let start = match words.next() {
                    Some(w) => Some(w.parse().ok()?),
                    None => None,
                };
                Target::Process(pid, start)
            }
        };
        match target {
            Target::Group(p) | Target::Process(p, _) if p.as_raw() > 1 => Some(target),
            _ => None,
        }
    }

    /// Whether the target is still the one lockrun meant: a process whose start time was
    /// recorded is the same only while the pid shows that start time.
    fn still_meant(self) -> bool {
        match self {
            Target::Process(pid, Some(start)) => {
                proc_stat(pid).and_then(|s| s.start) == Some(start)
            }
            _ => true,
        }
    }
}

/// COMMAND, running.
pub(crate) struct Command {
    child: tokio::process::Child,
    target: Option<Target>,
    guardian: Option<Guardian>,
    /// The guardian, when it is a member of COMMAND's group: not one of COMMAND's
    /// processes.
    guardian_pid: Option<Pid>,
}

impl Command {
    /// Starts `program` with `args` and the variables `env` added to lockrun's own
    /// environment, in a group of its own unless standard input is a terminal, watched by
    /// a guardian.
    ///
    /// # Errors
    /// The error of the spawn (COMMAND not found, not executable).
    pub(crate) fn spawn(
        program: &std::ffi::OsStr,
        args: &[std::ffi::OsString],
        env: &[(&str, String)],
    ) -> std::io::Result<Command> {
        let isolate = !std::io::stdin().is_terminal();
        // With /proc, the guardian's own group, told to the guardian before COMMAND runs
        // (see the module's docs).
        let in_guardian_group = isolate && proc_stat(Pid::this()).is_some();
        let mut guardian = Guardian::start(in_guardian_group);
        let group = match &mut guardian {
            Some(g) if in_guardian_group => {
                let pgid = g.pid();
                g.watch(Target::Group(pgid)).then_some(pgid)
            }
            _ => None,
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        match group {
            Some(pgid) => cmd.process_group(pgid.as_raw()),
            None if isolate => cmd.process_group(0),
            None => &mut cmd,
        };
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                if let Some(g) = guardian.take() {
                    g.dismiss();
                }
                return Err(e);
            }
        };
        pause_after_spawn_for_tests();
        let target = match group {
            Some(pgid) => Some(Target::Group(pgid)),
            None => child.id().map(|id| {
                let pid = Pid::from_raw(i32::try_from(id).unwrap_or(i32::MAX));
                match isolate {
                    true => Target::Group(pid),
                    false => Target::Process(pid, proc_stat(pid).and_then(|s| s.start)),
                }
            }),
        };
        let guardian = match (guardian, target) {
            (Some(g), Some(_)) if group.is_some() => Some(g),
            (Some(mut g), Some(t)) => g.watch(t).then_some(g),
            (Some(g), None) => {
                g.dismiss();
                None
            }
            _ => None,
        };
        let guardian_pid = guardian
            .as_ref()
            .filter(|_| group.is_some())
            .map(Guardian::pid);
        Ok(Command {
            child,
            target,
            guardian,
            guardian_pid,
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
            let group_alive = |pgid| group_alive(pgid, self.guardian_pid);
            if group_alive(pgid) {
                eprintln!(
                    "lockrun: processes COMMAND started still run; sending them SIGTERM \
                     (SIGKILL in {kill_after:?}) before the lock is released"
                );
                let _ = killpg(pgid, Signal::SIGTERM);
                if !gone_within(pgid, self.guardian_pid, kill_after).await {
                    let _ = killpg(pgid, Signal::SIGKILL);
                    if !gone_within(pgid, self.guardian_pid, KILLED_WITHIN).await {
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

/// Whether any process of group `pgid` but `except` (the guardian) is alive (zombies
/// waiting to be reaped do not count: they do nothing more, and where no init reaps them
/// they would stay for ever).
fn group_alive(pgid: Pid, except: Option<Pid>) -> bool {
    match live_members(pgid, except) {
        Some(n) => n > 0,
        // No /proc (then the guardian is not in the group): a signal 0 counts zombies too,
        // which errs on the side of waiting.
        None => killpg(pgid, None).is_ok(),
    }
}

/// How many processes of group `pgid` but `except` are alive and not zombies, read from
/// /proc.
fn live_members(pgid: Pid, except: Option<Pid>) -> Option<usize> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut live = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let pid = Pid::from_raw(pid);
        let Some(stat) = proc_stat(pid) else { continue };
        if stat.pgrp == pgid && !stat.ended && Some(pid) != except {
            live += 1;
        }
    }
    Some(live)
}

/// What lockrun reads of a process in `/proc/PID/stat`.
struct ProcStat {
    /// A zombie, or dead.
    ended: bool,
    /// Its process group.
    pgrp: Pid,
    /// When it started, in clock ticks since boot: with the pid, it names one process.
    start: Option<u64>,
}

/// `/proc/PID/stat`, or `None` without /proc or that process.
fn proc_stat(pid: Pid) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime stime cutime cstime priority nice num_threads itrealvalue starttime ...;
    // comm may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some(ProcStat {
        ended: matches!(*fields.first()?, "Z" | "X"),
        pgrp: Pid::from_raw(fields.get(2)?.parse().ok()?),
        start: fields.get(19).and_then(|f| f.parse().ok()),
    })
}

/// Debug builds only: waits `LOCKRUN_TEST_PAUSE_AFTER_SPAWN_MS` right after COMMAND was
/// started, so that a test can kill lockrun at that very point. Release builds never read
/// the variable.
fn pause_after_spawn_for_tests() {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("LOCKRUN_TEST_PAUSE_AFTER_SPAWN_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// Polls until group `pgid` (but `except`) is gone or `within` has passed; true when gone.
async fn gone_within(pgid: Pid, except: Option<Pid>, within: Duration) -> bool {
    // `--kill-after` may be as long as a duration can be: past what an instant can hold,
    // the wait has no end but the group's.
    let deadline = tokio::time::Instant::now().checked_add(within);
    loop {
        if !group_alive(pgid, except) {
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
    /// Starts the guardian: this very program, as `lockrun guard`, leading a group of its
    /// own (with `hosts_group`, the group COMMAND will join). `None`, with a warning, when
    /// it cannot be started (COMMAND then runs unguarded, as before lockrun had one).
    fn start(hosts_group: bool) -> Option<Guardian> {
        let started = std::env::current_exe().and_then(|exe| {
            std::process::Command::new(exe)
                .arg("guard")
                .env(
                    "LOCKRUN_GUARD_HOSTS_GROUP",
                    if hosts_group { "1" } else { "0" },
                )
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

    /// The guardian's pid: the id of the group it leads.
    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.process.id()).unwrap_or(i32::MAX))
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

/// `lockrun guard`: reads whom to kill (a line of [`Target::line`]) from standard input,
/// then waits; kills that target with SIGKILL when standard input closes (lockrun died)
/// unless it was told `done` first. Returns the exit status.
///
/// A guardian that leads COMMAND's group hears every signal lockrun passes on to the
/// group, and the ones COMMAND's processes send to their group: it catches them and does
/// nothing, so that only lockrun's end or `done` ends it.
pub(crate) fn guard() -> std::process::ExitCode {
    let _deaf = match std::env::var("LOCKRUN_GUARD_HOSTS_GROUP").as_deref() {
        Ok("1") => Some(deaf_to_signals()),
        _ => None,
    };
    let mut lines = std::io::stdin().lines();
    let Some(Ok(target)) = lines.next() else {
        return std::process::ExitCode::SUCCESS;
    };
    let done = matches!(lines.next(), Some(Ok(line)) if line == "done");
    if done {
        return std::process::ExitCode::SUCCESS;
    }
    match Target::parse(&target) {
        Some(t) if t.still_meant() => {
            eprintln!("lockrun guard: lockrun is gone; killing {}", t.line());
            t.signal(Signal::SIGKILL);
        }
        Some(t) => eprintln!(
            "lockrun guard: lockrun is gone, and {} is another process by now; leaving it",
            t.line()
        ),
        None => {}
    }
    std::process::ExitCode::SUCCESS
}

/// Catches the signals lockrun passes on (and the others whose default ends a process and
/// that can be caught), to do nothing with them, for as long as the value lives.
fn deaf_to_signals() -> Option<(tokio::runtime::Runtime, Vec<tokio::signal::unix::Signal>)> {
    use tokio::signal::unix::{signal, SignalKind};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .ok()?;
    let kinds = [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
        SignalKind::alarm(),
        SignalKind::pipe(),
    ];
    let caught = runtime.block_on(async {
        kinds
            .into_iter()
            .filter_map(|kind| signal(kind).ok())
            .collect::<Vec<_>>()
    });
    Some((runtime, caught))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_line_reads_back_as_written() {
        for t in [
            Target::Group(Pid::from_raw(4242)),
            Target::Process(Pid::from_raw(4242), Some(987_654)),
            Target::Process(Pid::from_raw(4242), None),
        ] {
            assert_eq!(Target::parse(&t.line()), Some(t));
        }
        for bad in ["", "-", "-1", "0", "1", "-0", "x", "12 y", "-5x"] {
            assert_eq!(Target::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_process_with_another_start_time_is_not_the_one_meant() {
        let me = Pid::this();
        let start = proc_stat(me).and_then(|s| s.start).expect("Linux /proc");
        assert!(Target::Process(me, Some(start)).still_meant());
        assert!(!Target::Process(me, Some(start + 1)).still_meant());
        assert!(Target::Process(me, None).still_meant());
    }

    #[test]
    fn this_process_is_alive_in_its_group_unless_excepted() {
        let me = Pid::this();
        let pgrp = proc_stat(me).expect("Linux /proc").pgrp;
        assert_eq!(pgrp, nix::unistd::getpgrp());
        let all = live_members(pgrp, None).unwrap();
        assert!(all >= 1);
        assert_eq!(live_members(pgrp, Some(me)).unwrap(), all - 1);
    }
}
