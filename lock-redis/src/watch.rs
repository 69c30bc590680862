//! The WATCH/MULTI variant: optimistic transactions, for servers where scripting is disabled.
//!
//! Each operation, on a connection of its own from the pool:
//!
//! 1. one pipeline: `UNWATCH`, `WATCH rec fence`, `TIME`, `EXISTS rec`, `HMGET rec <fields>`,
//!    `GET fence`: the record and the fencing counter as of the server's clock;
//! 2. the decision, in Rust, by the rules of `scripts/lock.lua`;
//! 3. if the decision writes: `MULTI`, the writes, `EXEC`. `EXEC` answers nil when another
//!    client touched the record or the counter since the `WATCH`: the operation starts over
//!    (at most [`MAX_CONFLICTS`] times, then a retry-safe `Unavailable` error).
//!
//! So a cycle is 2 round trips per operation that writes and 1 for one that does not (busy,
//! inspect, lost). `UNWATCH` first clears whatever an earlier read-only operation left
//! watched on the connection. Expiry is the server's `TIME`; absolute expiries are set with
//! `PEXPIREAT` from that same reading.

use std::time::Duration;

use lock_core::{
    Busy, Error, ErrorKind, Fencing, ObtainOutcome, Operation, ProlongOutcome, ReleaseOutcome,
    Result,
};

use crate::error::map_error;
use crate::keys::LockKeys;
use crate::pool::Pool;
use crate::record::{parse_holder, Phase, Record, FIELDS};
use crate::request::{Reply, Request};

/// The backend name of this variant.
pub(crate) const NAME: &str = crate::RedisBackend::WATCH_NAME;

/// Transactions of one operation that may lose to a concurrent writer before it gives up.
pub(crate) const MAX_CONFLICTS: u32 = 32;

/// How long the fencing counter outlives the lock's last use (it only orders acquisitions
/// within one microsecond; the server clock floors it otherwise).
const FENCE_KEEP_MS: u64 = 86_400_000;

pub(crate) struct Watch {
    pub(crate) pool: Pool,
}

/// What the server held when the transaction started.
struct Snapshot {
    now_ms: u64,
    now_us: u64,
    record: Option<Record>,
    fence: u64,
}

