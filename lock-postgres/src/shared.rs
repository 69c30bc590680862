//! Shared holds (semaphores, read locks) and a waiting writer's marker: decided in the
//! client by lock-core's rules, in one transaction that holds the key's advisory lock.
//!
//! The function of `schema.sql` keeps the mutex, one statement per operation. A shared
//! request comes here straight away; any other comes here when the function answered
//! `defer` (the row holds shares or a live writer's marker; the function wrote nothing).
//! Here, on one connection, two messages:
//!
//! 1. `BEGIN`, the session pinned as for every call, the key's advisory lock, then the
//!    server's clock and the key's row, read after the lock was granted
//!    ([`Names::shared_read`](crate::sql::Names::shared_read));
//! 2. the decision of [`lock_core::backend::rules`] on that row at that instant, and if it
//!    writes: the row, the release notification when it frees room and some process waits,
//!    and `COMMIT` ([`Names::shared_write`](crate::sql::Names::shared_write)); else only
//!    `COMMIT`.
//!
//! So a shared operation costs two round trips (three after a `defer`) where the mutex costs
//! one; the rules are the ones every other backend decides with, not a second copy in
//! PL/pgSQL. The row's shape is in `schema.sql`'s comment on the table.
//!
//! # Cancel safety
//! A transaction cut off by the deadline or a cancelled caller leaves its connection open
//! mid-transaction: the connection is closed rather than returned to the pool, and the
//! server rolls the transaction back (nothing half-written; the advisory lock goes with it).

use lock_core::backend::rules::columns::Columns;
use lock_core::backend::rules::{self, Ask, Clock, Record, Reply, Wake};
use lock_core::backend::{Grace, ProlongRequest};
use lock_core::{Error, Key, Operation, ProlongOutcome, Result};
use sqlx::postgres::PgRow;
use sqlx::Row as _;
use tracing::Instrument;

use crate::error::{is_missing_schema, map_error, protocol};
use crate::exec::{fetch_rows, Db};
use crate::reply::parse_holder;
use crate::NAME;
use lock_sql::Open;

/// A record as the rules see it here: the token's digest, the holder info as JSON, times in
/// nanoseconds of the server's clock (µs in the row, exact).
type Stored = Record<String, String>;

impl Db {
    /// Decides `ask` on `key` in a transaction of its own, by the backend's deadline.
    pub(crate) async fn decide(&self, key: &Key, ask: Ask<'_, String, String>) -> Result<Reply> {
        let op = ask.operation();
        let span = tracing::debug_span!(
            "postgres_lock",
            op = op.as_str(),
            key = key.as_str(),
            shared = true
        );
        let deadline = self.pooled.deadline_from_now();
        async {
            self.pooled
                .within(op, deadline, self.ensure_schema(op))
                .await??;
            let first = self
                .pooled
                .within(op, deadline, self.transaction(op, key, ask))
                .await?;
            match first {
                Err(e) if is_missing_schema(&e) && self.auto_migrate => {
                    tracing::warn!(table = %self.table(), "lock table missing, creating it again");
                    self.schema.forget();
                    self.pooled
                        .within(op, deadline, self.ensure_schema(op))
                        .await??;
                    self.pooled
                        .within(op, deadline, self.transaction(op, key, ask))
                        .await?
                        .map_err(|e| map_error(op, e))?
                }
                other => other.map_err(|e| map_error(op, e))?,
            }
        }
        .instrument(span)
        .await
    }

    /// Prolongs a lock whose row the function deferred, in the client's decision.
    pub(crate) async fn prolong_deferred(
        &self,
        req: &ProlongRequest<'_>,
    ) -> Result<ProlongOutcome> {
        let token = req.token.digest();
        let ask = Ask::Prolong {
            token: &token,
            ttl: req.ttl,
            grace: Grace::or_ttl(self.grace, req.ttl),
        };
        self.decide(req.key, ask).await?.into_prolong(NAME)
    }

    /// The two messages; a failure of the decision itself (a corrupt row, a refused
    /// request) still commits the transaction, which wrote nothing.
    async fn transaction(
        &self,
        op: Operation,
        key: &Key,
        ask: Ask<'_, String, String>,
    ) -> std::result::Result<Result<Reply>, sqlx::Error> {
        let mut tx = Open::new(
            self.pooled
                .connection(self.pooled.deadline_from_now())
                .await?,
        );
        let read = self.names.shared_read(&self.session, key.as_str());
        let rows = fetch_rows(&mut tx.conn, &read).await?;
        let decided = match rows.last() {
            Some(row) => decide(op, row, ask),
            None => Err(protocol(op, "the row's read answered nothing")),
        };
        let end = match &decided {
            Ok((_, Some(row), wake)) => self.names.shared_write(key.as_str(), row, *wake),
            _ => "COMMIT".to_owned(),
        };
        fetch_rows(&mut tx.conn, &end).await?;
        tx.open = false;
        Ok(decided.map(|(answer, _, _)| answer))
    }
}

/// The rules' decision on the row read (`rules::step`, with the server's clock in µs as the
/// fencing floor): the reply, the row to write, whom to wake.
fn decide(
    op: Operation,
    row: &PgRow,
    ask: Ask<'_, String, String>,
) -> Result<(Reply, Option<Columns>, Wake)> {
    let now_us: i64 = row.try_get(0).map_err(|e| protocol(op, e))?;
    let now_us = u64::try_from(now_us).map_err(|_| protocol(op, "a clock before 1970"))?;
    let clock = Clock::nanos(now_us.saturating_mul(1000));
    let stored = read(op, row)?;
    let mut ask = ask;
    if let Ask::Obtain(obtain) = &mut ask {
        obtain.fencing_floor = now_us;
    }
    let d = rules::step(stored.as_ref(), clock, ask);
    let reply = d
        .outcome
        .try_into_reply(NAME, |json: &String| parse_holder(op, json))?;
    Ok((reply, d.write.map(|r| Columns::of(&r, now_us)), d.wake))
}

fn corrupt(op: Operation, what: &str) -> Error {
    lock_sql::errors::corrupt(NAME, op, what)
}

/// The record in the row read (columns 1..), `None` without a row.
fn read(op: Operation, row: &PgRow) -> Result<Option<Stored>> {
    let get = || -> std::result::Result<_, sqlx::Error> {
        Ok((
            row.try_get::<Option<String>, _>(1)?,
            row.try_get::<Option<String>, _>(2)?,
            row.try_get::<Option<String>, _>(3)?,
            row.try_get::<Option<i64>, _>(4)?,
            row.try_get::<Option<i32>, _>(5)?,
            row.try_get::<Option<i64>, _>(6)?,
            row.try_get::<Option<i64>, _>(7)?,
            row.try_get::<Option<String>, _>(8)?,
            row.try_get::<Option<String>, _>(9)?,
        ))
    };
    let (state, token, holder, fencing, holds, expires, forget, shares, writer) =
        get().map_err(|e| protocol(op, e))?;
    let Some(state) = state else {
        return Ok(None);
    };
    let us = |v: Option<i64>, what| {
        v.and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| corrupt(op, what))
    };
    let columns = Columns {
        state: Columns::state_word(&state).ok_or_else(|| corrupt(op, "state"))?,
        token,
        holder,
        fencing: us(fencing, "fencing")?,
        holds: holds.and_then(|h| u32::try_from(h).ok()),
        expires_us: us(expires, "time")?,
        forget_us: us(forget, "time")?,
        shares,
        writer,
    };
    columns
        .into_record()
        .map(Some)
        .map_err(|what| corrupt(op, what))
}
