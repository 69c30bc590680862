//! The handoff each backend's is compared with: the least a notified handoff takes on that
//! server, with nothing of the contract in it.
//!
//! The same shape as [`test_servers::bench::handoff`]: `waiters` tasks on one key, each
//! taking it, holding it 1 ms and freeing it; the figure is the time from the holder's free
//! call to the next holder's successful take. A waiter that finds the key taken waits for a
//! wake-up (with a 50 ms fallback, as a lost message would cost the backend's waiters), and
//! a wake-up wakes one waiter, as the backends' do:
//! - Redis: `SET key token NX PX 30000` to take; a compare-and-delete script that
//!   `PUBLISH`es to free; one pub/sub connection wakes the waiters.
//! - Postgres: a durable `UPDATE … WHERE holder IS NULL` to take; one statement that frees
//!   the row and calls `pg_notify` (durable: the notification goes out at its commit) to
//!   free; one `LISTEN`ing connection wakes the waiters.
//! - MariaDB: the same durable updates; no notifications on the server, so the freeing task
//!   wakes the process's waiters itself, as the backend does.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::backend::Token;
use sqlx::{MySqlPool, PgPool};
use test_servers::bench::{fresh_prefix, Latencies};
use tokio::sync::Notify;

const FREE_AND_PUBLISH: &str = r"if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[2], '1') return 1 end return 0";

/// A server to hand a key over on, the least way.
#[derive(Clone)]
pub(crate) enum Raw {
    Redis(Box<redis::Client>),
    Postgres(PgPool),
    MySql(MySqlPool),
}

/// One waiter's connection.
enum Conn {
    Redis(redis::aio::MultiplexedConnection, redis::Script),
    Postgres(PgPool),
    MySql(MySqlPool),
}

impl Raw {
    /// What the handoff table calls it.
    pub(crate) fn what(&self) -> &'static str {
        match self {
            Raw::Redis(_) => "raw: SET NX PX, PUBLISH on free",
            Raw::Postgres(_) => "raw: durable UPDATE, pg_notify on free",
            Raw::MySql(_) => "raw: durable UPDATE, woken in process",
        }
    }

    /// `handoffs` handoffs between `waiters` tasks on one fresh key.
    pub(crate) async fn handoff(&self, waiters: usize, handoffs: usize) -> Latencies {
        let key = fresh_prefix("raw-handoff");
        let channel = format!("{key}:freed");
        let wake = Arc::new(Notify::new());
        let listener = self.listen(&channel, wake.clone()).await;
        let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
        let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let mut tasks = Vec::with_capacity(waiters);
        for _ in 0..waiters {
            let conn = self.conn().await;
            let (key, channel, wake) = (key.clone(), channel.clone(), wake.clone());
            let (released_at, latencies) = (released_at.clone(), latencies.clone());
            tasks.push(tokio::spawn(async move {
                let mut conn = conn;
                while latencies.lock().unwrap().len() < handoffs {
                    let me = Token::generate().expect("a token").to_hex();
                    let woken = wake.notified();
                    tokio::pin!(woken);
                    woken.as_mut().enable();
                    if !conn.take(&key, &me).await {
                        tokio::select! {
                            () = woken => {}
                            () = tokio::time::sleep(Duration::from_millis(50)) => {}
                        }
                        continue;
                    }
                    if let Some(r) = released_at.lock().unwrap().take() {
                        latencies.lock().unwrap().push(r.elapsed());
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    *released_at.lock().unwrap() = Some(Instant::now());
                    conn.free(&key, &me, &channel).await;
                    if matches!(conn, Conn::MySql(_)) {
                        wake.notify_one();
                    }
                }
            }));
        }
        for t in tasks {
            t.await.expect("a raw waiter");
        }
        if let Some(listener) = listener {
            listener.abort();
        }
        let v = latencies.lock().unwrap().clone();
        Latencies::new(v)
    }

    /// The task that turns the server's messages into wake-ups, where the server sends any.
    async fn listen(
        &self,
        channel: &str,
        wake: Arc<Notify>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        match self {
            Raw::Redis(client) => {
                let mut pubsub = client
                    .get_async_pubsub()
                    .await
                    .expect("a pub/sub connection");
                pubsub.subscribe(channel).await.expect("SUBSCRIBE");
                Some(tokio::spawn(async move {
                    let mut messages = pubsub.into_on_message();
                    while messages.next().await.is_some() {
                        wake.notify_one();
                    }
                }))
            }
            Raw::Postgres(pool) => {
                let mut listener = sqlx::postgres::PgListener::connect_with(pool)
                    .await
                    .expect("a listening connection");
                listener.listen(channel).await.expect("LISTEN");
                Some(tokio::spawn(async move {
                    while listener.recv().await.is_ok() {
                        wake.notify_one();
                    }
                }))
            }
            Raw::MySql(_) => None,
        }
    }

    async fn conn(&self) -> Conn {
        match self {
            Raw::Redis(client) => Conn::Redis(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("a connection"),
                redis::Script::new(FREE_AND_PUBLISH),
            ),
            Raw::Postgres(pool) => Conn::Postgres(pool.clone()),
            Raw::MySql(pool) => Conn::MySql(pool.clone()),
        }
    }
}

