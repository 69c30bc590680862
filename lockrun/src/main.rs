//! `lockrun`: run a command under a distributed lock.
//!
//! ```text
//! lockrun --key nightly-report --ttl 30s --wait 10s -- ./report.sh --full
//! LOCK_URL=redis://cache:6379/0 lockrun --key nightly-report -- ./report.sh
//! lockrun inspect --key nightly-report
//! lockrun release --key nightly-report --force
//! ./report.sh | lockrun fence --file /srv/reports/today.json   # inside COMMAND
//! ```
//!
//! COMMAND runs in a process group of its own (unless standard input is a terminal, so that
//! it can read it): every signal lockrun passes on goes to the whole group, processes
//! COMMAND leaves behind get SIGTERM (SIGKILL after `--kill-after`) before the lock is
//! released, and if lockrun itself dies, even by `kill -9`, a guardian process kills the
//! group, so nothing runs on without the lock.
//!
//! Exit status: COMMAND's own (128 + N if a signal N ended it); 75 when the lock was not
//! obtained within `--wait` (like `flock -E 75`); 76 when the lock was lost while COMMAND ran
//! (COMMAND got SIGTERM, then SIGKILL after `--kill-after`); 78 for a configuration error;
//! 69 when the backend failed; 127 / 126 when COMMAND cannot be found / run; 2 for a usage
//! error. `lockrun fence` exits 77 when it refused a stale fencing token.

mod child;
mod default_dir;
mod ls;
mod metrics_file;
mod run;
mod serve;
mod top;
mod view;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lock_config::{parse_duration, LockConfig};
use lock_core::{Error, ErrorKind, Key, Ttl};

/// Exit status when the lock was not obtained in time.
pub(crate) const EXIT_BUSY: u8 = 75;
/// Exit status when the lock was lost while COMMAND ran.
pub(crate) const EXIT_LOST: u8 = 76;
/// Exit status for a backend that failed (unreachable, refused, corrupt).
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;
/// Exit status for a configuration error (bad URL, bad option).
pub(crate) const EXIT_CONFIG: u8 = 78;
/// Exit status of `lockrun fence` when it refused a stale fencing token (sysexits'
/// EX_NOPERM: the write is not this holder's to make any more).
pub(crate) const EXIT_STALE: u8 = 77;

#[derive(Parser)]
#[command(
    name = "lockrun",
    version,
    about = "Run a command under a distributed lock (file, Redis, Postgres, MySQL/MariaDB or etcd).",
    long_about = "Obtains the lock KEY (waiting up to --wait), runs COMMAND while a watchdog \
                  prolongs the lock, releases it when COMMAND ends and exits with COMMAND's \
                  status.\n\nCOMMAND runs in a process group of its own (unless standard \
                  input is a terminal): signals reach its children too, processes it leaves \
                  behind are stopped before the release, and if lockrun is killed a guardian \
                  kills the group.\n\nCOMMAND's environment gains LOCKRUN_KEY (the key), \
                  LOCKRUN_FENCING (the hold's fencing token: higher than any earlier holder's \
                  of the key; hand it to the resource COMMAND writes to, so that it refuses a \
                  write with a lower one) and LOCKRUN_MODE (exclusive, read or semaphore).\n\nExit status: COMMAND's own (128+N if signal N ended it); 75 lock \
                  not obtained in time; 76 lock lost while COMMAND ran (COMMAND got SIGTERM, \
                  then SIGKILL after --kill-after); 78 configuration error; 69 backend \
                  failure; 127/126 COMMAND not found / not executable; 2 usage error.",
    override_usage = "lockrun --key KEY [OPTIONS] -- COMMAND [ARGS]...\n       \
                      lockrun inspect --key KEY [--backend URL]\n       \
                      lockrun release --key KEY --force [--backend URL]\n       \
                      lockrun ls [--prefix P] [--json] [--backend URL]\n       \
                      lockrun top [--prefix P] [--backend URL]\n       \
                      lockrun serve [--http ADDR] [--prefix P] [--backend URL]\n       \
                      lockrun fence --file PATH [--token N] < CONTENT",
    after_help = "Examples:\n  \
                  lockrun --key nightly-report --ttl 30s --wait 10s -- ./report.sh --full\n  \
                  LOCK_URL=redis://cache:6379/0 lockrun --key nightly-report --delay-after 1h -- ./report.sh\n  \
                  lockrun --key exports --permits 4 -- ./export.sh\n  \
                  lockrun inspect --key nightly-report\n  \
                  lockrun release --key nightly-report --force\n  \
                  lockrun ls --prefix reports/\n  \
                  lockrun top\n  \
                  lockrun serve --http 127.0.0.1:9977\n  \
                  lockrun --key report -- sh -c './report.sh | lockrun fence --file out.json'",
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    run: RunArgs,
    /// The command to run under the lock, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
    #[command(subcommand)]
    sub: Option<Sub>,
}

