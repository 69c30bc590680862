//! Every backend next to its baseline, measured in one run on one machine.
//!
//! ```text
//! cargo run --release -p lock-bench            # the whole table (a few minutes)
//! cargo run --release -p lock-bench -- --quick # fewer cycles, for a smoke run
//! cargo run --release -p lock-bench -- --only=redis,postgres
//! cargo run --release -p lock-bench -- --watched-only # just the locks held with the watchdog
//! cargo run --release -p lock-bench -- --instructions  # the client's instructions per cycle
//! ```
//!
//! Redis is `REDIS_URL` (default `redis://127.0.0.1:6379/0`), Postgres `DATABASE_URL`
//! (default `postgres://postgres@127.0.0.1:5432/postgres`), MariaDB/MySQL `MYSQL_URL`
//! (default `mysql://root@127.0.0.1:3306/test`), etcd `ETCD_URL` (default: a private member
//! started for the run, `etcd` must be installed); a backend whose server does not
//! answer is reported as skipped. Every figure is the median of three interleaved rounds
//! (the baseline and the project take turns, so both see the same machine), printed as a
//! Markdown table: `BENCHMARKS.md` keeps the latest one.
//!
//! What is measured:
//! - **cycles**: obtain + release of a free lock by `tasks` concurrent tasks on distinct
//!   keys, through the client layer (`Locker::lock(..).obtain()`, the README's call, with
//!   the default notified retry), next to the raw commands a correct lock of that kind
//!   needs at the least: `SET NX PX` + compare-and-delete for Redis (and, for the WATCH
//!   variant, the same cycle in `WATCH`/`MULTI`/`EXEC` transactions), and the same cycle
//!   through rslock; `pg_try_advisory_lock` + `pg_advisory_unlock` for Postgres, and a
//!   durable single-row upsert + update (what a lock row costs at the least when every
//!   write is durable; the simple statement form is measured against it too);
//!   `GET_LOCK` + `RELEASE_LOCK` and the same durable row pair for MariaDB/MySQL; a lease,
//!   a put-if-absent transaction on it and a delete for etcd; one
//!   `flock`ed read-modify-write of one file for the file backend; the trait called
//!   directly for the memory backend. Rate, and each cycle's p50 / p99.
//! - **where a Redis cycle's time goes**: the raw cycles and the project's, at 1 and 64
//!   tasks, once more each, with the CPU per cycle of this process (`/proc/self/stat`) and
//!   of the Redis server (`INFO cpu`): which side bounds the rate.
//! - **shared holds**: a read hold's and one permit of a semaphore of 8's
//!   `try_obtain()`+release cycles, next to the mutex's `try_obtain()`+release of the same
//!   rounds, on the backends that keep shared holds (memory, file, both Redis variants,
//!   Postgres).
//! - **handoff**: 2, 8 and 32 waiters on one key; from the holder's release call to the next
//!   holder's `Acquired`, woken by the backend's notification or by polling alone, with
//!   the obtain attempts per acquisition. On a backend with shared holds, one writer and 8
//!   readers on one key: the writer's wait for each write lock while readers come and go
//!   (its marker keeps new readers out: it is never starved), and from its release to the
//!   first reader in.
//! - **watched locks**: 10,000 locks held with the watchdog (ttl 9 s, so a prolong every
//!   3 s): per renewal period, the locks prolonged, the watchdog's batches
//!   (`prolongate_many` calls), the round trips they make (a pipeline or a statement per
//!   `BATCH` locks of the backend) and the server's calls where it counts them; and
//!   client memory per held lock (bytes allocated and not freed, counted by the bench's
//!   allocator).
//!
//! - **instructions per cycle** (`--instructions`, alone; `--only=memory-trait,...` picks
//!   kinds): the client's instructions for one cycle of the memory backend (on the trait
//!   and through the client layer) and of Redis (raw redis-rs, rslock, the Lua variant on
//!   the trait and through the client layer), counted by callgrind (`apt-get install
//!   valgrind`) in children of this binary with N and 2N cycles, so start-up cancels: the
//!   same figure on every run whatever else the machine does, the one to hold a change to.
//!
//! Each measurement runs one uncounted round first, which creates the keys (files, records,
//! rows) the counted rounds reuse: a running service locks the same keys again and again.

