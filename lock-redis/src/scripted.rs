//! The Lua variant as a backend: every request one `EVALSHA` of the script (`lua.rs`,
//! `scripts/lock.lua` with `scripts/shared.lua`), which decides it on the server, shared
//! holds and mode changes included, held to the decision table. It never defers: there is
//! no second path to route to, so it is a `LockBackend` of its own rather than a routine of
//! lock-core's kit.

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use lock_core::backend::{
    async_trait, prolongate_each, Capabilities, KeyPage, KeysRequest, Listing, ObtainRequest,
    ProlongRequest, ReleaseRequest, ReleaseSubscription,
};
use lock_core::{
    Error, ErrorKind, Key, LockBackend, LockState, ObtainOutcome, Operation, ProlongOutcome,
    ReleaseOutcome, Result,
};
use tracing::Instrument;

use crate::error::protocol;
use crate::lua::{Lua, NAME};
use crate::request::{Reply, Request};
use crate::variant::{Setup, Variant, VariantBackend};
use crate::RedisBackend;

/// The script's backend: the engine and the builder's settings.
pub(crate) struct Scripted {
    pub(crate) lua: Lua,
    pub(crate) setup: Setup,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripted")
            .field("prefix", &self.setup.prefix)
            .field("grace", &self.setup.grace)
            .finish_non_exhaustive()
    }
}

impl Scripted {
    /// One call of the script, by the backend's deadline.
    pub(crate) async fn run(&self, key: &Key, req: Request<'_>) -> Result<Reply> {
        let keys = self.setup.keys(key);
        let op = req.operation();
        self.bounded(op, key, self.lua.run(&keys, &req)).await
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
        tokio::time::timeout(self.setup.timeout, call.instrument(span)).map(move |answer| {
            answer.unwrap_or_else(|_| {
                self.lua.link.timed_out();
                Err(self.setup.deadline_error(NAME, op))
            })
        })
    }

    fn mismatch(op: Operation, reply: &Reply) -> Error {
        protocol(NAME, op, format!("{reply:?}"))
    }
}

impl VariantBackend for Scripted {
    fn setup(&self) -> &Setup {
        &self.setup
    }

    fn variant(&self) -> Variant {
        Variant::Lua
    }

    fn client_ids(&self) -> BoxFuture<'_, Result<Vec<(String, i64)>>> {
        Box::pin(self.lua.link.client_ids(NAME))
    }
}

#[async_trait]
impl LockBackend for Scripted {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        // One pipeline carries a batch of prolongs on one server (see prolongate_many); on a
        // cluster each lock is its own call.
        let batch = match self.lua.link.is_cluster() {
            false => RedisBackend::BATCH,
            true => 1,
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
        // The script trusts its arguments: a bad mode is refused here.
        req.mode.check(NAME)?;
        let holder_json = serde_json::to_string(req.holder).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                NAME,
                Operation::Obtain,
                format!("holder info does not serialize: {e}"),
            )
        })?;
        let request = Request::Obtain {
            token: req.token,
            ttl: req.ttl,
            grace: self.setup.grace_for(req.ttl),
            holder_json: &holder_json,
            mode: req.mode,
            queue: req.queue,
            change: req.change.map(|f| f.0),
        };
        match self.run(req.key, request).await? {
            Reply::Obtain(o) => Ok(o),
            other => Err(Self::mismatch(Operation::Obtain, &other)),
        }
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        let request = Request::Prolong {
            token: req.token,
            ttl: req.ttl,
            grace: self.setup.grace_for(req.ttl),
        };
        match self.run(req.key, request).await? {
            Reply::Prolong(o) => Ok(o),
            other => Err(Self::mismatch(Operation::Prolongate, &other)),
        }
    }

    /// Pipelines of up to [`RedisBackend::BATCH`], each one round trip within the
    /// backend's deadline (see `Lua::prolong_many`); on a cluster each lock on its own, all
    /// in flight together.
    async fn prolongate_many(&self, reqs: &[ProlongRequest<'_>]) -> Vec<Result<ProlongOutcome>> {
        if self.lua.link.is_cluster() {
            return prolongate_each(self, reqs).await;
        }
        let mut answers = Vec::with_capacity(reqs.len());
        for chunk in reqs.chunks(RedisBackend::BATCH) {
            let batch: Vec<_> = chunk
                .iter()
                .map(|req| {
                    let request = Request::Prolong {
                        token: req.token,
                        ttl: req.ttl,
                        grace: self.setup.grace_for(req.ttl),
                    };
                    (self.setup.keys(req.key), request)
                })
                .collect();
            let span = tracing::debug_span!("redis_lock", op = "prolong_many", locks = chunk.len());
            let sent = tokio::time::timeout(
                self.setup.timeout,
                self.lua.prolong_many(&batch).instrument(span),
            );
            match sent.await {
                Ok(Ok(each)) => answers.extend(each),
                Ok(Err(e)) => answers.extend(std::iter::repeat_n(Err(e), chunk.len())),
                Err(_) => {
                    self.lua.link.timed_out();
                    let e = self.setup.deadline_error(NAME, Operation::Prolongate);
                    answers.extend(std::iter::repeat_n(Err(e), chunk.len()));
                }
            }
        }
        answers
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        let request = Request::Release {
            token: req.token,
            delay: req.delay_after,
        };
        match self.run(req.key, request).await? {
            Reply::Release(o) => Ok(o),
            other => Err(Self::mismatch(Operation::Release, &other)),
        }
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        match self.run(key, Request::Inspect).await? {
            Reply::State(s) => Ok(s),
            other => Err(Self::mismatch(Operation::Inspect, &other)),
        }
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        match self.run(key, Request::Force).await? {
            Reply::State(s) => Ok(s),
            other => Err(Self::mismatch(Operation::ForceRelease, &other)),
        }
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.setup.subscribe(key).await
    }

    /// `SCAN` of the record names (`list.rs`), by the backend's deadline.
    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        req.validate()?;
        let span = tracing::debug_span!("redis_lock", op = "list", prefix = req.prefix);
        let via = crate::list::Via::Link(&self.lua.link);
        let call = crate::list::keys(via, &self.setup.prefix, req, NAME);
        match tokio::time::timeout(self.setup.timeout, call.instrument(span)).await {
            Ok(page) => page,
            Err(_) => {
                self.lua.link.timed_out();
                Err(self.setup.deadline_error(NAME, Operation::List))
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
        let client = redis::Client::open(url.as_str()).expect("a URL");
        let conn = redis::aio::ConnectionManager::new(client.clone())
            .await
            .expect("the shared Redis server");
        let node = client.get_connection_info().addr().to_string();
        let link = crate::conn::link::Link {
            kind: crate::conn::link::LinkKind::Server { conn, node },
            acks: None,
        };
        let notifier = crate::notify::Notifier::new(
            std::sync::Arc::new(crate::conn::primary::Primary::Fixed(client)),
            NAME,
        );
        let backend = Scripted {
            lua: Lua::new(link),
            setup: Setup {
                prefix: RedisBackend::DEFAULT_PREFIX.into(),
                grace: None,
                timeout: RedisBackend::DEFAULT_TIMEOUT,
                notifier,
            },
        };
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
