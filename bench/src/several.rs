//! The rows of `Locker::lock_all`: a set of keys taken at once, next to the same keys
//! taken one by one.

use std::time::{Duration, Instant};

use lock_core::{Locker, ReleaseOutcome};
use test_servers::bench::{rounds, run};

use crate::report::Table;
use crate::Size;

/// `Locker::lock_all` of 2, 8 and 32 keys (one task) next to the same keys taken one by
/// one with `try_obtain()` and released one by one, in the same rounds. The rates count
/// sets, not keys.
pub(crate) async fn several_keys(table: &mut Table, name: &str, locker: &Locker, size: Size) {
    for keys in [2, 8, 32] {
        let sets = (size.cycles / keys).max(16);
        let [one_by_one, together] = rounds(size.rounds, async || {
            let cycles = |together: bool| {
                let locker = locker.clone();
                run(1, sets, move |p, n| {
                    set_cycles(locker.clone(), p, n, keys, together)
                })
            };
            [cycles(false).await, cycles(true).await]
        })
        .await;
        table.cycles(
            name,
            &format!("lock_all of {keys} keys: try_obtain()+release"),
            1,
            "the same keys one by one: try_obtain()+release each",
            one_by_one,
            together,
        );
    }
}

/// `n` sets of `keys` keys under `prefix`: with `lock_all` when `together`, else one by
/// one. Returns each set's time.
async fn set_cycles(
    locker: Locker,
    prefix: String,
    n: usize,
    keys: usize,
    together: bool,
) -> Vec<Duration> {
    let names: Vec<String> = (0..keys).map(|k| format!("{prefix}set-{k}")).collect();
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        if together {
            let set = locker
                .lock_all(&names)
                .try_obtain()
                .await
                .expect("lock_all")
                .obtained()
                .expect("free keys");
            let released = set.release().await.expect("release");
            assert!(released.iter().all(|(_, r)| *r == ReleaseOutcome::Released));
        } else {
            let mut guards = Vec::with_capacity(keys);
            for key in &names {
                let guard = locker
                    .lock(key)
                    .try_obtain()
                    .await
                    .expect("obtain")
                    .obtained()
                    .expect("a free key");
                guards.push(guard);
            }
            for guard in guards.into_iter().rev() {
                let released = guard.release().await.expect("release");
                assert_eq!(released, ReleaseOutcome::Released);
            }
        }
        times.push(started.elapsed());
    }
    times
}