impl Conn {
    /// Takes `key` for `me` if it is free.
    async fn take(&mut self, key: &str, me: &str) -> bool {
        match self {
            Conn::Redis(conn, _) => {
                let ok: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(me)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(conn)
                    .await
                    .expect("SET NX");
                ok.is_some()
            }
            Conn::Postgres(pool) => {
                sqlx::query(
                    "INSERT INTO public.distlock_bench_rows (key, holder) VALUES ($1, $2) \
                     ON CONFLICT (key) DO UPDATE SET holder = EXCLUDED.holder \
                     WHERE distlock_bench_rows.holder IS NULL",
                )
                .bind(key)
                .bind(me)
                .execute(&*pool)
                .await
                .expect("take")
                .rows_affected()
                    == 1
            }
            Conn::MySql(pool) => {
                // Inserted free once, then taken by a conditional update.
                sqlx::query(
                    "INSERT IGNORE INTO distlock_bench_rows (`key`, holder) VALUES (?, NULL)",
                )
                .bind(key.as_bytes())
                .execute(&*pool)
                .await
                .expect("the row");
                sqlx::query(
                    "UPDATE distlock_bench_rows SET holder = ? WHERE `key` = ? AND holder IS NULL",
                )
                .bind(me.as_bytes())
                .bind(key.as_bytes())
                .execute(&*pool)
                .await
                .expect("take")
                .rows_affected()
                    == 1
            }
        }
    }

    /// Frees `key` if `me` holds it, and tells the waiters where the server can.
    async fn free(&mut self, key: &str, me: &str, channel: &str) {
        match self {
            Conn::Redis(conn, script) => {
                let freed: i64 = script
                    .key(key)
                    .key(channel)
                    .arg(me)
                    .invoke_async(conn)
                    .await
                    .expect("free");
                assert_eq!(freed, 1);
            }
            Conn::Postgres(pool) => {
                let freed: i64 = sqlx::query_scalar(
                    "WITH f AS (UPDATE public.distlock_bench_rows SET holder = NULL \
                     WHERE key = $1 AND holder = $2 RETURNING 1) \
                     SELECT count(pg_notify($3, '1')) FROM f",
                )
                .bind(key)
                .bind(me)
                .bind(channel)
                .fetch_one(&*pool)
                .await
                .expect("free");
                assert_eq!(freed, 1);
            }
            Conn::MySql(pool) => {
                let freed = sqlx::query(
                    "UPDATE distlock_bench_rows SET holder = NULL WHERE `key` = ? AND holder = ?",
                )
                .bind(key.as_bytes())
                .bind(me.as_bytes())
                .execute(&*pool)
                .await
                .expect("free")
                .rows_affected();
                assert_eq!(freed, 1);
            }
        }
    }
}
