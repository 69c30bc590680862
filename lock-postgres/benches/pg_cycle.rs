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

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Retry};
use lock_postgres::PostgresBackend;
use sqlx::PgPool;
use test_servers::bench::{backend_cycles, handoff, interleaved, rate, runtime};

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

fn main() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    runtime().block_on(async {
        let builder = PostgresBackend::builder(url.as_str()).table("public", "distlock_bench");
        let backend = builder.clone().build().unwrap();
        backend
            .migrate()
            .await
            .unwrap_or_else(|e| panic!("the bench needs Postgres at {url} (set DATABASE_URL): {e}"));
        let pool = backend.pool().clone();
        let fast: Arc<dyn LockBackend> = Arc::new(builder.durable_commits(false).build().unwrap());
        let backend: Arc<dyn LockBackend> = Arc::new(backend);
        println!("pg_cycle: {CYCLES} cycles per measurement, median of {ROUNDS} rounds, interleaved");
        for tasks in [1, 8] {
            let mut round = 0;
            let [r, l, f] = interleaved(ROUNDS, async || {
                round += 1;
                let p = pool.clone();
                let (b, fast) = (backend.clone(), fast.clone());
                // Each task of each round on advisory ids of its own.
                let next = Arc::new(std::sync::atomic::AtomicI64::new(round * 1_000_000));
                [
                    rate(tasks, CYCLES, move |_, n| {
                        let base = next.fetch_add(1_000, std::sync::atomic::Ordering::Relaxed);
                        raw_cycles(p.clone(), base, n)
                    })
                    .await,
                    rate(tasks, CYCLES, move |p, n| backend_cycles(b.clone(), p, n)).await,
                    rate(tasks, CYCLES, move |p, n| backend_cycles(fast.clone(), p, n)).await,
                ]
            })
            .await;
            println!(
                "{tasks} task(s): raw advisory lock+unlock {r:>7.0}/s | backend, durable {l:>7.0}/s (ratio {:.3}) | backend, synchronous_commit off {f:>7.0}/s (ratio {:.3})",
                l / r,
                f / r
            );
        }
        let notified = handoff(backend.clone(), Retry::default(), 8, 300).await;
        let polling = handoff(
            backend.clone(),
            Retry::exponential(Duration::from_millis(5), Duration::from_millis(250)),
            8,
            150,
        )
        .await;
        println!("handoff, 8 waiters: LISTEN/NOTIFY {notified} | polling 5-250 ms {polling}");
        sqlx::raw_sql("DROP TABLE IF EXISTS public.distlock_bench CASCADE")
            .execute(&pool)
            .await
            .unwrap();
    });
}