mod alloc;
mod baselines;
mod cpu;
mod instructions;
mod on_etcd;
mod on_local;
mod on_mysql;
mod on_postgres;
mod on_redis;
mod raw_handoff;
mod report;
mod several;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Attempt, LockBackend, Locker, Mode, Retry};
use test_servers::bench::{
    backend_cycles, handoff, locker_cycles, mode_cycles, rounds, run, runtime, rw_handoff, Run,
};

use report::Table;
pub(crate) use several::several_keys;
use test_servers::locks::Counting;

/// How much work each measurement does.
#[derive(Clone, Copy)]
pub(crate) struct Size {
    rounds: usize,
    /// Cycles per measurement for a fast backend (memory, file, Redis).
    cycles: usize,
    /// Cycles per measurement for Postgres and MariaDB.
    pg_cycles: usize,
    handoffs: usize,
    watched: usize,
    /// `--watched-only`: skip everything but the watched locks.
    watched_only: bool,
    /// `--watched-for=SECS`: how long the watched locks are held (at least the two
    /// renewal periods measured), before the lost ones are counted.
    watched_for: Duration,
}

pub(crate) const CONCURRENCY: [usize; 3] = [1, 16, 64];
const WAITERS: [usize; 3] = [2, 8, 32];

/// What `--help` prints.
const USAGE: &str = "lock-bench: every backend next to its baseline, in one run

usage: cargo run --release -p lock-bench -- [OPTIONS]

  --quick               fewer cycles, one round (a smoke run, about a minute per backend)
  --only=NAME[,NAME]    just these: memory, file, redis, postgres, mysql, etcd
  --watched-only        just the locks held with the watchdog
  --watched-for=SECS    hold the watched locks this long (default: the 7.5 s measured)
  --instructions        the client's instructions per cycle (valgrind's callgrind)
  --count-cycles=KIND:N[:TASKS]
                        run N cycles of KIND alone (for a profiler or callgrind)
  --help                this text

servers: REDIS_URL, DATABASE_URL, MYSQL_URL (defaults: the local servers), ETCD_URL
(default: a private member started for the run); the full run
takes about six minutes";

fn main() {
    const KNOWN: [&str; 4] = ["--quick", "--watched-only", "--instructions", "--help"];
    const PREFIXES: [&str; 3] = ["--only=", "--count-cycles=", "--watched-for="];
    for arg in std::env::args().skip(1) {
        let known = KNOWN.contains(&arg.as_str()) || PREFIXES.iter().any(|p| arg.starts_with(p));
        if arg == "--help" || !known {
            if !known {
                eprintln!("lock-bench: unknown argument {arg:?}\n");
            }
            eprintln!("{USAGE}");
            std::process::exit(if known { 0 } else { 2 });
        }
    }
    let redis_url =
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into());
    if let Some(spec) =
        std::env::args().find_map(|a| a.strip_prefix("--count-cycles=").map(str::to_owned))
    {
        // KIND:N, or KIND:N:TASKS.
        let mut parts = spec.split(':');
        let kind = parts.next().unwrap_or_default().to_owned();
        let mut number = || parts.next().map(|n| n.parse::<usize>().expect("a number"));
        let n = number().expect("--count-cycles=KIND:N[:TASKS]");
        let tasks = number().unwrap_or(1);
        instructions::child(&kind, n, tasks, &redis_url);
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let watched_only = std::env::args().any(|a| a == "--watched-only");
    let watched_for = std::env::args()
        .find_map(|a| {
            a.strip_prefix("--watched-for=")
                .map(|secs| match secs.parse::<u64>() {
                    Ok(secs) => Duration::from_secs(secs),
                    Err(_) => {
                        eprintln!("lock-bench: --watched-for takes whole seconds, not {secs:?}");
                        std::process::exit(2);
                    }
                })
        })
        .unwrap_or_default();
    // `--only=redis,postgres`: just those backends.
    let only: Option<Vec<String>> = std::env::args().find_map(|a| {
        a.strip_prefix("--only=")
            .map(|l| l.split(',').map(String::from).collect())
    });
    if std::env::args().any(|a| a == "--instructions") {
        instructions::report(
            only.as_deref().unwrap_or_default(),
            if quick { 500 } else { 2_000 },
        );
        return;
    }
    let wanted = |name: &str| only.as_ref().is_none_or(|l| l.iter().any(|n| n == name));
    let size = if quick {
        Size {
            rounds: 1,
            cycles: 1_024,
            pg_cycles: 256,
            handoffs: 40,
            watched: 1_000,
            watched_only,
            watched_for,
        }
    } else {
        Size {
            rounds: 3,
            cycles: 4_096,
            pg_cycles: 1_024,
            handoffs: 200,
            watched: 10_000,
            watched_only,
            watched_for,
        }
    };
    let pg_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let my_url =
        std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
    let started = Instant::now();
    let mut table = Table::default();
    runtime().block_on(async {
        if wanted("memory") {
            on_local::memory(&mut table, size).await;
        }
        if wanted("file") {
            on_local::file(&mut table, size).await;
        }
        if wanted("redis") {
            if let Err(why) = on_redis::redis(&mut table, size, &redis_url).await {
                table.skipped("redis", &why);
            }
        }
        if wanted("postgres") {
            if let Err(why) = on_postgres::postgres(&mut table, size, &pg_url).await {
                table.skipped("postgres", &why);
            }
        }
        if wanted("mysql") {
            if let Err(why) = on_mysql::mysql(&mut table, size, &my_url).await {
                table.skipped("mysql", &why);
            }
        }
        if wanted("etcd") {
            if let Err(why) = on_etcd::etcd(&mut table, size).await {
                table.skipped("etcd", &why);
            }
        }
    });
    table.print();
    println!(
        "\n{} in {:.0} s (`cargo run --release -p lock-bench{}`)",
        if quick { "quick run" } else { "full run" },
        started.elapsed().as_secs_f64(),
        std::env::args()
            .skip(1)
            .fold(String::new(), |mut flags, a| {
                if flags.is_empty() {
                    flags.push_str(" --");
                }
                flags.push(' ');
                flags.push_str(&a);
                flags
            })
    );
}

