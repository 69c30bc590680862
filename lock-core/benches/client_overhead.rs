//! What the client layer costs over calling the backend trait directly.
//!
//! Both loops do the same work on the memory backend: obtain a lock on one of 1024 named keys
//! and release it. The baseline validates the name into a `Key`, makes a token and calls
//! `LockBackend::obtain` and `release` directly, as a careful caller would; the client
//! loop goes through `Locker::lock(..).try_obtain()` and `LockGuard::release()` (validation,
//! token, guard, registry, span). Rounds alternate so both see the same machine state; the
//! median round of each is reported, with their ratio.
//!
//! Run: `cargo bench -p lock-core --bench client_overhead`

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::{ObtainRequest, ReleaseRequest, Token};
use lock_core::{HolderInfo, Key, LockBackend, Locker, MemoryBackend, Ttl};

const CYCLES: usize = 50_000;
const ROUNDS: usize = 9;

async fn raw(backend: &Arc<dyn LockBackend>, names: &[String], holder: &HolderInfo) -> Duration {
    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    let start = Instant::now();
    for i in 0..CYCLES {
        let key = &Key::new(names[i % names.len()].as_str()).unwrap();
        let token = Token::generate().unwrap();
        let req = ObtainRequest::new(key, &token, ttl, holder);
        let _ = backend.obtain(req).await.unwrap();
        let req = ReleaseRequest {
            key,
            token: &token,
            delay_after: None,
        };
        let _ = backend.release(req).await.unwrap();
    }
    start.elapsed()
}

async fn client(locker: &Locker, names: &[String]) -> Duration {
    let start = Instant::now();
    for i in 0..CYCLES {
        let guard = locker
            .lock(&names[i % names.len()])
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap();
        let _ = guard.release().await.unwrap();
    }
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
        let locker = Locker::new(backend.clone());
        let names: Vec<String> = (0..1024).map(|i| format!("bench-{i}")).collect();
        let holder = HolderInfo::current();
        let (mut raws, mut clients) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            raws.push(raw(&backend, &names, &holder).await);
            clients.push(client(&locker, &names).await);
        }
        let (r, c) = (median(raws), median(clients));
        let per = |d: Duration| d.as_nanos() as f64 / CYCLES as f64;
        println!(
            "raw trait cycle     {:>8.0} ns  ({:.0} cycles/s)",
            per(r),
            1e9 / per(r)
        );
        println!(
            "client layer cycle  {:>8.0} ns  ({:.0} cycles/s)",
            per(c),
            1e9 / per(c)
        );
        println!(
            "client/raw time ratio: {:.3} (overhead {:+.1} %)",
            per(c) / per(r),
            (per(c) / per(r) - 1.0) * 100.0
        );
    });
}