impl Watch {
    pub(crate) async fn run(&self, keys: &LockKeys, req: &Request<'_>) -> Result<Reply> {
        let op = req.operation();
        for attempt in 0..MAX_CONFLICTS {
            let mut lease = self.pool.get(op).await?;
            let snap = read(lease.conn(), keys, op).await?;
            let (writes, reply) = decide(keys, req, &snap)?;
            let Some(writes) = writes else {
                lease.done();
                return Ok(reply);
            };
            let committed: Option<redis::Value> = writes
                .query_async(lease.conn())
                .await
                .map_err(|e| map_error(NAME, op, e))?;
            lease.done();
            if committed.is_some() {
                return Ok(reply);
            }
            tracing::debug!(attempt, key = %keys.record, "transaction lost to a concurrent writer");
            // Spread the contenders out a little before the next round.
            tokio::time::sleep(Duration::from_micros(fastrand::u64(
                0..200 * u64::from(attempt + 1),
            )))
            .await;
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
        .arg(&keys.fence)
        .ignore()
        .cmd("TIME")
        .cmd("EXISTS")
        .arg(&keys.record)
        .cmd("HMGET")
        .arg(&keys.record)
        .arg(&FIELDS[..])
        .cmd("GET")
        .arg(&keys.fence);
    let (time, exists, fields, fence): ((u64, u64), bool, Vec<Option<String>>, Option<String>) = p
        .query_async(conn)
        .await
        .map_err(|e| map_error(NAME, op, e))?;
    let record = if exists {
        Some(Record::decode(NAME, op, &keys.record, fields)?)
    } else {
        None
    };
    let fence = match fence {
        None => 0,
        Some(s) => s.parse().map_err(|_| {
            crate::error::corrupt(NAME, op, format!("{} is not a fencing counter", keys.fence))
        })?,
    };
    Ok(Snapshot {
        now_ms: time.0 * 1000 + time.1 / 1000,
        now_us: time.0 * 1_000_000 + time.1,
        record,
        fence,
    })
}

/// The transaction to run (if any) and the answer it gives once committed.
fn decide(
    keys: &LockKeys,
    req: &Request<'_>,
    s: &Snapshot,
) -> Result<(Option<redis::Pipeline>, Reply)> {
    let op = req.operation();
    let now = s.now_ms;
    let rec = s.record.as_ref();
    let mut tx = redis::pipe();
    tx.atomic();
    // Sets the expiry fields and the physical expiry (ttl + grace) of a held record.
    let expire = |tx: &mut redis::Pipeline, ttl: u64, grace: u64| {
        tx.cmd("HSET")
            .arg(&keys.record)
            .arg("exp")
            .arg(now + ttl)
            .arg("forget")
            .arg(now + ttl + grace)
            .ignore()
            .cmd("PEXPIREAT")
            .arg(&keys.record)
            .arg(now + ttl + grace)
            .ignore();
    };
    // Frees the lock or starts its cooldown, and wakes waiters.
    let free = |tx: &mut redis::Pipeline, delay: u64| {
        tx.cmd("DEL").arg(&keys.record).ignore();
        if delay > 0 {
            tx.cmd("HSET")
                .arg(&keys.record)
                .arg("st")
                .arg("cooling")
                .arg("until")
                .arg(now + delay)
                .ignore()
                .cmd("PEXPIREAT")
                .arg(&keys.record)
                .arg(now + delay)
                .ignore();
        }
        tx.cmd("PUBLISH")
            .arg(&keys.channel)
            .arg("released")
            .ignore();
    };
    let holds = match rec {
        Some(Record::Held { holds, .. }) => *holds,
        _ => 0,
    };
    Ok(match req {
        Request::Obtain {
            token,
            ttl,
            grace_ms,
            holder_json,
        } => {
            let hex = token.to_hex();
            match Record::phase(rec, now, Some(&hex)) {
                Phase::Cooling { remaining } => (None, busy(remaining, None)),
                Phase::Live {
                    ours: false,
                    remaining,
                } => {
                    let holder = match rec {
                        Some(Record::Held { holder, .. }) => Some(parse_holder(NAME, op, holder)?),
                        _ => None,
                    };
                    (None, busy(remaining, holder))
                }
                Phase::Live { ours: true, .. } => {
                    let holds = holds.saturating_add(1);
                    tx.cmd("HSET")
                        .arg(&keys.record)
                        .arg("holds")
                        .arg(holds)
                        .ignore();
                    expire(&mut tx, ttl.as_millis(), *grace_ms);
                    (Some(tx), Reply::Obtain(ObtainOutcome::Reacquired { holds }))
                }
                Phase::Free | Phase::Expired { .. } => {
                    // Never below the server's clock in microseconds, as in the Lua script.
                    let fencing = (s.fence + 1).max(s.now_us);
                    let keep = ttl.as_millis() + grace_ms + FENCE_KEEP_MS;
                    tx.cmd("SET")
                        .arg(&keys.fence)
                        .arg(fencing)
                        .arg("PX")
                        .arg(keep)
                        .ignore()
                        .cmd("DEL")
                        .arg(&keys.record)
                        .ignore()
                        .cmd("HSET")
                        .arg(&keys.record)
                        .arg("st")
                        .arg("held")
                        .arg("tok")
                        .arg(&hex)
                        .arg("holder")
                        .arg(*holder_json)
                        .arg("fen")
                        .arg(fencing)
                        .arg("holds")
                        .arg(1)
                        .ignore();
                    expire(&mut tx, ttl.as_millis(), *grace_ms);
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
        } => match Record::phase(rec, now, Some(&token.to_hex())) {
            Phase::Live { ours: true, .. } => {
                expire(&mut tx, ttl.as_millis(), *grace_ms);
                (Some(tx), Reply::Prolong(ProlongOutcome::Prolonged))
            }
            Phase::Expired { ours: true } => {
                expire(&mut tx, ttl.as_millis(), *grace_ms);
                (Some(tx), Reply::Prolong(ProlongOutcome::ProlongedLate))
            }
            _ => (None, Reply::Prolong(ProlongOutcome::Lost)),
        },
        Request::Release { token, delay_ms } => {
            match Record::phase(rec, now, Some(&token.to_hex())) {
                Phase::Live { ours: true, .. } if holds > 1 => {
                    let holds = holds - 1;
                    tx.cmd("HSET")
                        .arg(&keys.record)
                        .arg("holds")
                        .arg(holds)
                        .ignore();
                    (
                        Some(tx),
                        Reply::Release(ReleaseOutcome::Decremented { holds }),
                    )
                }
                Phase::Live { ours: true, .. } => {
                    free(&mut tx, *delay_ms);
                    (Some(tx), Reply::Release(ReleaseOutcome::Released))
                }
                Phase::Expired { ours: true } => {
                    free(&mut tx, *delay_ms);
                    (Some(tx), Reply::Release(ReleaseOutcome::ReleasedLate))
                }
                _ => (None, Reply::Release(ReleaseOutcome::Lost)),
            }
        }
        Request::Inspect => (None, Reply::State(Record::state(rec, now, NAME, op)?)),
        Request::Force => {
            let before = Record::state(rec, now, NAME, op)?;
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
