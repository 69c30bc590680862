//! A whole backend from a storage: `VersionedStore` keeps one record per key with a version
//! number and writes only if the version is still the one it read, as a key-value store with
//! conditional writes does (DynamoDB's condition expressions, etcd's `mod_revision`, a SQL
//! `UPDATE … WHERE version = ?`). It implements `Storage` and nothing else; the adapter
//! (`distlock::backend::storage`) decides every operation with the contract's rules, runs
//! the step again when a write lost to another, and makes it a `LockBackend`. The suite
//! checks that it keeps the whole contract: mutexes, semaphores, read-write locks, and again
//! with every lock a semaphore of one permit.
//!
//! ```text
//! cargo run -p examples --example storage_backend     # a few locks, printed
//! cargo test -p examples --example storage_backend    # the whole suite, as tests
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use distlock::backend::codec::AsIs;
use distlock::backend::rules::{self, Clock, Record};
use distlock::backend::storage::{Change, Commit, Decide, Snapshot, Storage};
use distlock::backend::{Capabilities, ReleaseSubscription, Token, Waiters};
use distlock::{HolderInfo, Key, LockBackend, Locker, Operation, Result};

type Stored = Record<Token, HolderInfo>;

/// The "server": versioned records, and a fencing counter that outlives them.
#[derive(Debug, Default)]
struct Server {
    records: HashMap<String, (u64, Stored)>,
    fencing: u64,
}

/// One client of the server, under a key prefix of its own.
#[derive(Debug, Clone)]
struct VersionedStore {
    server: Arc<Mutex<Server>>,
    waiters: Waiters,
    started: Instant,
    prefix: String,
}

impl VersionedStore {
    fn new(server: Arc<Mutex<Server>>, prefix: &str) -> Self {
        VersionedStore {
            server,
            waiters: Waiters::default(),
            started: Instant::now(),
            prefix: prefix.to_owned(),
        }
    }

    fn server(&self) -> std::sync::MutexGuard<'_, Server> {
        self.server.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Storage for VersionedStore {
    type Codec = AsIs;
    const NAME: &'static str = "versioned";

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none().shared(true).release_notification(true)
    }

    /// Read (record, version), decide with nothing locked, then write only if the version
    /// is unchanged: another writer in between makes it a conflict, and the adapter runs
    /// the step again on a fresh read.
    async fn transact(
        &self,
        key: &Key,
        _: Operation,
        decide: &mut Decide<'_, Token, HolderInfo>,
    ) -> Result<Commit> {
        let name = format!("{}{}", self.prefix, key.as_str());
        let (version, record, fencing) = {
            let server = self.server();
            let (version, record) = server.records.get(&name).cloned().unzip();
            (version.unwrap_or(0), record, server.fencing)
        };
        // A network round trip would be here: let other calls run in between.
        tokio::task::yield_now().await;
        let now = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let Change { write, wake } = decide(Snapshot {
            record: record.as_ref(),
            clock: Clock::nanos(now),
            fencing_floor: rules::wall_clock_floor(fencing + 1),
        })?;
        let Some(write) = write else {
            return Ok(Commit::Done);
        };
        let mut server = self.server();
        if server.records.get(&name).map_or(0, |(v, _)| *v) != version {
            return Ok(Commit::Conflict);
        }
        server.fencing = server.fencing.max(write.fencing);
        server.records.insert(name, (version + 1, write));
        drop(server);
        self.waiters.wake(key.as_str(), wake);
        Ok(Commit::Done)
    }

    async fn subscribe_releases(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        Ok(Some(self.waiters.subscribe(key.as_str())))
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let store = VersionedStore::new(Arc::default(), "demo:");
    let backend: Arc<dyn LockBackend> = Arc::new(store);
    let locker = Locker::new(backend);
    let guard = locker.lock("report").try_obtain().await?.obtained();
    let guard = guard.expect("a fresh store has every key free");
    println!("obtained `report` with fencing token {}", guard.fencing());
    let again = locker.lock("report").try_obtain().await?;
    println!("a second obtain meanwhile: busy = {}", again.is_busy());
    let released = guard.release().await?;
    println!("{released:?}; `cargo test -p examples --example storage_backend` runs the suite");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::conformance::{async_trait, Harness};

    /// One server per suite; every backend a client under a prefix of its own.
    struct Versioned(Arc<Mutex<Server>>);

    #[async_trait]
    impl Harness for Versioned {
        async fn backend(&self) -> Arc<dyn LockBackend> {
            let prefix = format!("{}:", Token::generate().unwrap().to_hex());
            Arc::new(VersionedStore::new(self.0.clone(), &prefix))
        }

        /// A restart without persistence: every record gone, the counter kept.
        async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
            self.0.lock().unwrap().records.clear();
            true
        }
    }

    distlock::conformance::suite!("versioned", Versioned(Arc::default()));

    /// The same suite with every lock a semaphore of one permit: the shared holds' path
    /// of the rules on the same store.
    mod as_semaphore {
        use super::*;
        use distlock::conformance::AsSemaphore;

        distlock::conformance::suite!("versioned", AsSemaphore(Versioned(Arc::default())));
    }
}
