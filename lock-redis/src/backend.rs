//! `RedisBackend`: the contract on Redis, in either variant.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use lock_core::backend::{prolongate_each, storage};
use lock_core::backend::{
    Capabilities, Grace, KeyPage, KeysRequest, Listing, ObtainRequest, ProlongRequest,
    ReleaseRequest, ReleaseSubscription,
};
use lock_core::{
    Error, ErrorKind, Key, LockBackend, LockState, ObtainOutcome, Operation, ProlongOutcome,
    ReleaseOutcome, Result, Ttl,
};
use redis::aio::ConnectionManager;
use tracing::Instrument;

use crate::conn::link::{Link, LinkKind};
use crate::conn::primary::Primary;
use crate::error::protocol;
use crate::keys::{slot, LockKeys};
use crate::lua::{self, Lua};
use crate::notify::Notifier;
use crate::request::{Reply, Request};
use crate::watch;

use crate::watch::{OnWatch, Watch};

/// What a backend runs operations with.
pub(crate) enum Engine {
    Lua(Lua),
    Watch(Box<Watch>),
}

/// Which of the two implementations of the contract a [`RedisBackend`] runs.
///
/// Both keep the same records under the same names, so backends of either variant on one
/// server exclude each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Variant {
    /// Each operation is one `EVALSHA` of one Lua script: one round trip. The default.
    #[default]
    Lua,
    /// Optimistic transactions (`WATCH`, read, decide, `MULTI`/`EXEC`) on dedicated
    /// connections, for servers where scripting is disabled: two round trips per operation
    /// that writes, one for one that does not.
    Watch,
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
    inner: Arc<Inner>,
    prefix: Arc<str>,
    grace: Option<Grace>,
    timeout: Duration,
}

