//! The real `lockrun` binary, as separate processes, on the file backend, Redis, Postgres,
//! MariaDB and etcd:
//! two at once on one key, exit status passing through, a lost lock killing COMMAND, SIGTERM
//! forwarded with the lock released, `inspect` JSON.
//!
//! The servers come from `test-servers`: `REDIS_URL` / `DATABASE_URL` / `MYSQL_URL`, else the local
//! default servers, else private ones started for this test process; a server that cannot
//! be had fails these tests, it never skips them. etcd is a private member started for this
//! test process (stopped by the reaper when it ends).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const LOCKRUN: &str = env!("CARGO_BIN_EXE_lockrun");

#[macro_use]
mod support;
use support::{unique, url};

struct Env {
    url: String,
    key: String,
    dir: Option<PathBuf>,
}

impl Env {
    fn new(backend: &str) -> Self {
        let (url, dir) = url(backend);
        Env {
            url,
            key: format!("job-{}", unique()),
            dir,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(LOCKRUN);
        c.env("LOCK_URL", &self.url)
            .arg("--key")
            .arg(&self.key)
            .args(args);
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        let out = self.cmd(args).output().expect("lockrun runs");
        if out.status.code() == Some(69) {
            panic!(
                "the backend at {} is unreachable: {}",
                self.url,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("lockrun runs")
    }

    fn state(&self) -> serde_json::Value {
        let out = self.output(&["inspect"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("inspect prints JSON")
    }

    fn wait_until_held(&self) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = self.state();
            if state["state"] == "held" {
                return state;
            }
            assert!(Instant::now() < deadline, "never held: {state}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("lockrun did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A file of `--metrics-file` for this test alone, removed when dropped.
struct MetricsFile(PathBuf);

impl MetricsFile {
    fn new() -> Self {
        MetricsFile(std::env::temp_dir().join(format!("lockrun-metrics-{}.prom", unique())))
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }

    /// The value of the series `name` whose labels include each of `labels`; panics
    /// showing the file when there is none.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let text = std::fs::read_to_string(&self.0).expect("lockrun wrote its metrics file");
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .find(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} with {labels:?} in:\n{text}"))
    }
}

impl Drop for MetricsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn exit_status_passes_through(backend: &str) {
    let env = Env::new(backend);
    let metrics = MetricsFile::new();
    let out = env.output(&["--metrics-file", metrics.arg(), "--", "sh", "-c", "exit 7"]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.state()["state"], "free", "released after the command");
    let key = env.key.as_str();
    let count = |name: &str, label: (&str, &str)| metrics.value(name, &[("key", key), label]);
    let obtained = ("result", "obtained");
    assert_eq!(
        count("distlock_obtain_duration_seconds_count", obtained),
        1.0
    );
    let released = ("end", "released");
    assert_eq!(count("distlock_hold_duration_seconds_count", released), 1.0);
    assert_eq!(metrics.value("distlock_locks_held", &[("key", key)]), 0.0);
    assert_eq!(
        metrics.value("distlock_obtain_pending", &[("key", key)]),
        0.0
    );
}

/// COMMAND learns its key, its fencing token and its mode from the environment: the token
/// of a later hold of the key is higher, whatever the mode.
fn the_command_gets_its_key_and_fencing_token(backend: &str) {
    let env = Env::new(backend);
    let said = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend([
            "--",
            "sh",
            "-c",
            r#"printf '%s %s %s' "$LOCKRUN_KEY" "$LOCKRUN_FENCING" "$LOCKRUN_MODE""#,
        ]);
        let out = env.output(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let [key, fencing, mode] = text.split(' ').collect::<Vec<_>>()[..] else {
            panic!("COMMAND printed {text:?}")
        };
        assert_eq!(key, env.key);
        (
            fencing.parse::<u64>().expect("a fencing token"),
            mode.to_owned(),
        )
    };
    let (first, mode) = said(&[]);
    assert_eq!(mode, "exclusive");
    let (second, mode) = said(&["--shared"]);
    assert_eq!(mode, "read");
    let (third, mode) = said(&["--permits", "2"]);
    assert_eq!(mode, "semaphore");
    assert!(
        first > 0 && first < second && second < third,
        "{first} {second} {third}"
    );
}

/// COMMAND writes its output through `lockrun fence` with the token lockrun gave it; a
/// later write with an older token (a holder that lost its lock) exits 77 and changes
/// nothing.
fn the_command_writes_through_the_fence(backend: &str) {
    let env = Env::new(backend);
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("report.txt");
    let script = format!(
        "printf 'run %s' \"$LOCKRUN_FENCING\" | {LOCKRUN} fence --file {}",
        out_file.display()
    );
    for _ in 0..2 {
        let out = env.output(&["--", "sh", "-c", &script]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let written = std::fs::read_to_string(&out_file).unwrap();
    let newest: u64 = written
        .strip_prefix("run ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the file holds {written:?}"));
    let mut late = Command::new(LOCKRUN)
        .args(["fence", "--file"])
        .arg(&out_file)
        .args(["--token", &(newest - 1).to_string()])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    late.stdin.take().unwrap().write_all(b"late").unwrap();
    let late = late.wait_with_output().unwrap();
    assert_eq!(late.status.code(), Some(77));
    let said = String::from_utf8_lossy(&late.stderr);
    assert!(said.contains(&newest.to_string()), "{said}");
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), written);
}

/// A job that moves to another backend keeps writing through its fence, between every pair
/// of backends in both directions: fencing tokens are on one scale everywhere (the wall
/// clock in microseconds). Before, etcd's tokens were revisions: a file first written under
/// any other backend refused every later write under etcd with 77.
#[test]
fn a_job_moved_to_another_backend_keeps_writing_through_its_fence() {
    let backends = ["file", "redis", "redis-watch", "postgres", "mysql", "etcd"];
    for from in backends {
        for to in backends.into_iter().filter(|&to| to != from) {
            let dir = tempfile::tempdir().unwrap();
            let report = dir.path().join("report.txt");
            let script = format!(
                "printf '%s' \"$LOCKRUN_FENCING\" | {LOCKRUN} fence --file {}",
                report.display()
            );
            let mut written = Vec::new();
            for backend in [from, to] {
                let out = Env::new(backend).output(&["--", "sh", "-c", &script]);
                assert!(
                    out.status.success(),
                    "{from} then {to}: the run under {backend} exited {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr)
                );
                written.push(std::fs::read_to_string(&report).unwrap());
            }
            assert!(
                written[0].parse::<u64>().unwrap() < written[1].parse::<u64>().unwrap(),
                "{from} then {to}: {written:?}"
            );
        }
    }
}

fn a_second_run_gets_75_or_waits(backend: &str) {
    let env = Env::new(backend);
    let mut first = env.spawn(&["--metadata", "first run", "--", "sleep", "3"]);
    let held = env.wait_until_held();
    assert_eq!(held["holder"]["pid"], first.id(), "{held}");
    assert!(held["fencing"].as_u64().is_some() && held["remaining_ms"].as_u64().is_some());
    let metrics = MetricsFile::new();
    let busy = env.output(&["--metrics-file", metrics.arg(), "--", "true"]);
    assert_eq!(busy.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert!(
        stderr.contains("is held by") && stderr.contains("first run"),
        "{stderr}"
    );
    let busy = [("key", env.key.as_str()), ("result", "busy")];
    assert_eq!(
        metrics.value("distlock_obtain_duration_seconds_count", &busy),
        1.0
    );
    let waited = env.output(&["--wait", "60s", "--", "sh", "-c", "exit 0"]);
    assert_eq!(
        waited.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    assert!(wait_exit(&mut first, Duration::from_secs(30)).success());
}

fn a_lost_lock_kills_the_command_with_76(backend: &str) {
    let env = Env::new(backend);
    let metrics = MetricsFile::new();
    let args = [
        "--ttl",
        "1s",
        "--kill-after",
        "5s",
        "--metrics-file",
        metrics.arg(),
    ];
    let mut run = env.spawn(&[&args[..], &["--", "sleep", "60"]].concat());
    env.wait_until_held();
    let broke = env.output(&["release", "--force"]);
    assert!(
        broke.status.success(),
        "{}",
        String::from_utf8_lossy(&broke.stderr)
    );
    let status = wait_exit(&mut run, Duration::from_secs(30));
    assert_eq!(status.code(), Some(76));
    // One message says the lock was lost: lockrun's own, not a log line of the library's
    // before it.
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut stderr).unwrap();
    let lost: Vec<&str> = stderr.lines().filter(|l| l.contains("lost")).collect();
    assert_eq!(lost.len(), 1, "{stderr}");
    assert!(lost[0].starts_with("lockrun: "), "{stderr}");
    let key = env.key.as_str();
    let taken = [("key", key), ("cause", "taken")];
    assert_eq!(metrics.value("distlock_locks_lost_total", &taken), 1.0);
    let lost = [("key", key), ("end", "lost")];
    assert_eq!(
        metrics.value("distlock_hold_duration_seconds_count", &lost),
        1.0
    );
    assert!(metrics.value("distlock_renewal_batch_size_count", &[("key", key)]) >= 1.0);
}

/// Three lockruns of one key as leader candidates (each waits as long as it takes; the
/// one holding the lock runs COMMAND, the leader's work). The leader's lockrun is killed
/// with SIGKILL: its guardian kills COMMAND, and another candidate leads within the ttl
/// and a margin, with a higher term, never while the old leader's COMMAND still runs.
/// COMMAND appends `TERM PID` to a shared log when it starts.
fn a_killed_leader_is_succeeded_and_never_overlapped(backend: &str) {
    let env = Env::new(backend);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("leaders.log");
    let script = format!(
        "echo \"$LOCKRUN_FENCING $$\" >> {}; exec sleep 120",
        log.display()
    );
    let candidate = || env.spawn(&["--ttl", "2s", "--wait", "120s", "--", "sh", "-c", &script]);
    let mut candidates: Vec<Child> = (0..3).map(|_| candidate()).collect();
    let leaders = || -> Vec<(u64, i32)> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (term, pid) = l.split_once(' ')?;
                Some((term.parse().ok()?, pid.parse().ok()?))
            })
            .collect()
    };
    let until = |n: usize, within: Duration| {
        let deadline = Instant::now() + within;
        while leaders().len() < n {
            assert!(
                Instant::now() < deadline,
                "{n} leaders within {within:?}: {:?}",
                leaders()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    until(1, Duration::from_secs(30));
    // Which lockrun leads: the one whose COMMAND is the first leader's.
    let (first_term, first_pid) = leaders()[0];
    let parent_of = |pid: i32| -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(1).unwrap().parse().unwrap()
    };
    let leader_lockrun = parent_of(first_pid);
    let i = candidates
        .iter()
        .position(|c| c.id() as i32 == leader_lockrun)
        .expect("the leader's COMMAND is a child of a candidate");
    let killed = Instant::now();
    kill(Pid::from_raw(leader_lockrun), Signal::SIGKILL).unwrap();
    let _ = candidates[i].wait();
    // A successor within the ttl (2 s) and a generous margin for a loaded machine.
    until(2, Duration::from_secs(20));
    let took = killed.elapsed();
    let (second_term, _) = leaders()[1];
    assert!(second_term > first_term, "{:?}", leaders());
    // Never two at once: the old leader's COMMAND was gone when the successor started.
    // (A zombie waiting for a reaper that is slow or missing counts as gone: it runs
    // nothing.)
    let runs = std::fs::read_to_string(format!("/proc/{first_pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = stat[stat.rfind(')')? + 2..].to_owned();
            after.chars().next()
        })
        .is_some_and(|state| state != 'Z' && state != 'X');
    assert!(
        !runs,
        "the killed leader's COMMAND still runs beside its successor"
    );
    assert_eq!(
        leaders().len(),
        2,
        "one successor, not more: {:?}",
        leaders()
    );
    eprintln!("{backend}: a SIGKILLed lockrun leader was succeeded {took:?} after the kill");
    for mut c in candidates {
        let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
        wait_exit(&mut c, Duration::from_secs(30));
    }
}

fn sigterm_is_forwarded_and_the_lock_released(backend: &str) {
    let env = Env::new(backend);
    let mut run = env.spawn(&["--", "sh", "-c", "trap 'exit 42' TERM; sleep 60 & wait"]);
    env.wait_until_held();
    // Give sh a moment to set its trap.
    std::thread::sleep(Duration::from_millis(300));
    kill(Pid::from_raw(run.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut run, Duration::from_secs(30));
    assert_eq!(
        status.code(),
        Some(42),
        "COMMAND's status after its TERM trap"
    );
    assert_eq!(env.state()["state"], "free");
}

fn delay_after_leaves_a_cooldown(backend: &str) {
    let env = Env::new(backend);
    let out = env.output(&["--delay-after", "30s", "--", "true"]);
    assert!(out.status.success());
    let state = env.state();
    assert_eq!(state["state"], "cooling", "{state}");
    let busy = env.output(&["--", "true"]);
    assert_eq!(busy.status.code(), Some(75));
    assert!(env.output(&["release", "--force"]).status.success());
}

on_each_backend!(
    exit_status_passes_through,
    the_command_gets_its_key_and_fencing_token,
    the_command_writes_through_the_fence,
    a_second_run_gets_75_or_waits,
    a_lost_lock_kills_the_command_with_76,
    a_killed_leader_is_succeeded_and_never_overlapped,
    sigterm_is_forwarded_and_the_lock_released,
    delay_after_leaves_a_cooldown,
);

#[test]
fn usage_and_configuration_errors_say_what_to_do() {
    let out = Command::new(LOCKRUN).args(["--key", "k"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no COMMAND is a usage error");
    let out = Command::new(LOCKRUN)
        .args([
            "--backend",
            "carrier-pigeon://x",
            "--key",
            "k",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown lock URL scheme"));
    let out = Command::new(LOCKRUN)
        .args(["--ttl", "soon", "--key", "k", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a duration"));
    // Out of range either way is the same usage error (2), saying the bound it broke; a
    // negative duration is refused as one, not taken for an option clap would suggest
    // passing after `--`.
    for (args, says) in [
        (["--ttl", "400d"], "at most 365d"),
        (["--ttl", "1ms"], "at least 1s"),
        (["--ttl", "-5s"], "is negative"),
        (["--wait", "-5s"], "is negative"),
        (["--delay-after", "400d"], "at most 365d"),
        (["--kill-after", "-1s"], "is negative"),
    ] {
        let out = Command::new(LOCKRUN)
            .args(args)
            .args(["--backend", "memory:", "--key", "k", "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("-- -"), "{args:?}: {stderr}");
    }
    // Options work before and after a subcommand.
    for args in [
        ["inspect", "--backend", "memory:", "--key", "k"],
        ["--backend", "memory:", "--key", "k", "inspect"],
    ] {
        let out = Command::new(LOCKRUN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            r#"{"state":"free"}"#
        );
    }
    let out = Command::new(LOCKRUN)
        .args([
            "--backend",
            "memory:",
            "--key",
            "k",
            "--",
            "/nonexistent/cmd",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    // Issue #36, item 12: a missing --key said "lockrun: lockrun: validate failed: ...".
    let out = Command::new(LOCKRUN)
        .args(["--backend", "memory:", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78));
    assert!(err.starts_with("lockrun: --key KEY is required"), "{err}");
    assert!(!err.contains("validate failed"), "{err}");
    // A ttl the watchdog cannot keep is refused before COMMAND runs.
    let marker = std::env::temp_dir().join(format!("lockrun-ran-{}", unique()));
    let out = Command::new(LOCKRUN)
        .args([
            "--backend",
            "memory:",
            "--key",
            "k",
            "--ttl",
            "1ms",
            "--",
            "touch",
        ])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 1s"));
    assert!(!marker.exists(), "COMMAND ran");
}

#[test]
fn help_shows_every_form_and_examples() {
    let out = Command::new(LOCKRUN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for form in [
        "lockrun --key KEY [OPTIONS] -- COMMAND [ARGS]...",
        "lockrun inspect --key KEY",
        "lockrun release --key KEY --force",
        "Examples:",
        "/run/lock/lockrun-UID",
    ] {
        assert!(help.contains(form), "--help lacks {form:?}:\n{help}");
    }
    let longest = help.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(
        longest <= 100,
        "a line of {longest} characters in --help:\n{help}"
    );
    assert!(!help.contains('\u{1b}'), "escape codes in --help");
}

/// Issue #36, item 10: the default lock directory followed XDG_RUNTIME_DIR, set in a login
/// session and not under cron, so the same job from both did not exclude itself.
#[test]
fn the_default_lock_is_one_place_from_cron_and_from_a_login_shell() {
    let key = format!("default-dir-{}", unique());
    let session = std::env::temp_dir().join(format!("lockrun-xdg-{}", unique()));
    std::fs::create_dir_all(&session).unwrap();
    // A login shell: XDG_RUNTIME_DIR and TMPDIR set.
    let mut first = Command::new(LOCKRUN)
        .env_remove("LOCK_URL")
        .env("XDG_RUNTIME_DIR", &session)
        .env("TMPDIR", &session)
        .args(["--key", &key, "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let look = Command::new(LOCKRUN)
            .env_remove("LOCK_URL")
            .env("XDG_RUNTIME_DIR", &session)
            .args(["inspect", "--key", &key])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&look.stdout).contains("held") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first run never held the lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Cron: neither.
    let second = Command::new(LOCKRUN)
        .env_remove("LOCK_URL")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("TMPDIR")
        .args(["--key", &key, "--", "true"])
        .output()
        .unwrap();
    let _ = first.kill();
    let _ = first.wait();
    let _ = std::fs::remove_dir_all(&session);
    assert_eq!(
        second.status.code(),
        Some(75),
        "the run without XDG_RUNTIME_DIR did not find the lock busy: {}",
        String::from_utf8_lossy(&second.stderr)
    );
}

#[test]
fn a_command_that_ignores_sigterm_after_a_lost_lock_is_killed() {
    let env = Env::new("file");
    let started = Instant::now();
    let mut run = env.spawn(&[
        "--ttl",
        "1s",
        "--kill-after",
        "1s",
        "--",
        "sh",
        "-c",
        "trap '' TERM; while true; do sleep 0.1; done",
    ]);
    env.wait_until_held();
    assert!(env.output(&["release", "--force"]).status.success());
    let status = wait_exit(&mut run, Duration::from_secs(30));
    assert_eq!(status.code(), Some(76), "lost lock, COMMAND killed");
    assert!(started.elapsed() < Duration::from_secs(25));
}

#[test]
fn help_never_shows_the_password_in_lock_url() {
    for args in [
        &["--help"][..],
        &["inspect", "--help"],
        &["release", "--help"],
    ] {
        let out = Command::new(LOCKRUN)
            .args(args)
            .env("LOCK_URL", "redis://locker:s3cret-pw@cache.invalid:6379/0")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("LOCK_URL"),
            "the help names the variable: {text}"
        );
        assert!(
            !text.contains("s3cret-pw"),
            "{args:?} printed the password: {text}"
        );
    }
}

/// Whether process `pid` runs (a zombie waiting to be reaped does not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next()
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// The pids a COMMAND wrote to `file`, one per line, once it has written `n` of them.
fn pids(file: &std::path::Path, n: usize) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() >= n {
                return pids;
            }
        }
        assert!(Instant::now() < deadline, "COMMAND never wrote its pids");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gone_within(pids: &[i32], within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while pids.iter().any(|&p| alive(p)) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// A COMMAND that starts a child of its own, writes both pids to `file`, and waits.
fn forking_command(file: &std::path::Path) -> String {
    format!(
        "sleep 60 & echo $! >> {f}; echo $$ >> {f}; wait",
        f = file.display()
    )
}

#[test]
fn killing_lockrun_kills_the_command_and_its_children() {
    let env = Env::new("file");
    let file = std::env::temp_dir().join(format!("lockrun-pids-{}", unique()));
    let mut run = env.spawn(&["--", "sh", "-c", &forking_command(&file)]);
    let pids = pids(&file, 2);
    kill_lockrun_and_expect_gone(&mut run, &pids, &file, "");
}

/// Kills lockrun with SIGKILL and checks that its guardian took COMMAND's processes `pids`
/// with it within 10 s; then cleans up (the processes and `file`, where they wrote their
/// pids). `when` says at what point lockrun was killed, for the failure message.
fn kill_lockrun_and_expect_gone(run: &mut Child, pids: &[i32], file: &std::path::Path, when: &str) {
    kill(Pid::from_raw(run.id() as i32), Signal::SIGKILL).unwrap();
    let _ = run.wait();
    let gone = gone_within(pids, Duration::from_secs(10));
    for &p in pids {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    let _ = std::fs::remove_file(file);
    assert!(
        gone,
        "COMMAND and its child ran on after lockrun was killed{when}: {pids:?}"
    );
}

/// Issue #35, item 9: the guardian learned whom to kill only after COMMAND was spawned, so
/// a lockrun killed in between left COMMAND running without the lock. Now COMMAND is
/// started into the guardian's own group, which the guardian knows before the spawn. (A
/// debug build of lockrun pauses right after the spawn when asked, so that the kill lands
/// exactly there.)
#[test]
fn killing_lockrun_right_after_the_spawn_kills_the_command() {
    let env = Env::new("file");
    let file = std::env::temp_dir().join(format!("lockrun-pids-{}", unique()));
    let mut run = env
        .cmd(&["--", "sh", "-c", &forking_command(&file)])
        .env("LOCKRUN_TEST_PAUSE_AFTER_SPAWN_MS", "60000")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lockrun runs");
    // COMMAND wrote its pids: it runs, and lockrun sits right after the spawn.
    let pids = pids(&file, 2);
    kill_lockrun_and_expect_gone(&mut run, &pids, &file, " right after the spawn");
}

/// The guardian shares COMMAND's group, so it hears the signals lockrun passes on to the
/// group: it must outlive them, or a forwarded SIGTERM that COMMAND handles would leave
/// COMMAND unguarded.
#[test]
fn the_guardian_outlives_a_forwarded_signal() {
    let env = Env::new("file");
    let file = std::env::temp_dir().join(format!("lockrun-pids-{}", unique()));
    // COMMAND ignores SIGTERM and SIGHUP, and so does its child.
    let script = format!(
        "trap '' TERM HUP; sleep 60 & echo $! >> {f}; echo $$ >> {f}; wait; wait",
        f = file.display()
    );
    let mut run = env.spawn(&["--", "sh", "-c", &script]);
    let pids = pids(&file, 2);
    for sig in [Signal::SIGTERM, Signal::SIGHUP] {
        kill(Pid::from_raw(run.id() as i32), sig).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    kill_lockrun_and_expect_gone(&mut run, &pids, &file, " after SIGTERM and SIGHUP");
}

#[test]
fn a_lost_lock_stops_the_commands_children_before_lockrun_exits() {
    let env = Env::new("file");
    let file = std::env::temp_dir().join(format!("lockrun-pids-{}", unique()));
    let mut run = env.spawn(&[
        "--ttl",
        "1s",
        "--kill-after",
        "5s",
        "--",
        "sh",
        "-c",
        &forking_command(&file),
    ]);
    let pids = pids(&file, 2);
    assert!(env.output(&["release", "--force"]).status.success());
    let status = wait_exit(&mut run, Duration::from_secs(30));
    let running: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &pids {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    let _ = std::fs::remove_file(&file);
    assert_eq!(status.code(), Some(76));
    assert!(
        running.is_empty(),
        "still running after exit 76: {running:?}"
    );
}

#[test]
fn children_left_behind_are_stopped_before_the_release() {
    let env = Env::new("file");
    let file = std::env::temp_dir().join(format!("lockrun-pids-{}", unique()));
    // COMMAND exits at once and leaves its child working.
    let script = format!("sleep 60 & echo $! >> {}", file.display());
    let out = env.output(&["--kill-after", "5s", "--", "sh", "-c", &script]);
    let pids = pids(&file, 1);
    let running = alive(pids[0]);
    let _ = kill(Pid::from_raw(pids[0]), Signal::SIGKILL);
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!running, "the child outlived lockrun and the lock");
    assert!(String::from_utf8_lossy(&out.stderr).contains("still run"));
    assert_eq!(env.state()["state"], "free");
}

#[test]
fn a_delay_after_out_of_range_is_refused_before_command_runs() {
    let env = Env::new("file");
    let file = std::env::temp_dir().join(format!("lockrun-ran-{}", unique()));
    let script = format!("touch {}", file.display());
    let out = env.output(&["--delay-after", "400d", "--", "sh", "-c", &script]);
    let ran = file.exists();
    let _ = std::fs::remove_file(&file);
    // A usage error, as every duration out of range is.
    assert_eq!(out.status.code(), Some(2));
    assert!(!ran, "COMMAND ran although its options were refused");
    assert_eq!(env.state()["state"], "free");
}

/// Polls `inspect` until the key is held shared by `holds` holds.
fn wait_until_shared(env: &Env, holds: usize) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = env.state();
        if state["state"] == "shared" && state["holds"].as_array().map(Vec::len) == Some(holds) {
            return state;
        }
        assert!(Instant::now() < deadline, "never held by {holds}: {state}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn permits_let_that_many_commands_run_at_once() {
    let env = Env::new("file");
    let mut a = env.spawn(&["--permits", "3", "--", "sleep", "3"]);
    let mut b = env.spawn(&["--permits", "3", "--weight", "2", "--", "sleep", "3"]);
    let state = wait_until_shared(&env, 2);
    assert_eq!(state["capacity"], 3, "{state}");
    let busy = env.output(&["--permits", "3", "--", "true"]);
    assert_eq!(busy.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert!(stderr.contains("full (2 holds)"), "{stderr}");
    let mismatch = env.output(&["--permits", "4", "--", "true"]);
    assert_eq!(mismatch.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&mismatch.stderr);
    assert!(stderr.contains("capacity 3, not 4"), "{stderr}");
    assert!(wait_exit(&mut a, Duration::from_secs(30)).success());
    assert!(wait_exit(&mut b, Duration::from_secs(30)).success());
    assert_eq!(env.state()["state"], "free");
}

#[test]
fn shared_runs_run_together_and_keep_a_writer_out() {
    let env = Env::new("file");
    let mut a = env.spawn(&["--shared", "--", "sleep", "3"]);
    let mut b = env.spawn(&["--shared", "--", "sleep", "3"]);
    wait_until_shared(&env, 2);
    let writer = env.output(&["--", "true"]);
    assert_eq!(writer.status.code(), Some(75));
    let stderr = String::from_utf8_lossy(&writer.stderr);
    assert!(stderr.contains("held shared by 2 holds"), "{stderr}");
    // A writer that waits gets its turn once the readers are done.
    let waited = env.output(&["--wait", "60s", "--", "true"]);
    assert_eq!(
        waited.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    assert!(wait_exit(&mut a, Duration::from_secs(30)).success());
    assert!(wait_exit(&mut b, Duration::from_secs(30)).success());
}

#[test]
fn permits_hold_on_the_server_backends() {
    for backend in ["redis", "postgres", "mysql", "etcd"] {
        let env = Env::new(backend);
        let mut a = env.spawn(&["--permits", "1", "--", "sleep", "3"]);
        let state = wait_until_shared(&env, 1);
        assert_eq!(state["capacity"], 1, "{backend}: {state}");
        let busy = env.output(&["--permits", "1", "--", "true"]);
        assert_eq!(busy.status.code(), Some(75), "{backend}");
        let mismatch = env.output(&["--permits", "2", "--", "true"]);
        assert_eq!(mismatch.status.code(), Some(78), "{backend}");
        let stderr = String::from_utf8_lossy(&mismatch.stderr);
        assert!(stderr.contains("capacity 1, not 2"), "{backend}: {stderr}");
        assert!(
            wait_exit(&mut a, Duration::from_secs(30)).success(),
            "{backend}"
        );
    }
}

/// A writer waiting on a read-held key, stopped by SIGTERM or SIGINT while it waits, takes
/// its writer's marker away before it exits: the next `--shared` run gets in at once
/// instead of getting 75 for the writer's whole ttl.
#[test]
fn a_waiting_writer_stopped_by_a_signal_takes_its_marker_away() {
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let env = Env::new("file");
        let mut reader = env.spawn(&["--shared", "--", "sleep", "30"]);
        wait_until_shared(&env, 1);
        let mut writer = env.spawn(&["--wait", "60s", "--ttl", "60s", "--", "true"]);
        // Until the writer's marker shows.
        let deadline = Instant::now() + Duration::from_secs(30);
        while env.state()["writer_waiting_ms"].is_null() {
            assert!(Instant::now() < deadline, "the writer never queued");
            std::thread::sleep(Duration::from_millis(50));
        }
        kill(Pid::from_raw(writer.id() as i32), sig).unwrap();
        let status = wait_exit(&mut writer, Duration::from_secs(30));
        assert_eq!(status.code(), Some(128 + sig as i32), "{sig}");
        let state = env.state();
        assert!(
            state["writer_waiting_ms"].is_null(),
            "after {sig}, the writer's marker is still there: {state}"
        );
        let another = env.output(&["--shared", "--", "true"]);
        assert_eq!(
            another.status.code(),
            Some(0),
            "after {sig}: {}",
            String::from_utf8_lossy(&another.stderr)
        );
        kill(Pid::from_raw(reader.id() as i32), Signal::SIGTERM).unwrap();
        wait_exit(&mut reader, Duration::from_secs(30));
    }
}

/// `--kill-after` as long as a duration can be: COMMAND's children left behind still get
/// SIGTERM, and lockrun neither panics nor keeps the lock (it panicked adding the
/// duration to an instant).
#[test]
fn the_longest_kill_after_does_not_panic() {
    let env = Env::new("file");
    let out = env.output(&[
        "--kill-after",
        "18446744073709551615s",
        "--",
        "sh",
        "-c",
        "sleep 60 & exit 0",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.state()["state"], "free");
}

/// `host:port` of a server URL.
fn address(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// A URL whose port is another service's says so ("did not answer as Redis does: check the
/// port"), instead of "broken pipe", "h2 protocol error" or a parse error of a greeting.
#[test]
fn a_url_at_another_services_port_says_so() {
    let redis = address(&test_servers::redis::shared_url());
    let postgres = address(&test_servers::postgres::shared_url());
    let mysql = address(&test_servers::mysql::shared_url());
    for (url, says) in [
        (format!("redis://{mysql}/0"), "did not answer as Redis does"),
        (
            format!("redis://{postgres}/0"),
            "did not answer as Redis does",
        ),
        (
            format!("postgres://postgres@{mysql}/postgres"),
            "did not answer as Postgres does",
        ),
        (format!("etcd://{redis}/p"), "did not answer as etcd does"),
        (
            format!("etcd://{postgres}/p"),
            "did not answer as etcd does",
        ),
        (format!("etcd://{mysql}/p"), "did not answer as etcd does"),
    ] {
        let out = Command::new(LOCKRUN)
            .args(["--backend", &url, "--key", "k", "inspect"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{url}: {stderr}");
        assert!(stderr.contains(says), "{url}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{url}: one line: {stderr}"
        );
    }
    // Nothing listening: the operating system's reason, on every scheme (etcd's said only
    // "tcp connect error").
    for url in [
        "etcd://127.0.0.1:1/p",
        "redis://127.0.0.1:1/0",
        "postgres://postgres@127.0.0.1:1/postgres",
    ] {
        let out = Command::new(LOCKRUN)
            .args(["--backend", url, "--key", "k", "inspect"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{url}: {stderr}");
        assert!(stderr.contains("refused"), "{url}: {stderr}");
        assert!(!stderr.contains("did not answer as"), "{url}: {stderr}");
    }
}
