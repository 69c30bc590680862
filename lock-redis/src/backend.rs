//! `RedisBackend`: the contract on Redis, in either variant. Each variant is a backend of
//! its own on lock-core's kits: the Lua variant's script decides every request on the
//! server (`scripted.rs`), the WATCH variant is a storage of the adapter (`watch.rs`). This
//! type is what the builder hands out: it forwards every call to the variant it was built
//! with, and adds what an operator asks of Redis (a key's record name and slot).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{
    Capabilities, Grace, KeyPage, KeysRequest, ObtainRequest, ProlongRequest, ReleaseRequest,
    ReleaseSubscription,
};
use lock_core::{
    Key, LockBackend, LockState, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome, Result,
};
use redis::aio::ConnectionManager;

use crate::conn::link::{Link, LinkKind};
use crate::conn::primary::Primary;
use crate::keys::slot;
use crate::lua::{self, Lua};
use crate::notify::Notifier;
use crate::scripted::Scripted;
use crate::variant::{Setup, Variant, VariantBackend};
use crate::watch::{Watch, WatchStore};

/// What the builder connected: the engine of one variant.
pub(crate) enum Engine {
    Lua(Lua),
    Watch(Box<Watch>),
}

/// Locks on a Redis server, a Redis Cluster or a Sentinel-managed primary.
///
/// Built with [`RedisBackend::builder`] (every setting), [`RedisBackend::connect`] (Lua
/// variant) or [`RedisBackend::connect_with`] from a `redis://`, `rediss://` (TLS),
/// `redis+cluster://` or `redis+sentinel://` URL; the password and ACL user come from the
/// URL and never show in `Debug` or errors. On one server the Lua variant talks through a
/// [`ConnectionManager`] that reconnects in the background after a dropped connection; the
/// WATCH variant through a pool of dedicated connections ([`RedisBuilder::pool_size`](crate::RedisBuilder::pool_size),
/// default 16) because `WATCH` state belongs to a connection. Waiters are woken by a pub/sub message on release, over one
/// subscription connection per backend, opened on the first wait.
///
/// Clones share connections.
#[derive(Clone)]
pub struct RedisBackend {
    variant: Arc<dyn VariantBackend>,
}

impl RedisBackend {
    /// The Lua variant's name in errors and reports.
    pub const LUA_NAME: &'static str = "redis-lua";
    /// The WATCH/MULTI variant's name in errors and reports.
    pub const WATCH_NAME: &'static str = "redis-watch";
    /// The most locks one pipeline of the watchdog's renewals carries (the Lua variant):
    /// each pipeline is one call, with one deadline, so a batch of 10,000 locks goes as ten
    /// pipelines of about 25 ms of server time each rather than one that no short
    /// deadline could wait for.
    pub const BATCH: usize = 1_000;
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "lock:";
    /// The default number of dedicated connections of the WATCH variant (per primary on a
    /// cluster).
    pub const DEFAULT_POOL_SIZE: usize = 16;
    /// The default deadline of one call: see [`RedisBuilder::timeout`](crate::RedisBuilder::timeout).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    /// The deadline of [`RedisBuilder::connect`](crate::RedisBuilder::connect): finding the servers (asking the sentinels,
    /// reading a cluster's slots), two connection attempts and the first command.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

    /// The Lua variant over an existing connection manager to one server; `client` opens
    /// the pub/sub connection for release notifications.
    pub fn from_manager(client: redis::Client, conn: ConnectionManager) -> Self {
        let node = client.get_connection_info().addr().to_string();
        let link = Link {
            kind: LinkKind::Server { conn, node },
            acks: None,
        };
        let notifier = Notifier::new(Arc::new(Primary::Fixed(client)), lua::NAME);
        Self::build(
            Engine::Lua(Lua::new(link)),
            notifier,
            Self::DEFAULT_PREFIX,
            None,
            Self::DEFAULT_TIMEOUT,
        )
    }

    /// A backend that runs `engine`, with the builder's settings.
    pub(crate) fn build(
        engine: Engine,
        notifier: Notifier,
        prefix: &str,
        grace: Option<Grace>,
        timeout: Duration,
    ) -> Self {
        let setup = Setup {
            prefix: prefix.into(),
            grace,
            timeout,
            notifier,
        };
        let variant: Arc<dyn VariantBackend> = match engine {
            Engine::Lua(lua) => Arc::new(Scripted { lua, setup }),
            Engine::Watch(watch) => Arc::new(WatchStore { watch, setup }),
        };
        RedisBackend { variant }
    }

    /// The Redis key that holds `key`'s record, for operators (`redis-cli GET` it; the
    /// format is in the crate docs).
    pub fn record_name(&self, key: &Key) -> String {
        self.variant.setup().keys(key).record
    }

    /// The Redis Cluster hash slot of `key`'s record (and of its release channel): on a
    /// cluster, which shard holds the lock.
    pub fn slot(&self, key: &Key) -> u16 {
        slot(&self.variant.setup().keys(key).record)
    }

    /// Which variant this backend runs.
    pub fn variant(&self) -> Variant {
        self.variant.variant()
    }

    /// The server-side ids (`CLIENT ID`) of the backend's command connections, each with
    /// the `host:port` of the node that knows it (ids are per node): the Lua variant's
    /// connection (one per node on a cluster), or the WATCH variant's idle pooled ones, for
    /// the fault tests that `CLIENT KILL` them. Not part of the public API.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] when the server cannot be reached.
    #[doc(hidden)]
    pub async fn client_ids(&self) -> Result<Vec<(String, i64)>> {
        let setup = self.variant.setup();
        tokio::time::timeout(setup.timeout, self.variant.client_ids())
            .await
            .unwrap_or_else(|_| Err(setup.deadline_error(self.name(), Operation::Inspect)))
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let setup = self.variant.setup();
        f.debug_struct("RedisBackend")
            .field("variant", &self.variant())
            .field("prefix", &setup.prefix)
            .field("grace", &setup.grace)
            .finish_non_exhaustive()
    }
}

/// Every call goes to the variant's backend.
#[async_trait]
impl LockBackend for RedisBackend {
    fn name(&self) -> &'static str {
        self.variant.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.variant.capabilities()
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        self.variant.obtain(req).await
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        self.variant.prolongate(req).await
    }

    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        self.variant.prolongate_many(reqs).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        self.variant.release(req).await
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        self.variant.inspect(key).await
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        self.variant.force_release(key).await
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.variant.subscribe(key).await
    }

    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        self.variant.list_keys(req).await
    }
}
