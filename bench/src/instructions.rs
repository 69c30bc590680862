//! Instructions per cycle (`--instructions`): the client's instructions for one cycle of
//! each kind, counted by callgrind, so that a change in the client's work shows without a
//! quiet machine. Each kind runs twice in a child of this binary under
//! `valgrind --tool=callgrind` (`--count-cycles=KIND:N`), with N and with 2N cycles on one
//! task of a current-thread runtime; (I(2N) - I(N)) / N cancels start-up, connecting and
//! the first round's warm-up. The figure is the client process's: for Redis, the server's
//! work is not in it (see the CPU rows of the main run for that).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use lock_core::{LockBackend, Locker, MemoryBackend};
use test_servers::bench::{backend_cycles, locker_cycles};

use crate::baselines;

/// Each kind a child counts: its name on the command line and what it measures.
pub(crate) const KINDS: &[(&str, &str)] = &[
    (
        "memory-trait",
        "memory: obtain + release on the trait, called directly",
    ),
    (
        "memory-client",
        "memory: try_obtain() + release through the client layer",
    ),
    (
        "file-trait",
        "file: obtain + release on the trait, called directly",
    ),
    (
        "file-raw",
        "file: one flocked read-modify-write (the file rows' baseline)",
    ),
    (
        "redis-raw",
        "redis: SET NX PX + compare-and-delete (redis-rs)",
    ),
    ("rslock", "redis: rslock lock + unlock"),
    (
        "postgres-trait",
        "postgres: obtain + release on the trait (for perf; not counted by default)",
    ),
    (
        "postgres-pair",
        "postgres: a durable single-row upsert + update (for perf; not counted by default)",
    ),
    (
        "mysql-trait",
        "mysql: obtain + release on the trait (for perf; not counted by default)",
    ),
    (
        "mysql-in-client",
        "mysql: obtain + release on the trait, decided in the client (for perf; not counted by default)",
    ),
    (
        "mysql-pair",
        "mysql: a durable single-row upsert + update (for perf; not counted by default)",
    ),
    (
        "redis-lua-trait",
        "redis-lua: obtain + release on the trait",
    ),
    (
        "redis-lua-client",
        "redis-lua: try_obtain() + release through the client layer",
    ),
];

/// The child's side: runs `n` cycles of `kind` on one task of a current-thread runtime,
/// then returns. With `tasks` above one (`--count-cycles=KIND:N:TASKS`, for `perf record`
/// rather than callgrind), `n` cycles in all on `tasks` tasks of the benches' two-thread
/// runtime, as the main run's rows with that many tasks.
///
/// # Panics
/// On an unknown kind or a failed cycle: the parent reports the child's failure.
pub(crate) fn child(kind: &str, n: usize, tasks: usize, redis_url: &str) {
    let rt = if tasks > 1 {
        test_servers::bench::runtime()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    };
    rt.block_on(async {
        match kind {
            "memory-trait" => {
                let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
                spread(tasks, n, move |p, n| backend_cycles(backend.clone(), p, n)).await;
            }
            "memory-client" => {
                let locker = Locker::new(Arc::new(MemoryBackend::new()));
                spread(tasks, n, move |p, n| {
                    locker_cycles(locker.clone(), p, n, false)
                })
                .await;
            }
            "file-trait" => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let backend: Arc<dyn LockBackend> = Arc::new(
                    lock_file::FileBackend::new(dir.path().join("locks")).expect("a directory"),
                );
                spread(tasks, n, move |p, n| backend_cycles(backend.clone(), p, n)).await;
            }
            "file-raw" => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let raw = dir.path().to_owned();
                spread(tasks, n, move |p, n| {
                    baselines::file_cycles(raw.clone(), p, n)
                })
                .await;
            }
            "redis-raw" => {
                let client = redis::Client::open(redis_url).expect("a Redis URL");
                let conn = redis::aio::ConnectionManager::new(client)
                    .await
                    .expect("a Redis server (REDIS_URL)");
                spread(tasks, n, move |p, n| {
                    baselines::redis_cycles(conn.clone(), p, n)
                })
                .await;
            }
            "rslock" => {
                let manager = rslock::LockManager::new(vec![redis_url.to_owned()]);
                spread(tasks, n, move |p, n| {
                    baselines::rslock_cycles(manager.clone(), p, n)
                })
                .await;
            }
            "postgres-trait" | "postgres-pair" => {
                let url = std::env::var("DATABASE_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
                let backend = lock_postgres::PostgresBackend::builder(&url)
                    .table("public", "distlock_bench")
                    .build()
                    .expect("a Postgres URL");
                backend
                    .migrate()
                    .await
                    .expect("a Postgres server (DATABASE_URL)");
                if kind == "postgres-pair" {
                    let pool = backend.pool().clone();
                    baselines::pg_rows_table(&pool).await;
                    spread(tasks, n, move |p, n| {
                        baselines::pg_write_cycles(pool.clone(), p, n)
                    })
                    .await;
                } else {
                    let backend: Arc<dyn LockBackend> = Arc::new(backend);
                    spread(tasks, n, move |p, n| backend_cycles(backend.clone(), p, n)).await;
                }
            }
            "mysql-trait" | "mysql-in-client" | "mysql-pair" => {
                let url = std::env::var("MYSQL_URL")
                    .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
                let mut builder = lock_mysql::MySqlBackend::builder(&url)
                    .table("distlock_bench")
                    .pool_size(24);
                if kind == "mysql-in-client" {
                    builder = builder.decide_in_client();
                }
                let backend = builder.build().expect("a MariaDB URL");
                backend
                    .migrate()
                    .await
                    .expect("a MariaDB server (MYSQL_URL)");
                if kind == "mysql-pair" {
                    let pool = backend.pool().clone();
                    baselines::my_rows_table(&pool).await;
                    spread(tasks, n, move |p, n| {
                        baselines::my_write_cycles(pool.clone(), p, n)
                    })
                    .await;
                } else {
                    let backend: Arc<dyn LockBackend> = Arc::new(backend);
                    spread(tasks, n, move |p, n| backend_cycles(backend.clone(), p, n)).await;
                }
            }
            "redis-lua-trait" | "redis-lua-client" => {
                let backend = lock_redis::RedisBackend::builder(redis_url)
                    .prefix("bench:")
                    .connect()
                    .await
                    .expect("a Redis server (REDIS_URL)");
                let backend: Arc<dyn LockBackend> = Arc::new(backend);
                if kind == "redis-lua-trait" {
                    spread(tasks, n, move |p, n| backend_cycles(backend.clone(), p, n)).await;
                } else {
                    let locker = Locker::new(backend);
                    spread(tasks, n, move |p, n| {
                        locker_cycles(locker.clone(), p, n, false)
                    })
                    .await;
                }
            }
            other => panic!("no cycle kind {other:?}: one of {KINDS:?}"),
        }
    });
}

