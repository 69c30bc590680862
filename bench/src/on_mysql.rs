//! The MariaDB/MySQL rows: the backend's cycles next to `GET_LOCK` and the durable
//! single-row write pair, shared holds, handoffs (by polling: no notifications), and the
//! watched locks.

use std::sync::Arc;

use lock_core::{redact_url, LockBackend, Locker};
use lock_mysql::MySqlBackend;
use test_servers::bench::{rounds, run};

use crate::raw_handoff;
use crate::report::Table;
use crate::{
    baselines, handoffs, several_keys, shared_holds, through, watched, Batching, Size, CONCURRENCY,
};

pub(crate) async fn mysql(table: &mut Table, size: Size, url: &str) -> Result<(), String> {
    // 24 connections: 64 tasks queue for them, as they would in a service.
    let backend = MySqlBackend::builder(url)
        .table("distlock_bench")
        .pool_size(24)
        .build()
        .map_err(|e| e.to_string())?;
    backend
        .migrate()
        .await
        .map_err(|e| format!("no MariaDB at {} (set MYSQL_URL): {e}", redact_url(url)))?;
    let pool = backend.pool().clone();
    baselines::my_rows_table(&pool).await;
    // The same backend deciding every operation in the client (as it does where the
    // procedure cannot be made or called), for the procedure's gain within one run.
    let in_client: Arc<dyn LockBackend> = Arc::new(
        MySqlBackend::builder(url)
            .table("distlock_bench")
            .pool_size(24)
            .decide_in_client()
            .build()
            .map_err(|e| e.to_string())?,
    );
    let backend: Arc<dyn LockBackend> = Arc::new(backend);
    if size.watched_only {
        let batch = Some(Batching {
            locks: MySqlBackend::BATCH,
            round_trips: 2,
        });
        watched(table, "mysql", backend, size, batch, || async { None }).await;
        return Ok(());
    }
    let locker = Locker::new(backend.clone());
    let client_locker = Locker::new(in_client);
    for tasks in CONCURRENCY {
        let [named, writes, project, client] = rounds(size.rounds, async || {
            let (n, w) = (pool.clone(), pool.clone());
            [
                run(tasks, size.pg_cycles, move |prefix, count| {
                    baselines::my_named_cycles(n.clone(), prefix, count)
                })
                .await,
                run(tasks, size.pg_cycles, move |prefix, count| {
                    baselines::my_write_cycles(w.clone(), prefix, count)
                })
                .await,
                through(&locker, tasks, size.pg_cycles, true).await,
                through(&client_locker, tasks, size.pg_cycles, true).await,
            ]
        })
        .await;
        let what = "GET_LOCK + RELEASE_LOCK";
        let durable_writes = "a durable single-row upsert + update";
        table.cycles("mysql", "obtain()+release", tasks, what, named, project);
        table.cycles(
            "mysql",
            "obtain()+release",
            tasks,
            durable_writes,
            writes,
            project,
        );
        table.cycles(
            "mysql",
            "obtain()+release",
            tasks,
            "the same, decided in the client",
            client,
            project,
        );
    }
    let my_size = Size {
        cycles: size.pg_cycles,
        ..size
    };
    shared_holds(table, "mysql", &locker, my_size).await;
    several_keys(table, "mysql", &locker, my_size).await;
    handoffs(
        table,
        "mysql",
        backend.clone(),
        size,
        Some(&raw_handoff::Raw::MySql(pool.clone())),
    )
    .await;
    let batch = Some(Batching {
        locks: MySqlBackend::BATCH,
        round_trips: 2,
    });
    watched(table, "mysql", backend, size, batch, || async { None }).await;
    let _ = sqlx::raw_sql("DROP TABLE IF EXISTS distlock_bench, distlock_bench_rows")
        .execute(&pool)
        .await;
    Ok(())
}