/// A read hold's and a semaphore permit's (of 8) try_obtain()+release cycles next to the
/// mutex's of the same rounds.
pub(crate) async fn shared_holds(table: &mut Table, name: &str, locker: &Locker, size: Size) {
    const SEMAPHORE: Mode = Mode::Shared {
        capacity: 8,
        weight: 1,
    };
    for tasks in CONCURRENCY {
        let [mutex, read, semaphore] = rounds(size.rounds, async || {
            let cycles = |mode: Mode| {
                let locker = locker.clone();
                run(tasks, size.cycles, move |p, n| {
                    mode_cycles(locker.clone(), p, n, mode)
                })
            };
            [
                cycles(Mode::Exclusive).await,
                cycles(Mode::READ).await,
                cycles(SEMAPHORE).await,
            ]
        })
        .await;
        let baseline = "the mutex's try_obtain()+release, same rounds";
        table.cycles(
            name,
            "read: try_obtain()+release",
            tasks,
            baseline,
            mutex,
            read,
        );
        table.cycles(
            name,
            "semaphore of 8: try_obtain()+release",
            tasks,
            baseline,
            mutex,
            semaphore,
        );
    }
}

/// `cycles` obtain+release cycles through `locker` by `tasks` tasks: `obtain()` when
/// `waiting`, else `try_obtain()`.
pub(crate) async fn through(locker: &Locker, tasks: usize, cycles: usize, waiting: bool) -> Run {
    let locker = locker.clone();
    run(tasks, cycles, move |p, n| {
        locker_cycles(locker.clone(), p, n, waiting)
    })
    .await
}

/// Handoff with 2, 8 and 32 waiters, notified and polling.
pub(crate) async fn handoffs(
    table: &mut Table,
    name: &str,
    backend: Arc<dyn LockBackend>,
    size: Size,
    raw: Option<&raw_handoff::Raw>,
) {
    for waiters in WAITERS {
        // The least the server can do, measured next to the backend's.
        let baseline = match raw {
            Some(raw) => {
                let latencies = raw.handoff(waiters, size.handoffs).await;
                table.handoff(name, waiters, raw.what(), &latencies, None, None);
                Some(latencies)
            }
            None => None,
        };
        for (how, retry) in [
            ("notified", Retry::default()),
            (
                "polling 5-250 ms",
                Retry::exponential(Duration::from_millis(5), Duration::from_millis(250)),
            ),
        ] {
            let counting = Arc::new(Counting::new(backend.clone()));
            let latencies = handoff(counting.clone(), retry, waiters, size.handoffs).await;
            let attempts = counting.obtains() as f64 / latencies.len().max(1) as f64;
            let against = baseline.as_ref().filter(|_| how == "notified");
            table.handoff(name, waiters, how, &latencies, Some(attempts), against);
        }
    }
    if backend.capabilities().shared {
        for (how, retry) in [
            ("notified", Retry::default()),
            (
                "polling 5-250 ms",
                Retry::exponential(Duration::from_millis(5), Duration::from_millis(250)),
            ),
        ] {
            let measured = rw_handoff(backend.clone(), retry, 8, size.handoffs / 2).await;
            table.rw_handoff(name, how, &measured);
        }
    }
}

