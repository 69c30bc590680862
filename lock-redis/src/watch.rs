//! The WATCH/MULTI variant: optimistic transactions, for servers where scripting is disabled.
//!
//! Each operation, on a connection of its own from the pool:
//!
//! 1. one pipeline: `UNWATCH`, `WATCH rec`, `TIME`, `GET rec`: the record as of the server's
//!    clock (a key of another type fails the `GET` with `WRONGTYPE`: `Corrupt`);
//! 2. the decision, by `lock_core::backend::rules` (the rules `scripts/lock.lua` also keeps, checked
//!    by the same table of cases), on the same record format;
//! 3. if the decision writes: `MULTI`, `SET rec …` (and `PUBLISH` on a release; `SPUBLISH` on
//!    a cluster), `EXEC`.
//!    `EXEC` answers nil when another client touched the record since the `WATCH`: the
//!    operation starts over after a pause with full jitter that doubles from 100 µs up to
//!    [`MAX_PAUSE`], for as long as the call's deadline allows (`RedisBuilder::timeout`).
//!    A count would fail a release only because others were busy on the same key (eight
//!    readers and a writer lost 32 rounds in a row to each other); the deadline bounds the
//!    call as it bounds every other.
//!
//! So a cycle is 2 round trips per operation that writes and 1 for one that does not (busy,
//! inspect, lost). `UNWATCH` first clears whatever an earlier read-only operation left
//! watched on the connection.

use std::time::Duration;

use lock_core::backend::rules::{self, Wake};
use lock_core::{Error, ErrorKind, Operation, Result};

use std::sync::Arc;

use crate::conn::link::Acks;
use crate::conn::pool::Pool;
use crate::conn::shards::Shards;
use crate::error::map_error;
use crate::keys::LockKeys;
use crate::record::{self, Stored};
use crate::request::parse_holder;
use crate::request::{Reply, Request};

/// The backend name of this variant.
pub(crate) const NAME: &str = crate::RedisBackend::WATCH_NAME;

/// The longest pause between two transactions of one operation that lost to concurrent
/// writers.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(20);

/// The pause before the transaction that follows `conflicts` lost ones: full jitter under
/// 100 µs doubled per conflict, at most [`MAX_PAUSE`].
fn conflict_pause(conflicts: u32) -> Duration {
    let ceiling = (100u64 << conflicts.min(16)).min(MAX_PAUSE.as_micros() as u64);
    Duration::from_micros(fastrand::u64(0..=ceiling))
}

pub(crate) struct Watch {
    pub(crate) pools: Pools,
    pub(crate) acks: Option<Acks>,
}

/// Where a record's transactions run.
pub(crate) enum Pools {
    /// One pool, to the one primary: the server, or the one the sentinels name.
    Primary(Pool),
    /// A pool per cluster primary, chosen by the record's slot.
    Cluster(Box<Shards>),
}

/// What the server held when the transaction started.
struct Snapshot {
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
    pub(crate) async fn run(&self, keys: &LockKeys, req: &Request<'_>) -> Result<Reply> {
        let op = req.operation();
        let publish = match self.pools {
            Pools::Primary(_) => "PUBLISH",
            Pools::Cluster(_) => "SPUBLISH",
        };
        let mut broken = 0;
        let mut conflicts = 0;
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
            let (mut lease, snap) = match read.await {
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
            if committed.is_some() {
                if let Some(acks) = self.acks {
                    acks.await_on(lease.conn(), NAME, op).await?;
                }
                lease.done();
                return Ok(reply);
            }
            lease.done();
            conflicts += 1;
            tracing::debug!(conflicts, key = %keys.record, "transaction lost to a concurrent writer");
            // Spread the contenders out before the next round; the call's deadline ends it.
            tokio::time::sleep(conflict_pause(conflicts)).await;
        }
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
        .map(|raw| record::decode(NAME, op, &keys.record, &raw))
        .transpose()?;
    Ok(Snapshot {
        now_ms: time.0 * 1000 + time.1 / 1000,
        now_us: time.0 * 1_000_000 + time.1,
        record,
    })
}

/// The transaction to run (if any) and the answer it gives once committed: the contract's
/// rules (`lock_core::backend::rules`) on the record as of the server's clock.
fn decide(
    keys: &LockKeys,
    req: &Request<'_>,
    s: &Snapshot,
    publish: &str,
) -> Result<(Option<redis::Pipeline>, Reply)> {
    let op = req.operation();
    let digest = match req {
        Request::Obtain { token, .. }
        | Request::Prolong { token, .. }
        | Request::Release { token, .. } => token.digest(),
        Request::Inspect | Request::Force => String::new(),
    };
    let holder_json = match req {
        Request::Obtain { holder_json, .. } => (*holder_json).to_owned(),
        _ => String::new(),
    };
    let ask = match *req {
        Request::Obtain {
            ttl,
            grace,
            mode,
            queue,
            change,
            ..
        } => rules::Ask::Obtain(rules::Obtain {
            token: &digest,
            holder: &holder_json,
            ttl,
            grace,
            // Never below the server clock in µs: tokens keep growing after the record is
            // gone.
            fencing_floor: s.now_us,
            mode,
            queue,
            change,
        }),
        Request::Prolong { ttl, grace, .. } => rules::Ask::Prolong {
            token: &digest,
            ttl,
            grace,
        },
        Request::Release { delay, .. } => rules::Ask::Release {
            token: &digest,
            delay,
        },
        Request::Inspect => rules::Ask::Inspect,
        Request::Force => rules::Ask::Force,
    };
    let d = rules::step(s.record.as_ref(), rules::Clock::millis(s.now_ms), ask);
    let reply = d
        .outcome
        .try_into_reply(NAME, |json: &String| parse_holder(NAME, op, json))?;
    let (write, wake) = (d.write, d.wake);
    let Some(write) = write else {
        return Ok((None, reply));
    };
    let mut tx = redis::pipe();
    tx.atomic();
    tx.cmd("SET")
        .arg(&keys.record)
        .arg(record::encode(&write, s.now_ms)?)
        .arg("PX")
        .arg(record::keep_ms(&write, s.now_ms))
        .ignore();
    // A write that frees room wakes the key's waiters: one of them ("released"), or all
    // ("all": shared holds or a writer's marker were involved; see `rules::Wake`).
    match wake {
        Wake::Nobody => {}
        Wake::One => {
            tx.cmd(publish).arg(&keys.channel).arg("released").ignore();
        }
        Wake::All => {
            tx.cmd(publish).arg(&keys.channel).arg("all").ignore();
        }
    }
    Ok((Some(tx), reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_pauses_grow_with_jitter_and_stay_under_the_cap() {
        for conflicts in 0..100 {
            let ceiling = Duration::from_micros(100 << conflicts.min(16)).min(MAX_PAUSE);
            for _ in 0..50 {
                assert!(conflict_pause(conflicts) <= ceiling);
            }
        }
        // Jittered: not every pause after many conflicts is the same.
        let pauses: std::collections::HashSet<Duration> =
            (0..50).map(|_| conflict_pause(30)).collect();
        assert!(pauses.len() > 1);
    }
}
