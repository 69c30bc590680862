//! Obtain+release cycles on Redis against the raw two-command lock, and contended handoff.
//!
//! Raw baseline, on the same kind of connection: `SET key token NX PX 30000`, then the
//! classic compare-and-delete script (`if GET == token then DEL`), the least a correct
//! single-server lock can do: 2 round trips a cycle, like the Lua variant. The WATCH variant
//! needs 4 (two per operation). Handoff: 8 waiters on one key; the time from the holder's
//! release call to the next holder's `Acquired`, woken by pub/sub, and by plain polling.
//!
//! Needs a Redis server: `REDIS_URL`, or 127.0.0.1:6379.
//! Run: `cargo bench -p lock-redis --bench redis_cycle`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{
    Attempt, HolderInfo, Key, LockBackend, Locker, ObtainRequest, ReleaseRequest, Retry, Token, Ttl,
};
use lock_redis::{RedisBackend, Variant};
use redis::aio::ConnectionManager;

const CYCLES: usize = 4_000;
const TASKS: usize = 64;
const ROUNDS: usize = 3;

const UNLOCK: &str =
    r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

async fn raw_cycles(conn: ConnectionManager, prefix: String, n: usize) {
    let unlock = redis::Script::new(UNLOCK);
    let mut conn = conn;
    for i in 0..n {
        let key = format!("{prefix}{}", i % 64);
        let token = Token::generate().unwrap().to_hex();
        let ok: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ok.is_some());
        let deleted: i64 = unlock
            .key(&key)
            .arg(&token)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(deleted, 1);
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
        assert!(
            matches!(o, lock_core::ObtainOutcome::Acquired { .. }),
            "{o:?}"
        );
        let r = backend
            .release(ReleaseRequest {
                key,
                token: &token,
                delay_after: None,
            })
            .await
            .unwrap();
        assert_eq!(r, lock_core::ReleaseOutcome::Released);
    }
}

/// Obtain and release through the client layer: `try_obtain()` (one attempt), or `obtain()`
/// with the default wait and a notified retry, which must cost the same on a free lock.
async fn client_cycles(locker: Locker, prefix: String, n: usize, waiting: bool) {
    let keys: Vec<String> = (0..64).map(|i| format!("{prefix}{i}")).collect();
    for i in 0..n {
        let builder = locker.lock(&keys[i % keys.len()]);
        let got = if waiting {
            builder.retry(Retry::default().notified()).obtain().await
        } else {
            builder.try_obtain().await
        };
        let guard = got.unwrap().obtained().expect("a free key");
        assert_eq!(
            guard.release().await.unwrap(),
            lock_core::ReleaseOutcome::Released
        );
    }
}

/// Cycles per second: `tasks` tasks on distinct keys, CYCLES cycles in all.
async fn rate<F, Fut>(tasks: usize, f: F) -> f64
where
    F: Fn(String, usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let prefix = format!("bench-{}-{t}-", Token::generate().unwrap().to_hex());
        handles.push(tokio::spawn(f(prefix, CYCLES / tasks)));
    }
    for h in handles {
        h.await.unwrap();
    }
    (CYCLES / tasks * tasks) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Release-to-acquired latencies with 8 waiters on one key.
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
            loop {
                if latencies.lock().unwrap().len() >= handoffs {
                    return;
                }
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
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

fn main() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = redis::Client::open(url.as_str()).unwrap();
        let raw = ConnectionManager::new(client.clone())
            .await
            .unwrap_or_else(|e| panic!("the bench needs Redis at {url} (set REDIS_URL): {e}"));
        let lua: Arc<dyn LockBackend> =
            Arc::new(RedisBackend::connect(&url).await.unwrap().with_prefix("bench:"));
        let watch: Arc<dyn LockBackend> = Arc::new(
            RedisBackend::builder(url.as_str())
                .variant(Variant::Watch)
                .prefix("bench:")
                .pool_size(TASKS)
                .connect()
                .await
                .unwrap(),
        );
        println!("redis_cycle: {CYCLES} cycles per measurement, median of {ROUNDS} rounds, interleaved");
        for tasks in [1, TASKS] {
            let (mut r, mut l, mut w) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let c = raw.clone();
                r.push(rate(tasks, move |p, n| raw_cycles(c.clone(), p, n)).await);
                let b = lua.clone();
                l.push(rate(tasks, move |p, n| lock_cycles(b.clone(), p, n)).await);
                let b = watch.clone();
                w.push(rate(tasks, move |p, n| lock_cycles(b.clone(), p, n)).await);
            }
            let (r, l, w) = (median(r), median(l), median(w));
            println!(
                "{tasks:>2} task(s): raw SET NX + CAD {r:>8.0}/s | lua {l:>8.0}/s (ratio {:.3}) | watch {w:>8.0}/s (ratio to lua {:.3})",
                l / r,
                w / l
            );
        }
        let locker = Locker::new(lua.clone());
        for tasks in [1, TASKS] {
            let (mut t, mut o) = (Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let l = locker.clone();
                t.push(rate(tasks, move |p, n| client_cycles(l.clone(), p, n, false)).await);
                let l = locker.clone();
                o.push(rate(tasks, move |p, n| client_cycles(l.clone(), p, n, true)).await);
            }
            let (t, o) = (median(t), median(o));
            println!(
                "{tasks:>2} task(s), lua through Locker: try_obtain {t:>8.0}/s | obtain() {o:>8.0}/s (ratio {:.3})",
                o / t
            );
        }
        for (name, backend) in [("lua", &lua), ("watch", &watch)] {
            let notified = handoff(backend.clone(), Retry::default(), 400).await;
            let polling = handoff(
                backend.clone(),
                Retry::exponential(Duration::from_millis(5), Duration::from_millis(250)),
                200,
            )
            .await;
            println!(
                "handoff {name:>5}, 8 waiters: pub/sub p50 {:.2} ms p99 {:.2} ms ({} handoffs) | polling 5-250 ms p50 {:.2} ms p99 {:.2} ms ({})",
                pct(&notified, 0.5),
                pct(&notified, 0.99),
                notified.len(),
                pct(&polling, 0.5),
                pct(&polling, 0.99),
                polling.len()
            );
        }
    });
}
