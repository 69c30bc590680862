//! The raw cycles each backend is compared with: the least a correct lock of that kind does.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lock_core::backend::Token;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use sqlx::{MySqlPool, PgPool};

const UNLOCK: &str =
    r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// `SET key token NX PX 30000`, then compare-and-delete: 2 round trips a cycle.
pub(crate) async fn redis_cycles(
    mut conn: ConnectionManager,
    prefix: String,
    n: usize,
) -> Vec<Duration> {
    let unlock = redis::Script::new(UNLOCK);
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let key = format!("{prefix}{}", i % 64);
        let token = Token::generate().expect("a token").to_hex();
        let ok: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut conn)
            .await
            .expect("SET NX");
        assert!(ok.is_some(), "{key} should be free");
        let deleted: i64 = unlock
            .key(&key)
            .arg(&token)
            .invoke_async(&mut conn)
            .await
            .expect("compare-and-delete");
        assert_eq!(deleted, 1);
        times.push(started.elapsed());
    }
    times
}

/// rslock's lock + unlock on the same server (one instance: no quorum to wait for).
pub(crate) async fn rslock_cycles(
    manager: rslock::LockManager,
    prefix: String,
    n: usize,
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let key = format!("{prefix}{}", i % 64);
        let lock = manager
            .lock(key.as_str(), Duration::from_secs(30))
            .await
            .expect("rslock lock of a free key");
        manager.unlock(&lock).await;
        times.push(started.elapsed());
    }
    times
}

/// `pg_try_advisory_lock` + `pg_advisory_unlock` on one pooled connection: 2 round trips.
pub(crate) async fn pg_cycles(pool: PgPool, base: i64, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let id = base + (i % 64) as i64;
        let mut conn = pool.acquire().await.expect("a connection");
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await
            .expect("pg_try_advisory_lock");
        assert!(got);
        let freed: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await
            .expect("pg_advisory_unlock");
        assert!(freed);
        times.push(started.elapsed());
    }
    times
}

/// The table of [`pg_write_cycles`].
pub(crate) async fn pg_rows_table(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS public.distlock_bench_rows (key text PRIMARY KEY, holder text)",
    )
    .execute(pool)
    .await
    .expect("the baseline's table");
}

/// What a lock row costs at the least when each write is durable: an upsert that takes the
/// row, then an update that frees it, two autocommit statements (two commits, each waiting
/// for its WAL flush) on one pooled connection: 2 round trips.
pub(crate) async fn pg_write_cycles(pool: PgPool, prefix: String, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let key = format!("{prefix}{}", i % 64);
        let mut conn = pool.acquire().await.expect("a connection");
        sqlx::query(
            "INSERT INTO public.distlock_bench_rows (key, holder) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET holder = EXCLUDED.holder",
        )
        .bind(&key)
        .bind("bench")
        .execute(&mut *conn)
        .await
        .expect("upsert");
        sqlx::query("UPDATE public.distlock_bench_rows SET holder = NULL WHERE key = $1")
            .bind(&key)
            .execute(&mut *conn)
            .await
            .expect("update");
        times.push(started.elapsed());
    }
    times
}

/// open + flock + pread + pwrite + unlock + close of one small file per key: the cheapest
/// correct read-modify-write a lock file can do (a lock cycle needs two).
pub(crate) async fn file_cycles(dir: PathBuf, prefix: String, n: usize) -> Vec<Duration> {
    let mut buf = [0u8; 256];
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(format!("{prefix}{}", i % 64)))
            .expect("a file");
        f.lock().expect("flock");
        let _ = f.read_at(&mut buf, 0).expect("pread");
        let line = format!("{{\"v\":1,\"fencing\":{i}}}\n");
        f.write_all_at(line.as_bytes(), 0).expect("pwrite");
        f.unlock().expect("unlock");
        times.push(started.elapsed());
    }
    times
}