struct Inner {
    engine: Engine,
    notifier: Notifier,
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
        RedisBackend {
            inner: Arc::new(Inner { engine, notifier }),
            prefix: prefix.into(),
            grace,
            timeout,
        }
    }

    /// The Redis key that holds `key`'s record, for operators (`redis-cli GET` it; the
    /// format is in the crate docs).
    pub fn record_name(&self, key: &Key) -> String {
        LockKeys::new(&self.prefix, key).record
    }

    /// The Redis Cluster hash slot of `key`'s record (and of its release channel): on a
    /// cluster, which shard holds the lock.
    pub fn slot(&self, key: &Key) -> u16 {
        slot(&LockKeys::new(&self.prefix, key).record)
    }

    /// Which variant this backend runs.
    pub fn variant(&self) -> Variant {
        match self.inner.engine {
            Engine::Lua(_) => Variant::Lua,
            Engine::Watch(_) => Variant::Watch,
        }
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
        let ids = async {
            match &self.inner.engine {
                Engine::Lua(l) => l.link.client_ids(self.name()).await,
                Engine::Watch(w) => Ok(w.idle_ids()),
            }
        };
        tokio::time::timeout(self.timeout, ids)
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Unavailable,
                    self.name(),
                    Operation::Inspect,
                    format!("no answer within the deadline of {:?}", self.timeout),
                ))
            })
    }

    fn grace_for(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(self.grace, ttl)
    }

    /// The Lua variant's call: the script, by the backend's deadline.
    async fn run(&self, key: &Key, req: Request<'_>) -> Result<Reply> {
        let keys = LockKeys::new(&self.prefix, key);
        let op = req.operation();
        match &self.inner.engine {
            Engine::Lua(l) => self.bounded(op, key, l.run(&keys, &req)).await,
            Engine::Watch(_) => Err(protocol(
                self.name(),
                op,
                "a script call on the WATCH variant",
            )),
        }
    }

    /// The WATCH variant as a storage for this backend's prefix and grace (`None` for the
    /// Lua variant): lock-core's adapter decides, `watch.rs` reads and writes.
    ///
    /// Its calls are boxed: the adapter's future inside this backend's is deep enough to
    /// overflow the compiler's layout depth with some feature sets (distlock's
    /// `--all-features`), and a WATCH call is two network round trips, next to which one
    /// allocation is nothing.
    fn on_watch(&self) -> Option<OnWatch<'_>> {
        match &self.inner.engine {
            Engine::Watch(watch) => Some(OnWatch {
                watch,
                prefix: &self.prefix,
                grace: self.grace,
                timeout: self.timeout,
            }),
            Engine::Lua(_) => None,
        }
    }

    /// `call` by the backend's deadline, in a span. A call cut off here drops its connection
    /// rather than return it.
    ///
    /// A combinator rather than an `async fn`: an `async fn` keeps its argument `call` and
    /// the deadline's future wrapping it side by side, twice the size to carry and copy on
    /// every call.
    fn bounded<'a, T: 'a>(
        &'a self,
        op: Operation,
        key: &Key,
        call: impl std::future::Future<Output = Result<T>> + 'a,
    ) -> impl std::future::Future<Output = Result<T>> + 'a {
        let span = tracing::debug_span!("redis_lock", op = ?op, key = key.as_str());
        tokio::time::timeout(self.timeout, call.instrument(span)).map(move |answer| {
            answer.unwrap_or_else(|_| {
                match &self.inner.engine {
                    Engine::Lua(l) => l.link.timed_out(),
                    Engine::Watch(w) => w.timed_out(),
                }
                Err(self.deadline_error(op))
            })
        })
    }

    fn deadline_error(&self, op: Operation) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            self.name(),
            op,
            format!(
                "no answer within the deadline of {:?} (RedisBuilder::timeout / timeout=); it is \
                 safe to retry",
                self.timeout
            ),
        )
    }

    fn mismatch(&self, op: Operation, reply: &Reply) -> Error {
        protocol(self.name(), op, format!("{reply:?}"))
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("variant", &self.variant())
            .field("prefix", &self.prefix)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl LockBackend for RedisBackend {
    fn name(&self) -> &'static str {
        match self.inner.engine {
            Engine::Lua(_) => lua::NAME,
            Engine::Watch(_) => watch::NAME,
        }
    }

    fn capabilities(&self) -> Capabilities {
        // One pipeline carries a batch of prolongs on one server (see prolongate_many); on a
        // cluster, and with WATCH, each lock is its own call.
        let batch = match &self.inner.engine {
            Engine::Lua(lua) if !lua.link.is_cluster() => Self::BATCH,
            _ => 1,
        };
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .release_notification(true)
            .prolong_batch(batch)
            .shared(true)
            .listing(Listing::Scan)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        if let Some(watch) = self.on_watch() {
            let call = Box::pin(storage::obtain(&watch, req));
            return self.bounded(Operation::Obtain, req.key, call).await;
        }
        // The script trusts its arguments: a bad mode is refused here.
        req.mode.check(self.name())?;
        let holder_json = serde_json::to_string(req.holder).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                self.name(),
                Operation::Obtain,
                format!("holder info does not serialize: {e}"),
            )
        })?;
        let request = Request::Obtain {
            token: req.token,
            ttl: req.ttl,
            grace: self.grace_for(req.ttl),
            holder_json: &holder_json,
            mode: req.mode,
            queue: req.queue,
            change: req.change.map(|f| f.0),
        };
        match self.run(req.key, request).await? {
            Reply::Obtain(o) => Ok(o),
            other => Err(self.mismatch(Operation::Obtain, &other)),
        }
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        if let Some(watch) = self.on_watch() {
            let call = Box::pin(storage::prolongate(&watch, req));
            return self.bounded(Operation::Prolongate, req.key, call).await;
        }
        let request = Request::Prolong {
            token: req.token,
            ttl: req.ttl,
            grace: self.grace_for(req.ttl),
        };
        match self.run(req.key, request).await? {
            Reply::Prolong(o) => Ok(o),
            other => Err(self.mismatch(Operation::Prolongate, &other)),
        }
    }

    /// The Lua variant sends the locks in pipelines of up to [`RedisBackend::BATCH`], each
    /// one round trip within the backend's deadline (see `Lua::prolong_many`); the WATCH
    /// variant and a cluster prolong each lock on its own, all in flight together.
    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        let lua = match &self.inner.engine {
            Engine::Lua(lua) if !lua.link.is_cluster() => lua,
            _ => return prolongate_each(self, reqs).await,
        };
        let mut answers = Vec::with_capacity(reqs.len());
        for chunk in reqs.chunks(Self::BATCH) {
            let batch: Vec<_> = chunk
                .iter()
                .map(|req| {
                    let request = Request::Prolong {
                        token: req.token,
                        ttl: req.ttl,
                        grace: self.grace_for(req.ttl),
                    };
                    (LockKeys::new(&self.prefix, req.key), request)
                })
                .collect();
            let span = tracing::debug_span!("redis_lock", op = "prolong_many", locks = chunk.len());
            let sent =
                tokio::time::timeout(self.timeout, lua.prolong_many(&batch).instrument(span));
            match sent.await {
                Ok(Ok(each)) => answers.extend(each),
                Ok(Err(e)) => answers.extend(std::iter::repeat_n(Err(e), chunk.len())),
                Err(_) => {
                    lua.link.timed_out();
                    let e = self.deadline_error(Operation::Prolongate);
                    answers.extend(std::iter::repeat_n(Err(e), chunk.len()));
                }
            }
        }
        answers
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        if let Some(watch) = self.on_watch() {
            let call = Box::pin(storage::release(&watch, req));
            return self.bounded(Operation::Release, req.key, call).await;
        }
        let request = Request::Release {
            token: req.token,
            delay: req.delay_after,
        };
        match self.run(req.key, request).await? {
            Reply::Release(o) => Ok(o),
            other => Err(self.mismatch(Operation::Release, &other)),
        }
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        if let Some(watch) = self.on_watch() {
            let call = Box::pin(storage::inspect(&watch, key));
            return self.bounded(Operation::Inspect, key, call).await;
        }
        match self.run(key, Request::Inspect).await? {
            Reply::State(s) => Ok(s),
            other => Err(self.mismatch(Operation::Inspect, &other)),
        }
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        if let Some(watch) = self.on_watch() {
            let call = Box::pin(storage::force_release(&watch, key));
            return self.bounded(Operation::ForceRelease, key, call).await;
        }
        match self.run(key, Request::Force).await? {
            Reply::State(s) => Ok(s),
            other => Err(self.mismatch(Operation::ForceRelease, &other)),
        }
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        let keys = LockKeys::new(&self.prefix, key);
        self.inner
            .notifier
            .subscribe(&keys.channel, self.timeout)
            .await
            .map(Some)
    }

    /// `SCAN` of the record names (`list.rs`), by the backend's deadline.
    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        req.validate()?;
        let span = tracing::debug_span!("redis_lock", op = "list", prefix = req.prefix);
        let via = match &self.inner.engine {
            Engine::Lua(l) => crate::list::Via::Link(&l.link),
            Engine::Watch(w) => crate::list::Via::Pools(&w.pools),
        };
        let call = crate::list::keys(via, &self.prefix, req, self.name());
        match tokio::time::timeout(self.timeout, call.instrument(span)).await {
            Ok(page) => page,
            Err(_) => {
                match &self.inner.engine {
                    Engine::Lua(l) => l.link.timed_out(),
                    Engine::Watch(w) => w.timed_out(),
                }
                Err(self.deadline_error(Operation::List))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script call's future is what every layer above it (the deadline, the span, the
    /// trait's box, the client's call) carries and copies on every call. It was 7.6 KB
    /// while the cluster's and the sentinels' calls were unboxed and the deadline's wrapper
    /// an `async fn` that kept its argument beside its own future, and that copying was 6 %
    /// of the client's CPU in a 64-task cycle; now it is about 1.1 KB.
    #[tokio::test]
    async fn a_script_call_on_one_server_stays_small() {
        let url = test_servers::servers::redis::shared_url();
        let backend = RedisBackend::connect(&url)
            .await
            .expect("the shared Redis server");
        let key = Key::new("size").expect("a key");
        let token = lock_core::backend::Token::generate().expect("a token");
        let call = backend.run(
            &key,
            Request::Release {
                token: &token,
                delay: None,
            },
        );
        let size = std::mem::size_of_val(&call);
        assert!(size <= 2048, "a script call's future takes {size} bytes");
    }
}