/// Options of every form, before or after a subcommand.
#[derive(Args, Clone)]
struct Common {
    /// The lock backend: file:///DIR, redis://HOST:PORT/DB, redis+watch://…, rediss://…,
    /// postgres://USER@HOST/DB, mysql://USER@HOST/DB (MariaDB too),
    /// etcd://HOST:PORT[,HOST:PORT…]/PREFIX. Default: lock files in /run/lock/lockrun-UID
    /// (/tmp/lockrun-UID where /run/lock is not open to every user), the same from cron, a
    /// service or a login shell.
    // hide_env_values: the URL may hold a password, and --help would print it.
    #[arg(
        long,
        env = "LOCK_URL",
        hide_env_values = true,
        global = true,
        value_name = "URL"
    )]
    backend: Option<String>,
    /// The name of the lock (required).
    #[arg(long, global = true, value_name = "KEY")]
    key: Option<String>,
}

#[derive(Args, Clone)]
struct RunArgs {
    /// How long the lock stays valid without being prolonged; the watchdog prolongs it every
    /// third of that while COMMAND runs (e.g. 30s, 5m, 1h; at least 1s).
    #[arg(long, default_value = "30s", value_parser = ttl, value_name = "DURATION", allow_hyphen_values = true)]
    ttl: Duration,
    /// How long to wait for a busy lock before giving up with status 75 (0s: do not wait).
    #[arg(long, default_value = "0s", value_parser = duration, value_name = "DURATION", allow_hyphen_values = true)]
    wait: Duration,
    /// Keep the lock cooling down for this long after COMMAND ends, so that nobody runs it
    /// again before then.
    #[arg(long, default_value = "0s", value_parser = cooldown, value_name = "DURATION", allow_hyphen_values = true)]
    delay_after: Duration,
    /// Free text stored with the lock, shown to anyone who finds it busy.
    #[arg(long, value_name = "TEXT")]
    metadata: Option<String>,
    /// Give up at once when the holder's remaining ttl is longer than the whole --wait.
    #[arg(long)]
    dont_queue: bool,
    /// After a lost lock, how long COMMAND has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "10s", value_parser = duration, value_name = "DURATION", allow_hyphen_values = true)]
    kill_after: Duration,
    /// Take a permit of a semaphore of N permits instead of the lock alone: at most N
    /// commands run at once under KEY (every lockrun on KEY must give the same N).
    #[arg(long, value_name = "N", conflicts_with = "shared")]
    permits: Option<u32>,
    /// With --permits, take W of the N permits (default 1).
    #[arg(long, value_name = "W", requires = "permits")]
    weight: Option<u32>,
    /// Take a read (shared) hold: any number of --shared commands run together, none while
    /// a lockrun without --shared (a writer) holds KEY or waits for it.
    #[arg(long)]
    shared: bool,
    /// When lockrun exits (whatever the exit: busy, lost, COMMAND's own status), write the
    /// run's lock metrics here in Prometheus' text format, for node_exporter's textfile
    /// collector: the wait, the hold and how it ended, renewals, losses, backend errors,
    /// labelled with KEY. Written atomically (a temporary file renamed).
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum Sub {
    /// Print the lock's state as JSON: free, held (holder, fencing, remaining_ms, holds),
    /// shared (capacity, every hold with its holder, fencing, remaining_ms, holds and weight,
    /// writer_waiting_ms) or cooling (remaining_ms).
    Inspect,
    /// Break the lock for an operator, whoever holds it (needs --force); prints the state it
    /// broke as JSON. The holder's next prolong or release answers Lost.
    Release {
        /// Confirms breaking a lock that someone else may hold.
        #[arg(long)]
        force: bool,
    },
    /// Replace the content of a file with standard input, only if the fencing token is not
    /// below the highest one that wrote to the file this way (kept in FILE.fence): run it
    /// inside COMMAND, where LOCKRUN_FENCING holds the token, so that a lockrun that lost
    /// its lock (paused past its ttl, cut off) cannot overwrite its successor's output.
    /// Crash-safe (a synced rename). Exits 77, writing nothing, for a stale token.
    Fence {
        /// The file to replace.
        #[arg(long, value_name = "PATH")]
        file: std::path::PathBuf,
        /// The fencing token (default: $LOCKRUN_FENCING, which lockrun gives COMMAND).
        #[arg(long, env = "LOCKRUN_FENCING", value_name = "N")]
        token: u64,
    },
    /// List every lock under a prefix, across every process and machine using the
    /// backend: key, mode, holder (host:pid and metadata), remaining time, fencing token
    /// and reentrant holds, one row per hold; a cooldown and a waiting writer's marker too.
    /// Never an owner token. Pages through any number of keys in flat memory.
    Ls {
        /// Only keys that start with it (default: every key).
        #[arg(long, default_value = "", value_name = "P")]
        prefix: String,
        /// A JSON array for scripts, each lock as `lockrun inspect` prints it, with its key.
        #[arg(long)]
        json: bool,
    },
    /// The listing, refreshed in place until Ctrl-C, the locks that keep others out longest
    /// first (a waiting writer first of all).
    Top {
        /// Only keys that start with it (default: every key).
        #[arg(long, default_value = "", value_name = "P")]
        prefix: String,
        /// How often the screen is refreshed.
        #[arg(long, default_value = "1s", value_parser = duration, value_name = "DURATION")]
        interval: Duration,
    },
    /// A read-only web page of the listing that refreshes itself, with its JSON at
    /// /locks.json and Prometheus metrics at /metrics. Nothing it answers changes a lock.
    Serve {
        /// Where to listen: HOST:PORT, or a bare PORT on 127.0.0.1. Binding beyond this
        /// machine shows every lock's key, holder and metadata to whoever reaches it, and
        /// lockrun warns when it starts.
        #[arg(long, default_value = serve::DEFAULT_ADDR, value_parser = serve::address, value_name = "ADDR")]
        http: std::net::SocketAddr,
        /// Only keys that start with it (default: every key).
        #[arg(long, default_value = "", value_name = "P")]
        prefix: String,
    },
    /// Internal: the guardian that kills COMMAND's process group if lockrun dies.
    #[command(hide = true)]
    Guard,
}

fn duration(text: &str) -> Result<Duration, String> {
    if text.starts_with('-') {
        return Err(format!(
            "{text:?} is negative: a duration is never below 0s; write e.g. 500ms, 30s, 5m, 1h"
        ));
    }
    parse_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration: write e.g. 500ms, 30s, 5m, 1h"))
}

/// The shortest `--ttl`: the watchdog renews every third of it, and a round trip to a
/// backend on another machine, or a file system under load, can take a good part of a
/// shorter one, so the lock would be lost while COMMAND runs.
const MIN_TTL: Duration = Duration::from_secs(1);

fn ttl(text: &str) -> Result<Duration, String> {
    let ttl = duration(text)?;
    if ttl < MIN_TTL {
        return Err(format!(
            "{text:?} is shorter than {MIN_TTL:?}: the watchdog could not renew the lock in \
             time; give at least 1s"
        ));
    }
    if ttl > Ttl::MAX.as_duration() {
        return Err(format!(
            "{text:?} is longer than a lock may be held without renewal: give at most 365d"
        ));
    }
    Ok(ttl)
}

/// A `--delay-after`: 0s (none) up to the longest a lock may be held.
fn cooldown(text: &str) -> Result<Duration, String> {
    let delay = duration(text)?;
    if delay > Ttl::MAX.as_duration() {
        return Err(format!(
            "{text:?} is longer than a lock may cool down after its release: give at most 365d"
        ));
    }
    Ok(delay)
}

/// Prints `e` the way an operator reads it, and picks the exit status. An error lockrun
/// raised itself is its message alone; a backend's says which backend and call failed.
pub(crate) fn fail(e: &Error) -> ExitCode {
    match e.backend() {
        "lockrun" | "lock-core" => eprintln!("lockrun: {}", e.message()),
        _ => eprintln!("lockrun: {e}"),
    }
    ExitCode::from(match e.kind() {
        ErrorKind::Config | ErrorKind::InvalidInput => EXIT_CONFIG,
        _ => EXIT_UNAVAILABLE,
    })
}

struct Target {
    config: LockConfig,
    key: Key,
}

fn target(common: &Common) -> Result<Target, Error> {
    let key = common.key.as_deref().ok_or_else(|| {
        Error::new(
            ErrorKind::Config,
            "lockrun",
            lock_core::Operation::Validate,
            "--key KEY is required: the name of the lock",
        )
    })?;
    Ok(Target {
        config: LockConfig::from_url(match &common.backend {
            Some(url) => url.clone(),
            None => default_dir::default_backend()?,
        }),
        key: Key::new(key)?,
    })
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // No escape codes in a cron mail or a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            // lockrun says itself, once, when a hold is lost or released late (76, and
            // its message): the library's warning about the same hold would say it twice.
            tracing_subscriber::EnvFilter::try_from_env("LOCKRUN_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,lock_core::client::hold=error")
            }),
        )
        .init();
    let cli = Cli::parse();
    match &cli.sub {
        Some(Sub::Guard) => return child::guard(),
        Some(Sub::Fence { file, token }) => return fence(file, *token),
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockrun: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    runtime.block_on(async move {
        match cli.sub {
            // Answered above, before the runtime starts (neither needs the lock's backend).
            Some(Sub::Guard | Sub::Fence { .. }) => ExitCode::SUCCESS,
            Some(Sub::Inspect) => look(&cli.common, Look::Inspect).await,
            Some(Sub::Ls { prefix, json }) => match connect(&cli.common).await {
                Ok((backend, _)) => ls::ls(&*backend, &prefix, json).await,
                Err(e) => fail(&e),
            },
            Some(Sub::Top { prefix, interval }) => match connect(&cli.common).await {
                Ok((backend, label)) => top::top(&*backend, &label, &prefix, interval).await,
                Err(e) => fail(&e),
            },
            Some(Sub::Serve { http, prefix }) => match connect(&cli.common).await {
                Ok((backend, label)) => serve::serve(backend, label, prefix, http).await,
                Err(e) => fail(&e),
            },
            Some(Sub::Release { force }) => {
                if !force {
                    eprintln!(
                        "lockrun: release breaks the lock whoever holds it; add --force to confirm"
                    );
                    return ExitCode::from(2);
                }
                look(&cli.common, Look::Break).await
            }
            None => match target(&cli.common) {
                Ok(t) => run::run(t.config, t.key, &cli.run, cli.command).await,
                Err(e) => fail(&e),
            },
        }
    })
}

