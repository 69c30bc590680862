//! The WATCH/MULTI variant: optimistic transactions, for servers where scripting is disabled.
//! It is a storage on lock-core's adapter (`lock_core::backend::storage`): this file reads
//! and writes one record; the adapter decides with `rules::step` (the rules `scripts/lock.lua`
//! also keeps, checked by the same table of cases) and runs the step again after a conflict.
//!
//! Each transaction, on a connection of its own from the pool:
//!
//! 1. one pipeline: `UNWATCH`, `WATCH rec`, `TIME`, `GET rec`: the record as of the server's
//!    clock (a key of another type fails the `GET` with `WRONGTYPE`: `Corrupt`);
//! 2. the step, on the same record format as the script's;
//! 3. if the step writes: `MULTI`, `SET rec …` (and `PUBLISH` on a release; `SPUBLISH` on
//!    a cluster), `EXEC`.
//!    `EXEC` answers nil when another client touched the record since the `WATCH`: a
//!    conflict, and the adapter starts over after a jittered pause that doubles from 100 µs
//!    up to 20 ms, for as long as the call's deadline allows (`RedisBuilder::timeout`, which
//!    bounds the whole call). A count would fail a release only because others were busy on
//!    the same key (eight readers and a writer lost 32 rounds in a row to each other).
//!
//! So a cycle is 2 round trips per operation that writes and 1 for one that does not (busy,
//! inspect, lost). `UNWATCH` first clears whatever an earlier read-only operation left
//! watched on the connection.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use lock_core::backend::codec::DigestJson;
use lock_core::backend::rules::{self, Wake};
use lock_core::backend::storage::{Change, Commit, Decide, Snapshot, Storage};
use lock_core::backend::{Capabilities, Grace, KeyPage, KeysRequest, Listing, ReleaseSubscription};
use lock_core::{Error, ErrorKind, Key, Operation, Result, Ttl};
use tracing::Instrument;

use crate::conn::link::Acks;
use crate::conn::pool::{Lease, Pool};
use crate::conn::Pools;
use crate::error::map_error;
use crate::keys::LockKeys;
use crate::record::{self, Stored};
use crate::variant::{Setup, Variant, VariantBackend};

/// The backend name of this variant.
pub(crate) const NAME: &str = crate::RedisBackend::WATCH_NAME;

pub(crate) struct Watch {
    pub(crate) pools: Pools,
    pub(crate) acks: Option<Acks>,
}

/// What the server held when the transaction started.
struct Seen {
    now_ms: u64,
    now_us: u64,
    record: Option<Stored>,
}

/// Reads that met a broken connection, a moved slot or a cluster in failover, retried: the
/// read changes nothing. On one server once (a fresh connection), on a cluster a few times
/// with a pause (the slot map is read again each time); the call's deadline bounds it all.
const REROUTES_ONE: u32 = 1;
const REROUTES_CLUSTER: u32 = 20;

