//! The Postgres rows: the backend's cycles next to advisory locks and the durable
//! single-row write pair, handoffs, and the watched locks.

use std::sync::Arc;

use lock_core::{redact_url, LockBackend, Locker};
use lock_postgres::{PostgresBackend, Statements};
use test_servers::bench::{rounds, run};

use crate::raw_handoff;
use crate::report::Table;
use crate::{
    baselines, handoffs, several_keys, shared_holds, through, watched, Batching, Size, CONCURRENCY,
};

pub(crate) async fn postgres(table: &mut Table, size: Size, url: &str) -> Result<(), String> {
    // Two pools of 24 (durable, async commit) stay inside the server's default 100
    // connections; 64 tasks queue for them, as they would in a service.
    let builder = PostgresBackend::builder(url)
        .table("public", "distlock_bench")
        .pool_size(24);
    let durable = builder.clone().build().map_err(|e| e.to_string())?;
    durable
        .migrate()
        .await
        .map_err(|e| format!("no Postgres at {} (set DATABASE_URL): {e}", redact_url(url)))?;
    let fast = builder
        .clone()
        .durable_commits(false)
        .build()
        .map_err(|e| e.to_string())?;
    let simple = builder
        .statements(Statements::Simple)
        .build()
        .map_err(|e| e.to_string())?;
    let pool = durable.pool().clone();
    baselines::pg_rows_table(&pool).await;
    let durable: Arc<dyn LockBackend> = Arc::new(durable);
    if size.watched_only {
        let batch = Some(Batching {
            locks: PostgresBackend::BATCH,
            round_trips: 1,
        });
        watched(table, "postgres", durable, size, batch, || async { None }).await;
        return Ok(());
    }
    let (d, f, s) = (
        Locker::new(durable.clone()),
        Locker::new(Arc::new(fast)),
        Locker::new(Arc::new(simple)),
    );
    let mut base_id = 1_000_000_000i64;
    for tasks in CONCURRENCY {
        let [raw, writes, project, unsynced, simple] = rounds(size.rounds, async || {
            base_id += 1_000_000;
            let next = Arc::new(std::sync::atomic::AtomicI64::new(base_id));
            let (p, w) = (pool.clone(), pool.clone());
            [
                run(tasks, size.pg_cycles, move |_, n| {
                    let base = next.fetch_add(1_000, std::sync::atomic::Ordering::Relaxed);
                    baselines::pg_cycles(p.clone(), base, n)
                })
                .await,
                run(tasks, size.pg_cycles, move |prefix, n| {
                    baselines::pg_write_cycles(w.clone(), prefix, n)
                })
                .await,
                through(&d, tasks, size.pg_cycles, true).await,
                through(&f, tasks, size.pg_cycles, true).await,
                through(&s, tasks, size.pg_cycles, true).await,
            ]
        })
        .await;
        let what = "pg_try_advisory_lock + pg_advisory_unlock";
        let durable_writes = "a durable single-row upsert + update";
        table.cycles("postgres", "obtain()+release", tasks, what, raw, project);
        table.cycles(
            "postgres",
            "obtain()+release",
            tasks,
            durable_writes,
            writes,
            project,
        );
        table.cycles(
            "postgres, async commit",
            "obtain()+release",
            tasks,
            what,
            raw,
            unsynced,
        );
        table.cycles(
            "postgres, simple statements",
            "obtain()+release",
            tasks,
            durable_writes,
            writes,
            simple,
        );
    }
    let pg_size = Size {
        cycles: size.pg_cycles,
        ..size
    };
    shared_holds(table, "postgres", &d, pg_size).await;
    several_keys(table, "postgres", &d, pg_size).await;
    handoffs(
        table,
        "postgres",
        durable.clone(),
        size,
        Some(&raw_handoff::Raw::Postgres(pool.clone())),
    )
    .await;
    let batch = Some(Batching {
        locks: PostgresBackend::BATCH,
        round_trips: 1,
    });
    watched(table, "postgres", durable, size, batch, || async { None }).await;
    let _ = sqlx::raw_sql(
        "DROP TABLE IF EXISTS public.distlock_bench CASCADE; \
         DROP TABLE IF EXISTS public.distlock_bench_rows",
    )
    .execute(&pool)
    .await;
    Ok(())
}
