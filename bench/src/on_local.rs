//! The rows of the backends without a server: memory (with what an observer costs) and
//! the file backend next to one `flock`ed read-modify-write.

use std::sync::Arc;

use lock_core::observe::metrics::MetricsObserver;
use lock_core::observe::{Event, Observer};
use lock_core::{LockBackend, Locker, MemoryBackend};
use lock_file::FileBackend;

use crate::report::Table;
use crate::*;

/// An observer that ignores every event: the cost of the call itself.
struct Idle;

impl Observer for Idle {
    fn event(&self, _: &Event<'_>) {}
}

pub(crate) async fn memory(table: &mut Table, size: Size) {
    let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
    let locker = Locker::new(backend.clone());
    // What an observer costs: one that does nothing, and the metrics one recording into
    // the facade's no-op recorder (no exporter installed), in the same rounds.
    let idle = locker.clone().with_observer(Arc::new(Idle));
    let metrics = locker
        .clone()
        .with_observer(Arc::new(MetricsObserver::new()));
    for tasks in CONCURRENCY.iter().copied().filter(|_| !size.watched_only) {
        let [raw, project, idle, metrics] = rounds(size.rounds, async || {
            let b = backend.clone();
            [
                run(tasks, size.cycles, move |p, n| {
                    backend_cycles(b.clone(), p, n)
                })
                .await,
                through(&locker, tasks, size.cycles, true).await,
                through(&idle, tasks, size.cycles, true).await,
                through(&metrics, tasks, size.cycles, true).await,
            ]
        })
        .await;
        let baseline = "the trait, called directly";
        table.cycles("memory", "obtain()+release", tasks, baseline, raw, project);
        let with_idle = "obtain()+release, an observer that does nothing";
        table.cycles("memory", with_idle, tasks, baseline, raw, idle);
        let with_metrics = "obtain()+release, MetricsObserver, no exporter";
        table.cycles("memory", with_metrics, tasks, baseline, raw, metrics);
    }
    if !size.watched_only {
        shared_holds(table, "memory", &locker, size).await;
        several_keys(table, "memory", &locker, size).await;
        handoffs(table, "memory", backend, size, None).await;
    }
    watched(
        table,
        "memory",
        Arc::new(MemoryBackend::new()),
        size,
        None,
        || async { None },
    )
    .await;
}

pub(crate) async fn file(table: &mut Table, size: Size) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let backend: Arc<dyn LockBackend> =
        Arc::new(FileBackend::new(dir.path().join("locks")).expect("a lock directory"));
    let locker = Locker::new(backend.clone());
    let raw_dir = dir.path().join("raw");
    std::fs::create_dir_all(&raw_dir).expect("a directory");
    for tasks in CONCURRENCY.iter().copied().filter(|_| !size.watched_only) {
        let [raw, project] = rounds(size.rounds, async || {
            let d = raw_dir.clone();
            [
                run(tasks, size.cycles, move |p, n| {
                    baselines::file_cycles(d.clone(), p, n)
                })
                .await,
                through(&locker, tasks, size.cycles, true).await,
            ]
        })
        .await;
        table.cycles(
            "file",
            "obtain()+release",
            tasks,
            "one flocked read-modify-write of a file",
            raw,
            project,
        );
    }
    if !size.watched_only {
        shared_holds(table, "file", &locker, size).await;
        several_keys(table, "file", &locker, size).await;
        handoffs(table, "file", backend.clone(), size, None).await;
    }
    watched(table, "file", backend, size, None, || async { None }).await;
}
