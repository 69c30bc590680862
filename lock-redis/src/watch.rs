//! The WATCH/MULTI variant: optimistic transactions, for servers where scripting is disabled.
//!
//! Each operation, on a connection of its own from the pool:
//!
//! 1. one pipeline: `UNWATCH`, `WATCH rec`, `TIME`, `GET rec`: the record as of the server's
//!    clock (a key of another type fails the `GET` with `WRONGTYPE`: `Corrupt`);
//! 2. the decision, in Rust, by the rules of `scripts/lock.lua`, on the same record format;
//! 3. if the decision writes: `MULTI`, `SET rec …` (and `PUBLISH` on a release; `SPUBLISH` on
//!    a cluster), `EXEC`.
//!    `EXEC` answers nil when another client touched the record since the `WATCH`: the
//!    operation starts over (at most [`MAX_CONFLICTS`] times, then a retry-safe
//!    `Unavailable` error).
//!
//! So a cycle is 2 round trips per operation that writes and 1 for one that does not (busy,
//! inspect, lost). `UNWATCH` first clears whatever an earlier read-only operation left
//! watched on the connection.

use std::time::Duration;

use lock_core::{
    Busy, Error, ErrorKind, Fencing, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome,
    Result,
};

use std::sync::Arc;

use crate::error::map_error;
use crate::keys::LockKeys;
use crate::link::Acks;
use crate::pool::Pool;
use crate::record::{parse_holder, Phase, Record, State, FREE_KEEP_MS};
use crate::request::{Reply, Request};
use crate::shards::Shards;

/// The backend name of this variant.
pub(crate) const NAME: &str = crate::RedisBackend::WATCH_NAME;

/// Transactions of one operation that may lose to a concurrent writer before it gives up.
pub(crate) const MAX_CONFLICTS: u32 = 32;

pub(crate) struct Watch {
    pub(crate) route: Route,
    pub(crate) acks: Option<Acks>,
}

/// Where a record's transactions run.
pub(crate) enum Route {
    /// One pool, to the one server or the primary the sentinels name.
    One(Pool),
    /// A pool per cluster primary, chosen by the record's slot.
    Cluster(Box<Shards>),
}

/// What the server held when the transaction started.
struct Snapshot {
    now_ms: u64,
    now_us: u64,
    record: Option<Record>,
}

/// Reads that met a broken connection, a moved slot or a cluster in failover, retried: the
/// read changes nothing. On one server once (a fresh connection), on a cluster a few times
/// with a pause (the slot map is read again each time); the call's deadline bounds it all.
const REROUTES_ONE: u32 = 1;
const REROUTES_CLUSTER: u32 = 20;

