//! `RedisBackend`: the contract on Redis, in either variant.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    Capabilities, Error, ErrorKind, Grace, Key, LockBackend, LockState, ObtainOutcome,
    ObtainRequest, Operation, ProlongOutcome, ProlongRequest, ReleaseOutcome, ReleaseRequest,
    ReleaseSubscription, Result, Ttl,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tracing::Instrument;

use crate::error::{map_error, protocol};
use crate::keys::LockKeys;
use crate::lua::{self, Lua};
use crate::notify::Notifier;
use crate::pool::Pool;
use crate::request::{Reply, Request};
use crate::watch::{self, Watch};

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

/// Locks on a Redis server.
///
/// Built with [`RedisBackend::connect`] (Lua variant) or [`RedisBackend::connect_with`] from a
/// `redis://` or `rediss://` (TLS) URL; the password and ACL user come from the URL and never
/// show in `Debug` or errors. The Lua variant talks through a [`ConnectionManager`] that
/// reconnects in the background after a dropped connection; the WATCH variant through a pool
/// of dedicated connections ([`RedisBackend::with_pool_size`], default 16) because `WATCH`
/// state belongs to a connection. Waiters are woken by a pub/sub message on release, over one
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

enum Engine {
    Lua(Lua),
    Watch(Box<Watch>),
}

impl RedisBackend {
    /// The Lua variant's name in errors and reports.
    pub const LUA_NAME: &'static str = "redis-lua";
    /// The WATCH/MULTI variant's name in errors and reports.
    pub const WATCH_NAME: &'static str = "redis-watch";
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "lock:";
    /// The default number of dedicated connections of the WATCH variant.
    pub const DEFAULT_POOL_SIZE: usize = 16;
    /// The default deadline of one call: see [`RedisBackend::with_timeout`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    /// The deadline of [`RedisBackend::connect`] and [`RedisBackend::connect_with`]: two
    /// connection attempts and the first command.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