/// How a backend's `prolongate_many` reaches its server: at most `locks` a batch, each
/// batch `round_trips` round trips (a Redis pipeline and a Postgres statement: 1; a
/// MariaDB transaction: 2; an etcd prolong: 3, a read, the lease grants sent at once and
/// the transaction).
#[derive(Clone, Copy)]
pub(crate) struct Batching {
    pub(crate) locks: usize,
    pub(crate) round_trips: usize,
}

/// `size.watched` locks held with the watchdog (ttl 9 s: a prolong every 3 s) for two
/// renewal periods: prolong calls per period, server calls per period where `server_calls`
/// can count them, and client memory per held lock.
pub(crate) async fn watched<F, Fut>(
    table: &mut Table,
    name: &str,
    backend: Arc<dyn LockBackend>,
    size: Size,
    batching: Option<Batching>,
    server_calls: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<u64>>,
{
    let counting = Arc::new(Counting::new(backend));
    let locker = Locker::new(counting.clone());
    let before = alloc::live_bytes();
    let prefix = test_servers::bench::fresh_prefix("watched");
    let held_from = Instant::now();
    let mut guards = Vec::with_capacity(size.watched);
    for i in 0..size.watched {
        let lock = locker
            .lock(format!("{prefix}{i}"))
            .ttl(Duration::from_secs(9))
            .watchdog();
        // What could not be done is reported, never a panic: the row says how far it got.
        let failed = match lock.try_obtain().await {
            Ok(Attempt::Obtained(guard)) => {
                guards.push(guard);
                continue;
            }
            Ok(Attempt::Busy(busy)) => format!("busy ({busy}) on a fresh key"),
            Err(e) => e.to_string(),
        };
        let took = held_from.elapsed();
        table.skipped(
            &format!("{name} watched locks"),
            &format!(
                "{i} of {} taken in {took:.1?}, then lock {i} failed: {failed}",
                size.watched
            ),
        );
        for g in guards {
            let _ = g.release().await;
        }
        return;
    }
    let memory = alloc::live_bytes().saturating_sub(before) as f64 / size.watched as f64;
    // Counted from half a period in, over two periods: locks taken at once renew at once,
    // and a window that starts and ends on their renewals would count one batch or three.
    let period = Duration::from_secs(3);
    tokio::time::sleep(period / 2).await;
    let (prolongs, batches, calls) = (
        counting.prolongs(),
        counting.batches().len(),
        server_calls().await,
    );
    tokio::time::sleep(period * 2).await;
    let per_period = (counting.prolongs() - prolongs) as f64 / 2.0;
    let sizes = counting.batches();
    let batches_per_period = (sizes.len() - batches) as f64 / 2.0;
    let round_trips = batching.map(|b| {
        sizes[batches..]
            .iter()
            .map(|(n, _)| n.div_ceil(b.locks) * b.round_trips)
            .sum::<usize>() as f64
            / 2.0
    });
    let longest = sizes[batches..]
        .iter()
        .map(|(_, took)| *took)
        .max()
        .unwrap_or_default();
    let server = match (calls, server_calls().await) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 2.0),
        _ => None,
    };
    // Held as long as asked, then counted.
    tokio::time::sleep(size.watched_for.saturating_sub(held_from.elapsed())).await;
    let held_for = held_from.elapsed();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    if size.watched_for > period * 3 {
        table.note(format!(
            "{name}: {} watched locks held {:.0} s, {lost} lost",
            size.watched,
            held_for.as_secs_f64()
        ));
    }
    let renewals = report::Renewals {
        locks: per_period,
        batches: batches_per_period,
        round_trips,
        server_calls: server,
        longest,
    };
    table.watched(name, size.watched, renewals, memory, lost);
    for g in guards {
        let _ = g.release().await;
    }
}