impl Watch {
    pub(crate) async fn run(&self, keys: &LockKeys, req: &Request<'_>) -> Result<Reply> {
        let op = req.operation();
        let publish = match self.route {
            Route::One(_) => "PUBLISH",
            Route::Cluster(_) => "SPUBLISH",
        };
        let mut broken = 0;
        let mut attempt = 0;
        while attempt < MAX_CONFLICTS {
            let pool = match &self.route {
                Route::One(pool) => Pooled::Borrowed(pool),
                Route::Cluster(shards) => Pooled::Shared(shards.pool_for(&keys.record, op).await?),
            };
            let read = async {
                let mut lease = pool.get().get(op).await?;
                let snap = read(lease.conn(), keys, op).await?;
                Ok::<_, Error>((lease, snap))
            };
            let (mut lease, snap) = match read.await {
                Ok(read) => read,
                // The read changes nothing, so a fresh connection may try it again. What broke
                // this one (a server restart, CLIENT KILL, a failover, a moved slot) most
                // likely broke the other idle ones too: they are dropped rather than failing a
                // call each.
                Err(e) if e.kind() == ErrorKind::Unavailable && broken < self.reroutes() => {
                    broken += 1;
                    pool.get().discard_idle();
                    if let Route::Cluster(shards) = &self.route {
                        shards.forget_slots();
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    tracing::debug!(key = %keys.record, "connection broken or slot moved, trying again: {e}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            let (writes, reply) = decide(keys, req, &snap, publish)?;
            let Some(writes) = writes else {
                lease.done();
                return Ok(reply);
            };
            let committed: Option<redis::Value> = match writes.query_async(lease.conn()).await {
                Ok(c) => c,
                Err(e) => {
                    pool.get().primary().failed(&e);
                    let mut error = map_error(NAME, op, e);
                    if let Route::Cluster(shards) = &self.route {
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
            if committed.is_some() {
                if let Some(acks) = self.acks {
                    acks.await_on(lease.conn(), NAME, op).await?;
                }
                lease.done();
                return Ok(reply);
            }
            lease.done();
            attempt += 1;
            tracing::debug!(attempt, key = %keys.record, "transaction lost to a concurrent writer");
            // Spread the contenders out a little before the next round.
            let pause = fastrand::u64(0..200 * u64::from(attempt));
            tokio::time::sleep(Duration::from_micros(pause)).await;
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            NAME,
            op,
            format!(
                "{MAX_CONFLICTS} transactions in a row lost to concurrent writers on {}; \
                 the call is safe to retry",
                keys.record
            ),
        ))
    }

    fn reroutes(&self) -> u32 {
        match self.route {
            Route::One(_) => REROUTES_ONE,
            Route::Cluster(_) => REROUTES_CLUSTER,
        }
    }

    /// `(node, id)` of the idle connections.
    pub(crate) fn idle_ids(&self) -> Vec<(String, i64)> {
        match &self.route {
            Route::One(pool) => pool.idle_ids(),
            Route::Cluster(shards) => shards.idle_ids(),
        }
    }

    /// After a call that hit its deadline: behind Sentinel the primary may be gone.
    pub(crate) fn timed_out(&self) {
        if let Route::One(pool) = &self.route {
            pool.primary().forget();
        }
    }
}

/// The pool of a transaction: the one pool, or a cluster primary's.
enum Pooled<'a> {
    Borrowed(&'a Pool),
    Shared(Arc<Pool>),
}

impl Pooled<'_> {
    fn get(&self) -> &Pool {
        match self {
            Pooled::Borrowed(p) => p,
            Pooled::Shared(p) => p,
        }
    }
}

async fn read(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &LockKeys,
    op: Operation,
) -> Result<Snapshot> {
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
        .map(|raw| Record::decode(NAME, op, &keys.record, &raw))
        .transpose()?;
    Ok(Snapshot {
        now_ms: time.0 * 1000 + time.1 / 1000,
        now_us: time.0 * 1_000_000 + time.1,
        record,
    })
}

/// The transaction to run (if any) and the answer it gives once committed.
fn decide(
    keys: &LockKeys,
    req: &Request<'_>,
    s: &Snapshot,
    publish: &str,
) -> Result<(Option<redis::Pipeline>, Reply)> {
    let op = req.operation();
    let now = s.now_ms;
    let rec = s.record.as_ref();
    let mut tx = redis::pipe();
    tx.atomic();
    // Writes the record; `px` None keeps the key's physical expiry.
    let put = |tx: &mut redis::Pipeline, r: &Record, px: Option<u64>| {
        let cmd = tx.cmd("SET").arg(&keys.record).arg(r.encode());
        match px {
            Some(px) => cmd.arg("PX").arg(px.max(1)).ignore(),
            None => cmd.arg("KEEPTTL").ignore(),
        };
    };
    // Frees the lock or starts its cooldown, keeping the fencing token, and wakes waiters.
    let free = |tx: &mut redis::Pipeline, delay: u64| {
        let fencing = rec.map_or(0, |r| r.fencing);
        let (state, until, keep) = if delay > 0 {
            (State::Cooling, now + delay, delay)
        } else {
            (State::Free, now, FREE_KEEP_MS)
        };
        let r = Record {
            state,
            token: String::new(),
            fencing,
            holds: 0,
            expires: until,
            forget: until,
            holder: String::new(),
        };
        put(tx, &r, Some(keep));
        tx.cmd(publish).arg(&keys.channel).arg("released").ignore();
    };
    // The record held by `token` for `ttl` (+ grace) from now.
    let held =
        |token: String, fencing: u64, holds: u32, ttl: u64, grace: u64, holder: &str| Record {
            state: State::Held,
            token,
            fencing,
            holds,
            expires: now + ttl,
            forget: now + ttl + grace,
            holder: holder.to_owned(),
        };
    Ok(match req {
        Request::Obtain {
            token,
            ttl,
            grace_ms,
            holder_json,
        } => {
            let hex = token.to_hex();
            let ttl_ms = ttl.as_millis();
            match (Record::phase(rec, now, Some(&hex)), rec) {
                (Phase::Cooling { remaining }, _) => (None, busy(remaining, None)),
                (
                    Phase::Live {
                        ours: false,
                        remaining,
                    },
                    Some(r),
                ) => {
                    let holder = parse_holder(NAME, op, &r.holder)?;
                    (None, busy(remaining, Some(holder)))
                }
                (Phase::Live { ours: true, .. }, Some(r)) => {
                    let holds = r.holds.saturating_add(1);
                    let next = held(hex, r.fencing, holds, ttl_ms, *grace_ms, &r.holder);
                    put(&mut tx, &next, Some(ttl_ms + grace_ms));
                    (Some(tx), Reply::Obtain(ObtainOutcome::Reacquired { holds }))
                }
                _ => {
                    // Above the key's last token, never below the server clock in µs.
                    let fencing = (rec.map_or(0, |r| r.fencing) + 1).max(s.now_us);
                    let next = held(hex, fencing, 1, ttl_ms, *grace_ms, holder_json);
                    put(&mut tx, &next, Some(ttl_ms + grace_ms));
                    let acquired = ObtainOutcome::Acquired {
                        fencing: Fencing(fencing),
                        ttl: *ttl,
                    };
                    (Some(tx), Reply::Obtain(acquired))
                }
            }
        }
        Request::Prolong {
            token,
            ttl,
            grace_ms,
        } => {
            let hex = token.to_hex();
            let outcome = match Record::phase(rec, now, Some(&hex)) {
                Phase::Live { ours: true, .. } => ProlongOutcome::Prolonged,
                Phase::Expired { ours: true } => ProlongOutcome::ProlongedLate,
                _ => return Ok((None, Reply::Prolong(ProlongOutcome::Lost))),
            };
            let Some(r) = rec else {
                return Ok((None, Reply::Prolong(ProlongOutcome::Lost)));
            };
            let ttl_ms = ttl.as_millis();
            let next = held(hex, r.fencing, r.holds, ttl_ms, *grace_ms, &r.holder);
            put(&mut tx, &next, Some(ttl_ms + grace_ms));
            (Some(tx), Reply::Prolong(outcome))
        }
        Request::Release { token, delay_ms } => {
            let hex = token.to_hex();
            match (Record::phase(rec, now, Some(&hex)), rec) {
                (Phase::Live { ours: true, .. }, Some(r)) if r.holds > 1 => {
                    let next = Record {
                        holds: r.holds - 1,
                        ..r.clone()
                    };
                    put(&mut tx, &next, None);
                    let holds = next.holds;
                    (
                        Some(tx),
                        Reply::Release(ReleaseOutcome::Decremented { holds }),
                    )
                }
                (Phase::Live { ours: true, .. }, _) => {
                    free(&mut tx, *delay_ms);
                    (Some(tx), Reply::Release(ReleaseOutcome::Released))
                }
                (Phase::Expired { ours: true }, _) => {
                    free(&mut tx, *delay_ms);
                    (Some(tx), Reply::Release(ReleaseOutcome::ReleasedLate))
                }
                _ => (None, Reply::Release(ReleaseOutcome::Lost)),
            }
        }
        Request::Inspect => (None, Reply::State(Record::state(rec, now, NAME, op)?)),
        Request::Force => {
            let before = Record::state(rec, now, NAME, op)?;
            if rec.is_none() {
                return Ok((None, Reply::State(before)));
            }
            free(&mut tx, 0);
            (Some(tx), Reply::State(before))
        }
    })
}

fn busy(remaining: u64, holder: Option<lock_core::HolderInfo>) -> Reply {
    Reply::Obtain(ObtainOutcome::Busy(Busy {
        remaining: Duration::from_millis(remaining),
        holder,
    }))
}
