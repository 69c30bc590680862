//! What a backend author provides, and the helpers the cases share.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{ObtainRequest, ProlongRequest, ReleaseRequest, Token};
use lock_core::{
    HolderInfo, Key, LockBackend, LockState, ObtainOutcome, ProlongOutcome, ReleaseOutcome, Result,
    Ttl,
};

/// How the suite gets backends to test, and the faults it may inject.
///
/// Only [`Harness::backend`] is required; each other method unlocks the cases that need it,
/// and the cases that cannot run say so in their output (a line on stderr) and pass. Where
/// the backend's capabilities say a case applies, it fails instead until the harness offers
/// what it needs: `cross_process` needs [`Harness::shared_config`] and [`Harness::connect`];
/// `cross_host` needs [`Harness::lose_data`], [`Harness::drop_connections`] and
/// [`Harness::behind_faults`].
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// A backend in a namespace (key prefix, directory, table) that no other call shares, so
    /// that cases can run in parallel against one server.
    async fn backend(&self) -> Arc<dyn LockBackend>;

    /// Makes `backend` lose every record, as a server restart without persistence or a
    /// flush would. Returns false when the harness cannot do it.
    async fn lose_data(&self, backend: &Arc<dyn LockBackend>) -> bool {
        let _ = backend;
        false
    }

    /// Cuts the backend's connections to its server (for example with `CLIENT KILL` or
    /// `pg_terminate_backend`). Returns false when the backend has no connections to cut.
    async fn drop_connections(&self, backend: &Arc<dyn LockBackend>) -> bool {
        let _ = backend;
        false
    }

    /// A backend in the namespace (key prefix) `namespace`, within a space of this harness's
    /// own: two calls with the same `namespace` share locks, and the case
    /// `namespaces_never_interfere` checks that namespaces which are prefixes of each other
    /// (`app` with key `x:y`, `appx:` with key `y`) never do. `None` when the backend's
    /// namespaces are not free strings (a table name, a directory).
    async fn namespaced(&self, namespace: &str) -> Option<Arc<dyn LockBackend>> {
        let _ = namespace;
        None
    }

    /// A fresh backend whose traffic to its server passes through injected network faults,
    /// with a second backend on the same namespace that talks to the server directly (to
    /// observe what the server decided). Unlocks the partition and slow-server cases; a
    /// networked backend must offer it, others return `None` (the default).
    async fn behind_faults(&self) -> Option<Faulty> {
        None
    }

    /// A configuration string for a fresh namespace that another OS process can turn into
    /// the same backend with [`Harness::connect`]. `None` for single-process backends.
    async fn shared_config(&self) -> Option<String> {
        None
    }

    /// How many records the backends this harness made keep that nothing will remove on
    /// its own: neither an expiry on the server nor a sweep of the backend's ends them (a
    /// backend that sweeps now and then: run its sweep first, and count the records it left
    /// past their end). Every namespace of the harness together; a harness is made for each
    /// case, so only that case's records count. Unlocks
    /// `keys_taken_and_released_leave_nothing_behind`; `None` (the default) skips that case
    /// with a line on stderr.
    async fn lasting_records(&self) -> Option<u64> {
        None
    }

    /// Builds the backend a [`Harness::shared_config`] string describes (in a child process).
    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        let _ = config;
        self.backend().await
    }
}

/// Network faults between a backend and its server, as a proxy in between injects them.
pub trait NetworkFaults: Send + Sync {
    /// Delivers nothing either way; connections stay open and nothing is reset (a partition
    /// as a client sees it).
    fn freeze(&self);
    /// Delays every reply from the server by `latency`.
    fn delay_replies(&self, latency: Duration);
    /// Closes every open connection at once.
    fn cut(&self);
    /// Back to normal; what waited while frozen is delivered.
    fn heal(&self);
}

/// What [`Harness::behind_faults`] gives the fault cases.
pub struct Faulty {
    /// The backend whose traffic passes through the faults.
    pub backend: Arc<dyn LockBackend>,
    /// The same namespace on the same server, reached directly.
    pub direct: Arc<dyn LockBackend>,
    /// The faults to inject.
    pub faults: Box<dyn NetworkFaults>,
    /// The deadline of one call of `backend` (its `with_timeout`): keep it at about a
    /// second, so that the cases stay short.
    pub deadline: Duration,
}