/// `n` cycles of `cycles` in all: on this task when `tasks` is one, else spread over
/// `tasks` spawned tasks, each on keys of its own.
async fn spread<F, Fut>(tasks: usize, n: usize, cycles: F)
where
    F: Fn(String, usize) -> Fut,
    Fut: std::future::Future<Output = Vec<std::time::Duration>> + Send + 'static,
{
    if tasks <= 1 {
        cycles("count-".to_owned(), n).await;
    } else {
        test_servers::bench::run(tasks, n, cycles).await;
    }
}

/// The parent's side: each kind's instructions per cycle (`kinds` empty: every kind), one
/// line each; a kind that cannot be counted says why.
pub(crate) fn report(kinds: &[String], n: usize) {
    let exe = std::env::current_exe().expect("this binary's path");
    println!(
        "### Client instructions per cycle (callgrind, {n} and {} cycles, one task)\n",
        2 * n
    );
    println!("| kind | what | instructions per cycle |");
    println!("|---|---|---:|");
    for (kind, what) in KINDS {
        let asked = kinds.iter().any(|k| k == kind);
        // The Postgres and MariaDB kinds are for `perf record` of the server: callgrind counts
        // only the client, whose work there is not what such a cycle is about.
        if (!kinds.is_empty() && !asked)
            || (kinds.is_empty() && (kind.starts_with("postgres") || kind.starts_with("mysql")))
        {
            continue;
        }
        let count = |cycles: usize| instructions(&exe, kind, cycles);
        let figure = match (count(n), count(2 * n)) {
            (Ok(one), Ok(two)) => format!("{:.0}", two.saturating_sub(one) as f64 / n as f64),
            (Err(why), _) | (_, Err(why)) => format!("not counted: {why}"),
        };
        println!("| {kind} | {what} | {figure} |");
    }
}

/// The instructions a child running `cycles` cycles of `kind` executed, in all.
fn instructions(exe: &Path, kind: &str, cycles: usize) -> Result<u64, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out = dir.path().join("callgrind.out");
    let run = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .arg(format!("--count-cycles={kind}:{cycles}"))
        .output()
        .map_err(|e| format!("valgrind did not start ({e}): `apt-get install valgrind`"))?;
    if !run.status.success() {
        let stderr = String::from_utf8_lossy(&run.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!("the child failed: {}", last.unwrap_or("no output")));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| "no instruction total in callgrind's output".to_owned())
}
