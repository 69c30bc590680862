//! The in-memory backend: the reference implementation and the unit-test double.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::codec::AsIs;
use crate::backend::listing::Smallest;
use crate::backend::storage::{Change, Commit, Decide, Snapshot, Storage};
use crate::backend::{KeyPage, KeysRequest, Listing};
use crate::rules::{self, Clock};
use crate::UrlOptions;
use crate::{
    Capabilities, Grace, HolderInfo, Key, Operation, ReleaseSubscription, Result, Token, Ttl,
    Waiters,
};

/// Locks in this process's memory: every rule of the contract, no I/O.
///
/// Use it in unit tests of code that takes an `Arc<dyn LockBackend>`, and as the reference
/// the other backends are compared with. Clones share one store; [`MemoryBackend::namespaced`]
/// gives a view of the same store under another key prefix, the way two applications share
/// one Redis.
///
/// Time is [`tokio::time::Instant`], so under `tokio::time::pause()` expiry, cooldowns and
/// watchdogs run deterministically and instantly.
///
/// ```
/// use std::sync::Arc;
/// use lock_core::{LockBackend, Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
/// let locker = Locker::new(backend);
/// let guard = locker.lock("job").try_obtain().await?.obtained().expect("free");
/// assert!(locker.lock("job").try_obtain().await?.is_busy());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    store: Arc<Mutex<Store>>,
    /// The store's prefix of this view's keys: the namespace's length, `:`, the namespace
    /// (so that `app` + `x:y` and `appx:` + `y` never meet).
    prefix: Arc<str>,
    grace: Option<Grace>,
}

#[derive(Debug)]
struct Store {
    /// Records of held and cooling keys; a free record is removed (fencing lives on in
    /// `fencing`).
    records: HashMap<String, Stored>,
    // One counter for all keys: strictly increasing per key, and it survives record removal.
    fencing: u64,
    /// Woken one per release, as the server backends' notifiers do.
    waiters: Waiters,
    sweep_at: usize,
    /// The origin of the rules' nanosecond clock.
    epoch: Instant,
}

type Stored = rules::Record<Token, HolderInfo>;

impl Default for Store {
    fn default() -> Self {
        Store {
            records: HashMap::new(),
            fencing: 0,
            waiters: Waiters::default(),
            sweep_at: 0,
            epoch: Instant::now(),
        }
    }
}

impl MemoryBackend {
    /// The backend's name in errors and reports.
    pub const NAME: &'static str = "memory";

    /// An empty store, default grace (each lock's own ttl).
    pub fn new() -> Self {
        MemoryBackend {
            store: Arc::default(),
            prefix: Arc::from("0:"),
            grace: None,
        }
    }