/// The backend `--backend` (or `LOCK_URL`, or the default directory) names, and its URL
/// with any password hidden, for the screens that say which backend they show.
async fn connect(
    common: &Common,
) -> Result<(std::sync::Arc<dyn lock_core::LockBackend>, String), Error> {
    let url = match &common.backend {
        Some(url) => url.clone(),
        None => default_dir::default_backend()?,
    };
    let label = lock_core::redact_url(&url);
    let backend = LockConfig::from_url(url).backend().await?;
    Ok((backend, label))
}

/// Ctrl-C or SIGTERM, for the commands that run until one comes (`top`, `serve`).
pub(crate) struct Stop {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Stop {
    /// Watching for both from now on; the exit status to end with when that fails.
    pub(crate) fn watch() -> Result<Stop, ExitCode> {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => Ok(Stop { int, term }),
            _ => {
                eprintln!("lockrun: cannot watch for Ctrl-C and SIGTERM");
                Err(ExitCode::from(EXIT_UNAVAILABLE))
            }
        }
    }

    /// Resolves when either comes.
    pub(crate) async fn stopped(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// What `inspect` and `release --force` do to the lock.
#[derive(Clone, Copy)]
enum Look {
    Inspect,
    Break,
}

/// Inspects or breaks the lock and prints the state it found as JSON.
async fn look(common: &Common, how: Look) -> ExitCode {
    let result = async {
        let t = target(common)?;
        let backend = t.config.backend().await?;
        match how {
            Look::Inspect => backend.inspect(&t.key).await,
            Look::Break => backend.force_release(&t.key).await,
        }
    }
    .await;
    match result.and_then(|state| {
        serde_json::to_string(&state).map_err(|e| {
            Error::new(
                ErrorKind::Protocol,
                "lockrun",
                lock_core::Operation::Inspect,
                format!("the state does not serialize: {e}"),
            )
        })
    }) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// `lockrun fence`: standard input replaces `file` if `token` is not stale for it.
fn fence(file: &std::path::Path, token: u64) -> ExitCode {
    let mut contents = Vec::new();
    if let Err(e) = std::io::Read::read_to_end(&mut std::io::stdin(), &mut contents) {
        eprintln!("lockrun: fence: cannot read standard input: {e}");
        return ExitCode::from(EXIT_UNAVAILABLE);
    }
    match lock_file::fence::write(file, lock_core::Fencing(token), &contents) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == ErrorKind::StaleToken => {
            eprintln!("lockrun: fence: {}", e.message());
            ExitCode::from(EXIT_STALE)
        }
        Err(e) => fail(&e),
    }
}
