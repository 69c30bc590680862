//! Money moves between accounts, each transfer under the locks of both its accounts at once
//! (`Locker::lock_all`): four tellers move random amounts between random pairs, in whatever
//! order the pair comes, and never deadlock; the total never changes, because no account is
//! ever changed by two transfers at once.
//!
//! Run: `cargo run -p examples --example transfer` (memory backend), or with `LOCK_URL`
//! set to a file, Redis, Postgres or MariaDB URL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Locker, MemoryBackend, Retry};

const ACCOUNTS: usize = 5;
const TRANSFERS: usize = 40;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = match std::env::var("LOCK_URL") {
        Ok(url) => distlock::connect(&url).await?,
        Err(_) => Arc::new(MemoryBackend::new()),
    };
    let run = fastrand::u32(..);
    let locker = Locker::new(backend)
        .with_prefix(format!("transfer-{run}:"))
        .with_retry(
            Retry::exponential(Duration::from_millis(1), Duration::from_millis(20)).notified(),
        );
    // The "database": balances, read and written in two steps, as a real one would be
    // without its own transactions; only the locks keep two transfers of an account apart.
    let balances: Arc<Mutex<HashMap<usize, i64>>> =
        Arc::new(Mutex::new((0..ACCOUNTS).map(|a| (a, 100)).collect()));
    let mut tellers = Vec::new();
    for teller in 0..4 {
        let (locker, balances) = (locker.clone(), Arc::clone(&balances));
        tellers.push(tokio::spawn(async move {
            for _ in 0..TRANSFERS {
                let from = fastrand::usize(..ACCOUNTS);
                let to = (from + 1 + fastrand::usize(..ACCOUNTS - 1)) % ACCOUNTS;
                let amount = fastrand::i64(1..=20);
                let both = locker
                    .lock_all([format!("account:{from}"), format!("account:{to}")])
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(30))
                    .obtain()
                    .await?
                    .obtained()
                    .ok_or("both accounts stayed busy for 30 s")?;
                let read = |a: usize| balances.lock().expect("not poisoned")[&a];
                let (a, b) = (read(from), read(to));
                tokio::task::yield_now().await; // another teller would run here
                {
                    let mut all = balances.lock().expect("not poisoned");
                    all.insert(from, a - amount);
                    all.insert(to, b + amount);
                }
                both.release().await?;
            }
            println!("teller {teller}: {TRANSFERS} transfers done");
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tellers {
        t.await?.map_err(|e| e.to_string())?;
    }
    let all = balances.lock().expect("not poisoned");
    let total: i64 = all.values().sum();
    println!("balances: {all:?}, total {total}");
    if total != 100 * ACCOUNTS as i64 {
        return Err(format!("money appeared or vanished: the total is {total}").into());
    }
    Ok(())
}
