//! The same program on a file lock in development and on Redis (or Postgres, MariaDB, etcd) in production,
//! chosen by configuration, not by code.
//!
//! ```text
//! cargo run -p examples --example dev_prod_swap                                  # file lock
//! LOCK_URL=redis://127.0.0.1:6379/0 cargo run -p examples --example dev_prod_swap
//! LOCK_URL=postgres://postgres@127.0.0.1/postgres cargo run -p examples --example dev_prod_swap
//! LOCK_URL=mysql://root@127.0.0.1:3306/test cargo run -p examples --example dev_prod_swap
//! LOCK_URL=etcd://127.0.0.1:2379/my-app cargo run -p examples --example dev_prod_swap
//! ```
//!
//! Everything about the lock comes from `LOCK_*` variables (`LOCK_URL`, `LOCK_TTL`,
//! `LOCK_WAIT`, `LOCK_PREFIX`, `LOCK_GRACE`, `LOCK_RETRY`); without `LOCK_URL` it uses a
//! directory under the temporary directory.

use std::time::Duration;

use distlock::Attempt;
use distlock::LockConfig;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = match LockConfig::from_env() {
        Ok(config) => config,
        Err(_) => {
            let dir = std::env::temp_dir().join("distlock-examples");
            LockConfig::from_url(format!("file://{}", dir.display())).ttl("10s")
        }
    };
    // The only line that knows about configuration; the rest is the same everywhere.
    let locker = config.locker().await?;
    println!("locking through the {} backend", locker.backend().name());

    match locker
        .lock("invoice-batch")
        .wait(Duration::from_secs(5))
        .watchdog()
        .obtain()
        .await?
    {
        Attempt::Obtained(guard) => {
            println!("obtained invoice-batch, fencing token {}", guard.fencing());
            // The work, passing the fencing token to whatever it writes.
            tokio::time::sleep(Duration::from_millis(200)).await;
            println!("released: {:?}", guard.release().await?);
        }
        Attempt::Busy(busy) => println!("someone else runs the batch: {busy}"),
    }
    Ok(())
}