/// A harness with the backend's expected name and the test binary's coordinates, as the
/// [`suite!`](crate::suite) macro builds it; cases take it by reference.
pub struct Suite {
    /// The name the backend must report.
    pub name: &'static str,
    /// The harness.
    pub harness: Box<dyn Harness>,
    /// The libtest name of the worker entry point, for the multi-process cases.
    pub worker_test: String,
    /// The seed of the model cases' random sequences: `None` takes `LOCK_CONFORMANCE_SEED`
    /// when it is set, else draws one per run (a failure names the seed it ran with, so
    /// that the same sequences can be run again).
    pub seed: Option<u64>,
}

impl Suite {
    /// A suite over `harness` for a backend named `name`; the multi-process cases need the
    /// [`suite!`](crate::suite) macro's worker entry point.
    pub fn new(name: &'static str, harness: impl Harness) -> Self {
        Suite {
            name,
            harness: Box::new(harness),
            worker_test: String::new(),
            seed: None,
        }
    }

    /// The seed the random cases run with: the suite's, else `LOCK_CONFORMANCE_SEED`, else
    /// a fresh one.
    pub(crate) fn sequence_seed(&self) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        self.seed
            .or_else(|| {
                std::env::var("LOCK_CONFORMANCE_SEED")
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or_else(|| {
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish()
            })
    }

    /// The suite with the model cases' sequences drawn from `seed`: the same sequences on
    /// every run (what a test that must catch a given bug every time needs).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
}

/// One owner (a token and holder info) acting on one key of one backend.
#[derive(Clone)]
pub(crate) struct Owner {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) key: Key,
    pub(crate) token: Token,
    pub(crate) holder: HolderInfo,
}

impl Owner {
    pub(crate) fn new(backend: &Arc<dyn LockBackend>, key: &str, who: &str) -> Self {
        Owner {
            backend: Arc::clone(backend),
            key: Key::new(key).expect("cases use valid keys"),
            token: Token::generate().expect("OS random generator"),
            holder: HolderInfo::current()
                .with_metadata(who)
                .expect("short metadata"),
        }
    }

    /// Another owner (a token of its own) of the same key, named `who`.
    pub(crate) fn fresh(&self, who: &str) -> Self {
        Owner::new(&self.backend, self.key.as_str(), who)
    }

    /// The same owner on another key.
    pub(crate) fn on(&self, key: &str) -> Self {
        Owner {
            key: Key::new(key).expect("cases use valid keys"),
            ..self.clone()
        }
    }

    pub(crate) async fn obtain(&self, ttl: Duration) -> Result<ObtainOutcome> {
        let req = ObtainRequest::new(&self.key, &self.token, ttl_of(ttl), &self.holder);
        self.backend.obtain(req).await
    }

    /// An obtain in `mode`, queueing (leaving a writer's marker when busy) or not.
    pub(crate) async fn obtain_as(
        &self,
        ttl: Duration,
        mode: lock_core::Mode,
        queue: bool,
    ) -> Result<ObtainOutcome> {
        let req = ObtainRequest::new(&self.key, &self.token, ttl_of(ttl), &self.holder)
            .with_mode(mode)
            .with_queue(queue);
        self.backend.obtain(req).await
    }

    /// A mode change to `mode` of this owner's hold with fencing token `of`
    /// ([`ObtainRequest::change`]).
    pub(crate) async fn change_to(
        &self,
        ttl: Duration,
        mode: lock_core::Mode,
        of: lock_core::Fencing,
    ) -> Result<ObtainOutcome> {
        let req = ObtainRequest::new(&self.key, &self.token, ttl_of(ttl), &self.holder)
            .with_mode(mode)
            .with_change(of);
        self.backend.obtain(req).await
    }

    pub(crate) async fn prolong(&self, ttl: Duration) -> Result<ProlongOutcome> {
        let req = ProlongRequest {
            key: &self.key,
            token: &self.token,
            ttl: ttl_of(ttl),
        };
        self.backend.prolongate(req).await
    }

    pub(crate) async fn release(&self, delay: Option<Duration>) -> Result<ReleaseOutcome> {
        let req = ReleaseRequest {
            key: &self.key,
            token: &self.token,
            delay_after: delay.map(ttl_of),
        };
        self.backend.release(req).await
    }

    pub(crate) async fn inspect(&self) -> Result<LockState> {
        self.backend.inspect(&self.key).await
    }
}

pub(crate) fn ttl_of(d: Duration) -> Ttl {
    Ttl::new(d).expect("cases use valid ttls")
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
