//! What waiting for a replica costs: obtain + release cycles on a private Sentinel set (a
//! primary and one replica on loopback), without and with `replica_acks(1, 500ms)`, both
//! variants, interleaved, median of 5 rounds; printed as µs per cycle and the ratio.
//!
//! `cargo bench -p lock-redis --bench replica_acks`

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Locker};
use lock_redis::{RedisBackend, Variant};
use test_servers::bench::{locker_cycles, rounds, run, runtime};

const CYCLES: usize = 2_000;
const ROUNDS: usize = 5;

fn main() {
    let set = test_servers::sentinel::RedisSentinel::start();
    runtime().block_on(async {
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
            let [p, a] = rounds(ROUNDS, async || {
                let (p, a) = (plain.clone(), acked.clone());
                [
                    run(1, CYCLES, move |k, n| locker_cycles(p.clone(), k, n, false)).await,
                    run(1, CYCLES, move |k, n| locker_cycles(a.clone(), k, n, false)).await,
                ]
            })
            .await;
            let (p, a) = (1e6 / p.rate, 1e6 / a.rate);
            println!(
                "{variant:?}: without {p:.0} µs/cycle, with WAIT 1 {a:.0} µs/cycle: {:.2}x the time",
                a / p
            );
        }
    });
}