impl Watch {
    /// One transaction on `keys.record`: read it (again on a fresh connection when the
    /// read met a broken one), let `decide` run on it, and write what it returned unless
    /// another client wrote the record since the read ([`Commit::Conflict`]).
    async fn transact(
        &self,
        keys: &LockKeys,
        op: Operation,
        decide: &mut Decide<'_, String, String>,
    ) -> Result<Commit> {
        let publish = match self.pools {
            Pools::Primary(_) => "PUBLISH",
            Pools::Cluster(_) => "SPUBLISH",
        };
        let mut broken = 0;
        loop {
            let pool = match &self.pools {
                Pools::Primary(pool) => Pooled::Borrowed(pool),
                Pools::Cluster(shards) => Pooled::Owned(shards.pool_for(&keys.record, op).await?),
            };
            let read = async {
                let mut lease = pool.get().get(op).await?;
                let snap = read(lease.conn(), keys, op).await?;
                Ok::<_, Error>((lease, snap))
            };
            let (lease, snap) = match read.await {
                Ok(read) => read,
                // The read changes nothing, so a fresh connection may try it again. What broke
                // this one (a server restart, CLIENT KILL, a failover, a moved slot) most
                // likely broke the other idle ones too: they are dropped rather than failing a
                // call each.
                Err(e) if e.kind() == ErrorKind::Unavailable && broken < self.reroutes() => {
                    broken += 1;
                    pool.get().discard_idle();
                    if let Pools::Cluster(shards) = &self.pools {
                        shards.forget_slots();
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    tracing::debug!(key = %keys.record, "connection broken or slot moved, trying again: {e}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            return self
                .write(keys, op, decide, &pool, lease, snap, publish)
                .await;
        }
    }

    /// The step on what was read, and its write in one `MULTI`/`EXEC` on the connection
    /// that watched the record.
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        keys: &LockKeys,
        op: Operation,
        decide: &mut Decide<'_, String, String>,
        pool: &Pooled<'_>,
        mut lease: Lease<'_>,
        snap: Seen,
        publish: &str,
    ) -> Result<Commit> {
        let change = decide(Snapshot {
            record: snap.record.as_ref(),
            clock: rules::Clock::millis(snap.now_ms),
            // Never below the server clock in µs: tokens keep growing after the record is
            // gone.
            fencing_floor: snap.now_us,
        });
        let Some(writes) = transaction(keys, change?, snap.now_ms, publish)? else {
            lease.done();
            return Ok(Commit::Done);
        };
        let committed: Option<redis::Value> = match writes.query_async(lease.conn()).await {
            Ok(c) => c,
            Err(e) => {
                pool.get().primary().failed(&e);
                let mut error = map_error(NAME, op, e);
                if let Pools::Cluster(shards) = &self.pools {
                    shards.forget_slots();
                    // A transaction cut short by a slot on the move (its SET answered ASK
                    // or TRYAGAIN, so EXEC aborted) comes back as a reply redis-rs cannot
                    // read. Nothing says what it did: an uncertain failure, which the
                    // contract lets a retry resolve.
                    if error.kind() == ErrorKind::Protocol {
                        error = Error::new(
                            ErrorKind::Unavailable,
                            NAME,
                            op,
                            format!(
                                "the transaction's answer could not be read (a slot \
                                 moving?); it may or may not have been applied, and is \
                                 safe to retry: {error}"
                            ),
                        );
                    }
                }
                return Err(error);
            }
        };
        if committed.is_none() {
            lease.done();
            return Ok(Commit::Conflict);
        }
        if let Some(acks) = self.acks {
            acks.await_on(lease.conn(), NAME, op).await?;
        }
        lease.done();
        Ok(Commit::Done)
    }

    fn reroutes(&self) -> u32 {
        match self.pools {
            Pools::Primary(_) => REROUTES_ONE,
            Pools::Cluster(_) => REROUTES_CLUSTER,
        }
    }

    /// `(node, id)` of the idle connections.
    pub(crate) fn idle_ids(&self) -> Vec<(String, i64)> {
        match &self.pools {
            Pools::Primary(pool) => pool.idle_ids(),
            Pools::Cluster(shards) => shards.idle_ids(),
        }
    }

    /// After a call that hit its deadline: behind Sentinel the primary may be gone.
    pub(crate) fn timed_out(&self) {
        if let Pools::Primary(pool) = &self.pools {
            pool.primary().forget();
        }
    }
}

/// The pool of a transaction: the one pool, or a cluster primary's.
enum Pooled<'a> {
    Borrowed(&'a Pool),
    Owned(Arc<Pool>),
}

impl Pooled<'_> {
    fn get(&self) -> &Pool {
        match self {
            Pooled::Borrowed(p) => p,
            Pooled::Owned(p) => p,
        }
    }
}

async fn read(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &LockKeys,
    op: Operation,
) -> Result<Seen> {
    let mut p = redis::pipe();
    p.cmd("UNWATCH")
        .ignore()
        .cmd("WATCH")
        .arg(&keys.record)
        .ignore()
        .cmd("TIME")
        .cmd("GET")
        .arg(&keys.record);
    let (time, raw): ((u64, u64), Option<String>) = p
        .query_async(conn)
        .await
        .map_err(|e| map_error(NAME, op, e))?;
    let record = raw
        .map(|raw| record::decode(NAME, op, &keys.record, &raw))
        .transpose()?;
    Ok(Seen {
        now_ms: time.0 * 1000 + time.1 / 1000,
        now_us: time.0 * 1_000_000 + time.1,
        record,
    })
}

/// The transaction that stores `change` (none when it writes nothing): the record, and the
/// release notification when the write frees room: for one waiter ("released"), or for
/// all ("all": shared holds or a writer's marker were involved; see `rules::Wake`).
fn transaction(
    keys: &LockKeys,
    change: Change<String, String>,
    now_ms: u64,
    publish: &str,
) -> Result<Option<redis::Pipeline>> {
    let Some(write) = change.write else {
        return Ok(None);
    };
    let mut tx = redis::pipe();
    tx.atomic();
    tx.cmd("SET")
        .arg(&keys.record)
        .arg(record::encode(&write, now_ms)?)
        .arg("PX")
        .arg(record::keep_ms(&write, now_ms))
        .ignore();
    match change.wake {
        Wake::Nobody => {}
        Wake::One => {
            tx.cmd(publish).arg(&keys.channel).arg("released").ignore();
        }
        Wake::All => {
            tx.cmd(publish).arg(&keys.channel).arg("all").ignore();
        }
    }
    Ok(Some(tx))
}

/// The WATCH variant as a backend: a storage of lock-core's adapter, which decides every
/// request with `rules::step` on what [`Watch::transact`] read, within the call's one
/// deadline (`RedisBuilder::timeout`, which bounds the conflicts too).
pub(crate) struct WatchStore {
    pub(crate) watch: Box<Watch>,
    pub(crate) setup: Setup,
}

impl std::fmt::Debug for WatchStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStore")
            .field("prefix", &self.setup.prefix)
            .field("grace", &self.setup.grace)
            .finish_non_exhaustive()
    }
}