    /// A fresh store from a `memory:` URL; the one option is `grace=` (e.g.
    /// `memory:?grace=1m`).
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) for another scheme, an unknown option
    /// or a malformed grace; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
    /// a grace over 365 days.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut url = UrlOptions::parse(Self::NAME, url);
        if url.scheme() != "memory" {
            return Err(crate::Error::new(
                crate::ErrorKind::Config,
                Self::NAME,
                crate::Operation::Connect,
                "not a memory URL: expected memory:",
            ));
        }
        let grace = url.take_duration("grace")?;
        url.finish()?;
        let backend = Self::new();
        match grace {
            Some(g) => backend.with_grace(g),
            None => Ok(backend),
        }
    }

    /// The same store seen under another key prefix: keys of different namespaces never
    /// meet.
    pub fn namespaced(&self, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        MemoryBackend {
            prefix: Arc::from(format!("{}:{namespace}", namespace.len())),
            ..self.clone()
        }
    }

    /// Keeps expired records for `grace` instead of each lock's ttl, for late detection.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) over 365 days, before any
    /// I/O.
    pub fn with_grace(mut self, grace: Duration) -> Result<Self> {
        self.grace = Some(Grace::new(grace)?);
        Ok(self)
    }

    /// How many records the store keeps (every namespace of it), once it dropped those past
    /// their grace period or cooldown, as its sweep does. A released key keeps none.
    pub fn records(&self) -> usize {
        let mut store = self.lock_store();
        let clock = store.clock();
        store
            .records
            .retain(|_, record| !rules::forgotten(record, clock));
        store.records.len()
    }

    /// Forgets every record of every namespace (fencing continues upwards): what a server
    /// restart without persistence does to a real backend.
    pub fn simulate_data_loss(&self) {
        self.lock_store().records.clear();
    }

    fn lock_store(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the mutex cannot leave a record half-written (every mutation
        // is a single assignment), so a poisoned store is still consistent.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store's name of `key`: this view's prefix, then the key.
    fn full_key(&self, key: &Key) -> String {
        let mut full = String::with_capacity(self.prefix.len() + key.as_str().len());
        full.push_str(&self.prefix);
        full.push_str(key.as_str());
        full
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// The rules' clock: nanoseconds of tokio's clock since the store was made, exact under
    /// `tokio::time::pause`.
    fn clock(&self) -> Clock {
        let since = Instant::now().saturating_duration_since(self.epoch);
        Clock::nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Stores what a decision wrote (a free record is dropped: the counter keeps fencing
    /// growing) and wakes the key's waiters the decision names. The wake comes first only
    /// so that the key can move into the map: a woken waiter takes the store's mutex, so it
    /// sees the write either way.
    fn apply(&mut self, key: String, decision: Change<Token, HolderInfo>) {
        self.waiters.wake(&key, decision.wake);
        match decision.write {
            Some(record) if record.state == rules::State::Free && record.writer.is_none() => {
                self.records.remove(&key);
            }
            Some(record) => {
                self.fencing = self.fencing.max(record.fencing);
                match self.records.get_mut(&key) {
                    Some(stored) => *stored = record,
                    None => {
                        self.records.insert(key, record);
                    }
                }
            }
            None => {}
        }
    }

    /// Drops records past their grace period or cooldown, amortized over inserts so the map
    /// stays proportional to the live keys.
    fn sweep(&mut self, clock: Clock) {
        if self.records.len() < self.sweep_at {
            return;
        }
        self.records
            .retain(|_, record| !rules::forgotten(record, clock));
        self.sweep_at = (self.records.len() * 2).max(1024);
    }
}

impl Storage for MemoryBackend {
    type Codec = AsIs;
    const NAME: &'static str = MemoryBackend::NAME;

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .release_notification(true)
            .shared(true)
            .listing(Listing::InKeyOrder)
    }

    /// Walks the map under its mutex, keeping the page's smallest keys: O(records) per page
    /// in time, O(limit) in memory.
    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        let mut page = Smallest::new(&req);
        let store = self.lock_store();
        let clock = store.clock();
        for (name, record) in &store.records {
            if let Some(key) = name.strip_prefix(&*self.prefix) {
                if !rules::forgotten(record, clock) {
                    page.offer(key);
                }
            }
        }
        Ok(page.finish())
    }

    fn grace(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(self.grace, ttl)
    }

    /// The step under the store's mutex, on tokio's clock, above the store's fencing
    /// counter.
    async fn transact(
        &self,
        key: &Key,
        op: Operation,
        decide: &mut Decide<'_, Token, HolderInfo>,
    ) -> Result<Commit> {
        let key = self.full_key(key);
        let mut store = self.lock_store();
        let clock = store.clock();
        if op == Operation::Obtain {
            store.sweep(clock);
        }
        let change = decide(Snapshot {
            record: store.records.get(&key),
            clock,
            fencing_floor: rules::wall_clock_floor(store.fencing + 1),
        })?;
        store.apply(key, change);
        Ok(Commit::Done)
    }

    async fn subscribe_releases(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        let key = self.full_key(key);
        let waiters = self.lock_store().waiters.clone();
        Ok(Some(waiters.subscribe(&key)))
    }
}

#[cfg(test)]
mod tests;
