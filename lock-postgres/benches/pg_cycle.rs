//! Obtain+release cycles on Postgres against raw session advisory locks, and handoff.
//!
//! Raw baseline, on the same pool: `pg_try_advisory_lock` + `pg_advisory_unlock` on one
//! checked-out connection (2 statements, 2 round trips, and a connection pinned while held).
//! A backend cycle is 2 statements too (obtain, release), each one function call in its own
//! transaction. Handoff: 8 waiters on one key; release to the next holder's `Acquired`, woken
//! by LISTEN/NOTIFY, and by plain polling.
//!
//! Needs Postgres: `DATABASE_URL`, or postgres://postgres@127.0.0.1:5432/postgres.
//! Run: `cargo bench -p lock-postgres --bench pg_cycle`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{
    Attempt, HolderInfo, Key, LockBackend, Locker, ObtainOutcome, ObtainRequest, ReleaseOutcome,
    ReleaseRequest, Retry, Token, Ttl,
};
use lock_postgres::PostgresBackend;
use sqlx::PgPool;

const CYCLES: usize = 4_000;
const ROUNDS: usize = 3;

async fn raw_cycles(pool: PgPool, base: i64, n: usize) {
    for i in 0..n {
        let id = base + (i % 64) as i64;
        let mut conn = pool.acquire().await.unwrap();
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert!(got);
        let freed: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert!(freed);
    }
}

async fn lock_cycles(backend: Arc<dyn LockBackend>, prefix: String, n: usize) {
    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    let holder = HolderInfo::current();
    let keys: Vec<Key> = (0..64)
        .map(|i| Key::new(format!("{prefix}{i}")).unwrap())
        .collect();
    for i in 0..n {
        let key = &keys[i % keys.len()];
        let token = Token::generate().unwrap();
        let o = backend
            .obtain(ObtainRequest {
                key,
                token: &token,
                ttl,
                holder: &holder,
            })
            .await
            .unwrap();
        assert!(matches!(o, ObtainOutcome::Acquired { .. }), "{o:?}");
        let r = backend
            .release(ReleaseRequest {
                key,
                token: &token,
                delay_after: None,
            })
            .await
            .unwrap();
        assert_eq!(r, ReleaseOutcome::Released);
    }
}

async fn rate<F, Fut>(tasks: usize, f: F) -> f64
where
    F: Fn(usize, usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| tokio::spawn(f(t, CYCLES / tasks)))
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    (CYCLES / tasks * tasks) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn handoff(backend: Arc<dyn LockBackend>, retry: Retry, handoffs: usize) -> Vec<Duration> {
    let key = format!("handoff-{}", Token::generate().unwrap().to_hex());
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let locker = Locker::new(backend.clone());
        let (key, released_at, latencies) = (key.clone(), released_at.clone(), latencies.clone());
        let retry = retry.clone();
        tasks.push(tokio::spawn(async move {
            while latencies.lock().unwrap().len() < handoffs {
                let attempt = locker
                    .lock(&key)
                    .wait(Duration::from_secs(30))
                    .retry(retry.clone())
                    .obtain()
                    .await
                    .unwrap();
                let Attempt::Obtained(guard) = attempt else {
                    continue;
                };
                let now = Instant::now();
                if let Some(r) = released_at.lock().unwrap().take() {
                    latencies.lock().unwrap().push(now - r);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                *released_at.lock().unwrap() = Some(Instant::now());
                let _ = guard.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut v = latencies.lock().unwrap().clone();
    v.sort();
    v
}

fn pct(v: &[Duration], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
}

fn main() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let backend = PostgresBackend::connect(&url).unwrap().with_table("public", "distlock_bench").unwrap();
        backend
            .migrate()
            .await
            .unwrap_or_else(|e| panic!("the bench needs Postgres at {url} (set DATABASE_URL): {e}"));
        let pool = backend.pool().clone();
        let fast: Arc<dyn LockBackend> = Arc::new(backend.clone().with_durable_commits(false));
        let backend: Arc<dyn LockBackend> = Arc::new(backend);
        println!("pg_cycle: {CYCLES} cycles per measurement, median of {ROUNDS} rounds, interleaved");
        for tasks in [1, 8] {
            let (mut r, mut l, mut f) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..ROUNDS {
                let p = pool.clone();
                r.push(rate(tasks, move |t, n| raw_cycles(p.clone(), 1_000_000 * (t as i64 + 1) + round as i64 * 100, n)).await);
                let b = backend.clone();
                l.push(rate(tasks, move |t, n| lock_cycles(b.clone(), format!("bench-{round}-{t}-"), n)).await);
                let b = fast.clone();
                f.push(rate(tasks, move |t, n| lock_cycles(b.clone(), format!("fast-{round}-{t}-"), n)).await);
            }
            let (r, l, f) = (median(r), median(l), median(f));
            println!(
                "{tasks} task(s): raw advisory lock+unlock {r:>7.0}/s | backend, durable {l:>7.0}/s (ratio {:.3}) | backend, synchronous_commit off {f:>7.0}/s (ratio {:.3})",
                l / r,
                f / r
            );
        }
        let notified = handoff(backend.clone(), Retry::default(), 300).await;
        let polling = handoff(
            backend.clone(),
            Retry::exponential(Duration::from_millis(5), Duration::from_millis(250)),
            150,
        )
        .await;
        println!(
            "handoff, 8 waiters: LISTEN/NOTIFY p50 {:.2} ms p99 {:.2} ms ({}) | polling 5-250 ms p50 {:.2} ms p99 {:.2} ms ({})",
            pct(&notified, 0.5),
            pct(&notified, 0.99),
            notified.len(),
            pct(&polling, 0.5),
            pct(&polling, 0.99),
            polling.len()
        );
        sqlx::raw_sql("DROP TABLE IF EXISTS public.distlock_bench CASCADE")
            .execute(&pool)
            .await
            .unwrap();
    });
}