/// Forgets the primary a transaction talked to if the transaction is dropped unfinished
/// (the call's deadline cut it, or its caller went away): behind Sentinel the primary may
/// be gone.
struct Unfinished<'a>(Option<&'a Watch>);

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(watch) = self.0 {
            watch.timed_out();
        }
    }
}

impl Storage for WatchStore {
    /// The token's digest and the holder's JSON, as the script stores them.
    type Codec = DigestJson;
    const NAME: &'static str = NAME;

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .release_notification(true)
            .shared(true)
            .listing(Listing::Scan)
    }

    fn grace(&self, ttl: Ttl) -> Grace {
        self.setup.grace_for(ttl)
    }

    fn conflicts_within(&self) -> Duration {
        self.setup.timeout
    }

    fn call_timeout(&self) -> Option<Duration> {
        Some(self.setup.timeout)
    }

    fn call_timeout_setting(&self) -> Option<&'static str> {
        Some("RedisBuilder::timeout / timeout=")
    }

    /// One transaction, in a span. Boxed: the adapter's future inside the backend's is deep
    /// enough to overflow the compiler's layout depth with some feature sets (distlock's
    /// `--all-features`), and a transaction is one or two round trips, next to which one
    /// allocation is nothing.
    async fn transact(
        &self,
        key: &Key,
        op: Operation,
        decide: &mut Decide<'_, String, String>,
    ) -> Result<Commit> {
        let keys = self.setup.keys(key);
        let span = tracing::debug_span!("redis_lock", op = ?op, key = key.as_str());
        let mut unfinished = Unfinished(Some(&self.watch));
        let commit = Box::pin(self.watch.transact(&keys, op, decide).instrument(span)).await;
        unfinished.0 = None;
        commit
    }

    async fn subscribe_releases(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.setup.subscribe(key).await
    }

    /// `SCAN` of the record names (`list.rs`) on the pools' primaries; the adapter bounds
    /// it by the deadline.
    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        let span = tracing::debug_span!("redis_lock", op = "list", prefix = req.prefix);
        let via = crate::list::Via::Pools(&self.watch.pools);
        let mut unfinished = Unfinished(Some(&self.watch));
        let page = crate::list::keys(via, &self.setup.prefix, req, NAME)
            .instrument(span)
            .await;
        unfinished.0 = None;
        page
    }
}

impl VariantBackend for WatchStore {
    fn setup(&self) -> &Setup {
        &self.setup
    }

    fn variant(&self) -> Variant {
        Variant::Watch
    }

    fn client_ids(&self) -> BoxFuture<'_, Result<Vec<(String, i64)>>> {
        Box::pin(std::future::ready(Ok(self.watch.idle_ids())))
    }
}