/// How many `EVALSHA` calls the server has run: `INFO commandstats`.
pub(crate) async fn redis_evalsha_calls(conn: &mut ConnectionManager) -> Option<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .ok()?;
    let line = info.lines().find(|l| l.starts_with("cmdstat_evalsha:"))?;
    line.split([':', ','])
        .find_map(|f| f.strip_prefix("calls="))?
        .parse()
        .ok()
}

/// The same cycle with optimistic transactions, as the WATCH variant runs it: on a
/// connection of the task's own, `WATCH` + `GET` (one round trip), then `MULTI`, `SET … PX`
/// (or `DEL`), `EXEC` (one more) for the obtain and again for the release: 4 round trips a
/// cycle.
pub(crate) async fn redis_watch_cycles(
    client: redis::Client,
    prefix: String,
    n: usize,
) -> Vec<Duration> {
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection of the task's own");
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let key = format!("{prefix}watch-{}", i % 64);
        let token = Token::generate().expect("a token").to_hex();
        assert!(
            watch_get(&mut conn, &key).await.is_none(),
            "{key} should be free"
        );
        let mut set = redis::cmd("SET");
        set.arg(&key).arg(&token).arg("PX").arg(30_000);
        exec(&mut conn, set).await;
        assert_eq!(watch_get(&mut conn, &key).await, Some(token));
        let mut del = redis::cmd("DEL");
        del.arg(&key);
        exec(&mut conn, del).await;
        times.push(started.elapsed());
    }
    times
}

/// `WATCH key` + `GET key`, in one round trip.
async fn watch_get(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    let (value,): (Option<String>,) = redis::pipe()
        .cmd("WATCH")
        .arg(key)
        .ignore()
        .cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("WATCH + GET");
    value
}

/// `MULTI`, `cmd`, `EXEC`, in one round trip; nobody else writes the key, so it commits.
async fn exec(conn: &mut MultiplexedConnection, cmd: redis::Cmd) {
    let committed: Option<redis::Value> = redis::pipe()
        .atomic()
        .add_command(cmd)
        .ignore()
        .query_async(conn)
        .await
        .expect("MULTI … EXEC");
    assert!(committed.is_some(), "the transaction was not applied");
}

/// `GET_LOCK` + `RELEASE_LOCK` on one pooled connection: 2 round trips. (A named lock
/// belongs to the connection: the reason the backend does not use it.)
pub(crate) async fn my_named_cycles(pool: MySqlPool, prefix: String, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let name = format!("{prefix}{}", i % 64);
        let mut conn = pool.acquire().await.expect("a connection");
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await
            .expect("GET_LOCK");
        assert_eq!(got, Some(1));
        let freed: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await
            .expect("RELEASE_LOCK");
        assert_eq!(freed, Some(1));
        times.push(started.elapsed());
    }
    times
}

/// The table of [`my_write_cycles`].
pub(crate) async fn my_rows_table(pool: &MySqlPool) {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS distlock_bench_rows \
         (`key` VARBINARY(255) PRIMARY KEY, holder BLOB) ENGINE = InnoDB",
    )
    .execute(pool)
    .await
    .expect("the baseline's table");
}

/// What a lock row costs at the least when each write is durable: an upsert that takes the
/// row, then an update that frees it, two autocommit statements (two commits) on one
/// pooled connection: 2 round trips.
pub(crate) async fn my_write_cycles(pool: MySqlPool, prefix: String, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let key = format!("{prefix}{}", i % 64);
        let mut conn = pool.acquire().await.expect("a connection");
        sqlx::query(
            "INSERT INTO distlock_bench_rows (`key`, holder) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE holder = VALUES(holder)",
        )
        .bind(key.as_bytes())
        .bind(b"bench".as_slice())
        .execute(&mut *conn)
        .await
        .expect("upsert");
        sqlx::query("UPDATE distlock_bench_rows SET holder = NULL WHERE `key` = ?")
            .bind(key.as_bytes())
            .execute(&mut *conn)
            .await
            .expect("update");
        times.push(started.elapsed());
    }
    times
}