    /// Connects the Lua variant to `url` (`redis://[user:password@]host:port/db`, or
    /// `rediss://` for TLS).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed URL, [`ErrorKind::PermissionDenied`] for a
    /// refused password, [`ErrorKind::Unavailable`] when the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, Variant::Lua).await
    }

    /// Connects the chosen variant to `url`; see [`RedisBackend::connect`].
    ///
    /// # Errors
    /// As for [`RedisBackend::connect`]; the WATCH variant checks the URL and credentials
    /// with one connection of its pool.
    pub async fn connect_with(url: &str, variant: Variant) -> Result<Self> {
        let name = match variant {
            Variant::Lua => lua::NAME,
            Variant::Watch => watch::NAME,
        };
        tokio::time::timeout(Self::CONNECT_TIMEOUT, Self::connect_now(url, variant))
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Unavailable,
                    name,
                    Operation::Connect,
                    format!(
                        "the server did not answer within {:?}; it is safe to retry",
                        Self::CONNECT_TIMEOUT
                    ),
                ))
            })
    }

    async fn connect_now(url: &str, variant: Variant) -> Result<Self> {
        let name = match variant {
            Variant::Lua => lua::NAME,
            Variant::Watch => watch::NAME,
        };
        let client = open_client(url, name)?;
        let engine = match variant {
            Variant::Lua => {
                // Two quick retries: a wrong address or certificate fails in about a second,
                // and later reconnects start over anyway on the next call.
                // No response timeout of the driver's own: each call's deadline
                // (`with_timeout`) bounds it, whatever it waits for.
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(2)
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(None);
                let conn = ConnectionManager::new_with_config(client.clone(), config)
                    .await
                    .map_err(|e| map_error(name, Operation::Connect, e))?;
                Engine::Lua(Lua::new(conn))
            }
            Variant::Watch => {
                let pool = Pool::new(client.clone(), Self::DEFAULT_POOL_SIZE, name);
                // Fail now on a wrong address or password, not on the first lock.
                pool.get(Operation::Connect).await?.done();
                Engine::Watch(Box::new(Watch { pool }))
            }
        };
        Ok(Self::build(client, engine, name))
    }

    /// The Lua variant over an existing connection manager; `client` opens the pub/sub
    /// connection for release notifications.
    pub fn from_manager(client: redis::Client, conn: ConnectionManager) -> Self {
        Self::build(client, Engine::Lua(Lua::new(conn)), lua::NAME)
    }

    fn build(client: redis::Client, engine: Engine, name: &'static str) -> Self {
        RedisBackend {
            inner: Arc::new(Inner {
                engine,
                notifier: Notifier::new(client, name),
            }),
            prefix: Self::DEFAULT_PREFIX.into(),
            grace: None,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// The deadline of every call (default 2 s): waiting for a pooled connection or a
    /// reconnect, and the server's answer. A call that hits it returns a retry-safe
    /// [`ErrorKind::Unavailable`] naming the deadline; the call may or may not have been
    /// applied (the contract's uncertain failure, which a retry resolves). Keep it well
    /// under your locks' ttl: a watchdog's prolong still waiting when the validity ends
    /// counts the lock as lost.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a zero deadline.
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self> {
        if timeout.is_zero() {
            return Err(Error::new(
                ErrorKind::Config,
                self.name(),
                Operation::Validate,
                "the deadline of a call must be longer than zero",
            ));
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// Puts every key under `prefix` instead of `lock:`; different prefixes never meet.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().into();
        self
    }

    /// Keeps expired records for `grace` instead of each lock's ttl, for late detection.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](lock_core::ErrorKind::InvalidInput) over 365 days, before any
    /// I/O.
    pub fn with_grace(mut self, grace: Duration) -> Result<Self> {
        self.grace = Some(Grace::new(grace)?);
        Ok(self)
    }

    /// Sets the WATCH variant's number of dedicated connections (at least 1): at most that
    /// many operations run at once, the others wait for a connection. No effect on the Lua
    /// variant, whose one multiplexed connection carries any number of operations.
    pub fn with_pool_size(self, size: usize) -> Self {
        match &self.inner.engine {
            Engine::Watch(w) if w.pool.size() != size.max(1) => {
                let name = watch::NAME;
                let client = self.inner.notifier.client().clone();
                let pool = Pool::new(client.clone(), size, name);
                RedisBackend {
                    inner: Arc::new(Inner {
                        engine: Engine::Watch(Box::new(Watch { pool })),
                        notifier: Notifier::new(client, name),
                    }),
                    ..self
                }
            }
            _ => self,
        }
    }

    /// Which variant this backend runs.
    pub fn variant(&self) -> Variant {
        match self.inner.engine {
            Engine::Lua(_) => Variant::Lua,
            Engine::Watch(_) => Variant::Watch,
        }
    }

    /// The server-side ids (`CLIENT ID`) of the backend's command connections: the Lua
    /// variant's one connection, or the WATCH variant's idle pooled ones. For operators and
    /// for fault tests that `CLIENT KILL` them.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] when the server cannot be reached.
    pub async fn client_ids(&self) -> Result<Vec<i64>> {
        match &self.inner.engine {
            Engine::Lua(l) => {
                let mut conn = l.connection();
                let mut cmd = redis::cmd("CLIENT");
                cmd.arg("ID");
                let query = cmd.query_async(&mut conn);
                let id = tokio::time::timeout(self.timeout, query)
                    .await
                    .map_err(|_| {
                        Error::new(
                            ErrorKind::Unavailable,
                            self.name(),
                            Operation::Inspect,
                            format!("no answer within the deadline of {:?}", self.timeout),
                        )
                    })?
                    .map_err(|e| map_error(self.name(), Operation::Inspect, e))?;
                Ok(vec![id])
            }
            Engine::Watch(w) => Ok(w.pool.idle_ids()),
        }
    }

    fn grace_ms(&self, ttl: Ttl) -> u64 {
        Grace::or_ttl(self.grace, ttl).as_millis()
    }

    async fn run(&self, key: &Key, req: Request<'_>) -> Result<Reply> {
        let keys = LockKeys::new(&self.prefix, key);
        let op = req.operation();
        let span = tracing::debug_span!("redis_lock", op = ?op, key = key.as_str());
        let call = async {
            match &self.inner.engine {
                Engine::Lua(l) => l.run(&keys, &req).await,
                // A transaction cut off here drops its connection rather than return it.
                Engine::Watch(w) => w.run(&keys, &req).await,
            }
        };
        tokio::time::timeout(self.timeout, call.instrument(span))
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Unavailable,
                    self.name(),
                    op,
                    format!(
                        "no answer within the deadline of {:?} (with_timeout / timeout=); it is \
                         safe to retry",
                        self.timeout
                    ),
                ))
            })
    }

    fn mismatch(&self, op: Operation, reply: &Reply) -> Error {
        protocol(self.name(), op, format!("{reply:?}"))
    }
}

fn open_client(url: &str, name: &'static str) -> Result<redis::Client> {
    // The URL may hold a password: it never goes into the message.
    let scheme = url.split("://").next().unwrap_or("");
    if scheme == "rediss" && !cfg!(feature = "tls") {
        return Err(Error::new(
            ErrorKind::Config,
            name,
            Operation::Connect,
            "rediss:// needs lock-redis built with its `tls` feature",
        ));
    }
    redis::Client::open(url).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            name,
            Operation::Connect,
            format!(
                "not a Redis URL ({:?}): expected redis://[user:password@]host:port/db \
                 or rediss://...",
                e.kind()
            ),
        )
    })
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
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .release_notification(true)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
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
            grace_ms: self.grace_ms(req.ttl),
            holder_json: &holder_json,
        };
        match self.run(req.key, request).await? {
            Reply::Obtain(o) => Ok(o),
            other => Err(self.mismatch(Operation::Obtain, &other)),
        }
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        let request = Request::Prolong {
            token: req.token,
            ttl: req.ttl,
            grace_ms: self.grace_ms(req.ttl),
        };
        match self.run(req.key, request).await? {
            Reply::Prolong(o) => Ok(o),
            other => Err(self.mismatch(Operation::Prolongate, &other)),
        }
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        let request = Request::Release {
            token: req.token,
            delay_ms: req.delay_after.map_or(0, Ttl::as_millis),
        };
        match self.run(req.key, request).await? {
            Reply::Release(o) => Ok(o),
            other => Err(self.mismatch(Operation::Release, &other)),
        }
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        match self.run(key, Request::Inspect).await? {
            Reply::State(s) => Ok(s),
            other => Err(self.mismatch(Operation::Inspect, &other)),
        }
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
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
}
