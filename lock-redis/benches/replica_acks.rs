//! What waiting for a replica costs: obtain + release cycles on a private Sentinel set (a
//! primary and one replica on loopback), without and with `replica_acks(1, 500ms)`, both
//! variants, interleaved, median of 5 rounds; printed as µs per cycle and the ratio.
//!
//! `cargo bench -p lock-redis --bench replica_acks`

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockBackend, Locker};
use lock_redis::{RedisBackend, Variant};

const CYCLES: u32 = 2_000;
const ROUNDS: usize = 5;

async fn cycle_us(locker: &Locker) -> f64 {
    let start = Instant::now();
    for _ in 0..CYCLES {
        let g = locker
            .lock("bench")
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap();
        let _ = g.release().await.unwrap();
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(CYCLES)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let set = test_servers::sentinel::RedisSentinel::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("replica_acks: {CYCLES} obtain+release cycles, median of {ROUNDS} rounds");
        for variant in [Variant::Lua, Variant::Watch] {
            let make = |acks: bool| {
                let mut b = RedisBackend::builder(set.url.as_str())
                    .variant(variant)
                    .prefix(format!("bench-{acks}:"));
                if acks {
                    b = b.replica_acks(1, Duration::from_millis(500));
                }
                b.connect()
            };
            let plain: Arc<dyn LockBackend> = Arc::new(make(false).await.unwrap());
            let acked: Arc<dyn LockBackend> = Arc::new(make(true).await.unwrap());
            let (plain, acked) = (Locker::new(plain), Locker::new(acked));
            let (mut p, mut a) = (Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                p.push(cycle_us(&plain).await);
                a.push(cycle_us(&acked).await);
            }
            let (p, a) = (median(p), median(a));
            println!(
                "{variant:?}: without {p:.0} µs/cycle, with WAIT 1 {a:.0} µs/cycle: {:.2}x the time",
                a / p
            );
        }
    });
}
