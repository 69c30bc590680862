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

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Locker, Retry, Token};
use lock_redis::{RedisBackend, Variant};
use redis::aio::ConnectionManager;
use test_servers::bench::{backend_cycles, handoff, interleaved, locker_cycles, rate, runtime};

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

fn main() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into());
    runtime().block_on(async {
        let client = redis::Client::open(url.as_str()).unwrap();
        let raw = ConnectionManager::new(client.clone())
            .await
            .unwrap_or_else(|e| panic!("the bench needs Redis at {url} (set REDIS_URL): {e}"));
        let lua: Arc<dyn LockBackend> = Arc::new(
            RedisBackend::builder(url.as_str())
                .prefix("bench:")
                .connect()
                .await
                .unwrap(),
        );
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
            let [r, l, w] = interleaved(ROUNDS, async || {
                let c = raw.clone();
                let (lua, watch) = (lua.clone(), watch.clone());
                [
                    rate(tasks, CYCLES, move |p, n| raw_cycles(c.clone(), p, n)).await,
                    rate(tasks, CYCLES, move |p, n| backend_cycles(lua.clone(), p, n)).await,
                    rate(tasks, CYCLES, move |p, n| backend_cycles(watch.clone(), p, n)).await,
                ]
            })
            .await;
            println!(
                "{tasks:>2} task(s): raw SET NX + CAD {r:>8.0}/s | lua {l:>8.0}/s (ratio {:.3}) | watch {w:>8.0}/s (ratio to lua {:.3})",
                l / r,
                w / l
            );
        }
        let locker = Locker::new(lua.clone());
        for tasks in [1, TASKS] {
            let [t, o] = interleaved(ROUNDS, async || {
                let (a, b) = (locker.clone(), locker.clone());
                [
                    rate(tasks, CYCLES, move |p, n| locker_cycles(a.clone(), p, n, false)).await,
                    rate(tasks, CYCLES, move |p, n| locker_cycles(b.clone(), p, n, true)).await,
                ]
            })
            .await;
            println!(
                "{tasks:>2} task(s), lua through Locker: try_obtain {t:>8.0}/s | obtain() {o:>8.0}/s (ratio {:.3})",
                o / t
            );
        }
        for (name, backend) in [("lua", &lua), ("watch", &watch)] {
            let notified = handoff(backend.clone(), Retry::default(), 8, 400).await;
            let polling = handoff(
                backend.clone(),
                Retry::exponential(Duration::from_millis(5), Duration::from_millis(250)),
                8,
                200,
            )
            .await;
            println!("handoff {name:>5}, 8 waiters: pub/sub {notified} | polling 5-250 ms {polling}");
        }
    });
}
