//! What message 1 of a decision in the client read (`storage.rs`), decoded: the key's row
//! as the rules see it. The row's shape is in `schema.sql`'s comment on the table.

use lock_core::backend::rules::columns::Columns;
use lock_core::backend::rules::Record;
use lock_core::{Error, Operation, Result};
use sqlx::postgres::PgRow;
use sqlx::Row as _;

use crate::error::protocol;
use crate::NAME;

/// A record as the rules see it here: the token's digest, the holder info as JSON, times in
/// nanoseconds of the server's clock (µs in the row, exact).
pub(crate) type Stored = Record<String, String>;

fn corrupt(op: Operation, what: &str) -> Error {
    lock_sql::errors::corrupt(NAME, op, what)
}

/// The record in the row read (columns 1..), `None` without a row.
pub(crate) fn record(op: Operation, row: &PgRow) -> Result<Option<Stored>> {
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
