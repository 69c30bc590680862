//! The Redis rows: both variants' cycles next to the raw commands and rslock, where a
//! cycle's time goes, handoffs, and the watched locks.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{redact_url, LockBackend, Locker};
use lock_redis::{RedisBackend, Variant};
use test_servers::bench::{rounds, run};

use crate::raw_handoff;
use crate::report::Table;
use crate::{
    baselines, cpu, handoffs, several_keys, shared_holds, through, watched, Batching, Size,
    CONCURRENCY,
};

pub(crate) async fn redis(table: &mut Table, size: Size, url: &str) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let no_redis = |why: String| format!("no Redis at {} (set REDIS_URL): {why}", redact_url(url));
    let connecting = redis::aio::ConnectionManager::new(client.clone());
    let raw = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .map_err(|_| no_redis("no answer in 10 s".into()))?
        .map_err(|e| no_redis(e.to_string()))?;
    let rslock = rslock::LockManager::new(vec![url.to_owned()]);
    let connect = |variant: Variant| {
        RedisBackend::builder(url)
            .variant(variant)
            .prefix("bench:")
            .pool_size(64)
            .connect()
    };
    let lua: Arc<dyn LockBackend> =
        Arc::new(connect(Variant::Lua).await.map_err(|e| e.to_string())?);
    let watch: Arc<dyn LockBackend> =
        Arc::new(connect(Variant::Watch).await.map_err(|e| e.to_string())?);
    if size.watched_only {
        return redis_watched(table, size, lua, raw).await;
    }
    let (lua_locker, watch_locker) = (Locker::new(lua.clone()), Locker::new(watch.clone()));
    for tasks in CONCURRENCY {
        let [base, peer, obtain, try_obtain, raw_watch, watched_variant] =
            rounds(size.rounds, async || {
                let (c, m, w) = (raw.clone(), rslock.clone(), client.clone());
                [
                    run(tasks, size.cycles, move |p, n| {
                        baselines::redis_cycles(c.clone(), p, n)
                    })
                    .await,
                    run(tasks, size.cycles, move |p, n| {
                        baselines::rslock_cycles(m.clone(), p, n)
                    })
                    .await,
                    through(&lua_locker, tasks, size.cycles, true).await,
                    through(&lua_locker, tasks, size.cycles, false).await,
                    run(tasks, size.cycles, move |p, n| {
                        baselines::redis_watch_cycles(w.clone(), p, n)
                    })
                    .await,
                    through(&watch_locker, tasks, size.cycles, true).await,
                ]
            })
            .await;
        let what = "raw SET NX PX + compare-and-delete";
        table.cycles("rslock 0.10", "lock+unlock", tasks, what, base, peer);
        table.cycles("redis-lua", "obtain()+release", tasks, what, base, obtain);
        table.cycles(
            "redis-lua",
            "try_obtain()+release",
            tasks,
            what,
            base,
            try_obtain,
        );
        table.cycles(
            "redis-watch",
            "obtain()+release",
            tasks,
            "raw WATCH + GET, MULTI SET/DEL EXEC",
            raw_watch,
            watched_variant,
        );
    }
    // Where a cycle's time goes, on both sides of the connection.
    for tasks in [1, 64] {
        let (c, w, mut info) = (raw.clone(), client.clone(), raw.clone());
        let split = [
            (
                "raw SET NX PX + compare-and-delete",
                cpu::split(
                    &mut info,
                    size.cycles,
                    run(tasks, size.cycles, move |p, n| {
                        baselines::redis_cycles(c.clone(), p, n)
                    }),
                )
                .await,
            ),
            (
                "redis-lua obtain()+release",
                cpu::split(
                    &mut info,
                    size.cycles,
                    through(&lua_locker, tasks, size.cycles, true),
                )
                .await,
            ),
            (
                "raw WATCH + GET, MULTI SET/DEL EXEC",
                cpu::split(
                    &mut info,
                    size.cycles,
                    run(tasks, size.cycles, move |p, n| {
                        baselines::redis_watch_cycles(w.clone(), p, n)
                    }),
                )
                .await,
            ),
            (
                "redis-watch obtain()+release",
                cpu::split(
                    &mut info,
                    size.cycles,
                    through(&watch_locker, tasks, size.cycles, true),
                )
                .await,
            ),
        ];
        for (what, split) in split {
            table.cpu(what, tasks, split);
        }
    }
    shared_holds(table, "redis-lua", &lua_locker, size).await;
    several_keys(table, "redis-lua", &lua_locker, size).await;
    shared_holds(table, "redis-watch", &watch_locker, size).await;
    let raw_handoff = raw_handoff::Raw::Redis(Box::new(client.clone()));
    handoffs(table, "redis-lua", lua.clone(), size, Some(&raw_handoff)).await;
    handoffs(table, "redis-watch", watch, size, Some(&raw_handoff)).await;
    redis_watched(table, size, lua, raw).await
}

async fn redis_watched(
    table: &mut Table,
    size: Size,
    lua: Arc<dyn LockBackend>,
    info: redis::aio::ConnectionManager,
) -> Result<(), String> {
    watched(
        table,
        "redis-lua",
        lua,
        size,
        Some(Batching {
            locks: RedisBackend::BATCH,
            round_trips: 1,
        }),
        move || {
            let mut c = info.clone();
            async move { baselines::redis_evalsha_calls(&mut c).await }
        },
    )
    .await;
    Ok(())
}
