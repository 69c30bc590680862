//! What message 1 of a transaction read, decoded: each row's record as the rules see it,
//! and the server's clock.

use lock_core::backend::rules::columns::Columns;
use lock_core::backend::rules::{Clock, Record};
use lock_core::{Operation, Result};
use sqlx::mysql::MySqlRow;
use sqlx::Row as _;

use crate::error::{corrupt, protocol};

/// A record as the rules see it here: the token's digest, the holder info as JSON, times in
/// nanoseconds of the server's clock (µs in the row, exact).
pub(crate) type Stored = Record<String, String>;

/// What message 1 of a transaction read: the rows (key and record), and the server's
/// clock in µs, read after every row lock was granted.
pub(crate) struct Read {
    pub(crate) rows: Vec<(String, Stored)>,
    pub(crate) now_us: u64,
}

impl Read {
    /// Decodes message 1's rows: records (ten columns) then the clock (one column, last).
    pub(crate) fn decode(op: Operation, rows: &[MySqlRow]) -> Result<Self> {
        let Some((clock, records)) = rows.split_last() else {
            return Err(protocol(op, "no rows where the clock was expected"));
        };
        let now: i64 = clock.try_get(0).map_err(|e| protocol(op, e))?;
        let now_us = u64::try_from(now).map_err(|_| protocol(op, "a clock before 1970"))?;
        let rows = records
            .iter()
            .map(|row| record(op, row))
            .collect::<Result<_>>()?;
        Ok(Read { rows, now_us })
    }

    /// The clock as the rules take it.
    pub(crate) fn clock(&self) -> Clock {
        Clock::nanos(self.now_us.saturating_mul(1000))
    }

    /// The record of `key`, if its row was read.
    pub(crate) fn of(&self, key: &str) -> Option<&Stored> {
        self.rows.iter().find(|(k, _)| k == key).map(|(_, r)| r)
    }
}

/// One row: the key and its record.
fn record(op: Operation, row: &MySqlRow) -> Result<(String, Stored)> {
    let text = |i: usize| -> Result<Option<String>> {
        let bytes: Option<Vec<u8>> = row.try_get(i).map_err(|e| protocol(op, e))?;
        bytes
            .map(String::from_utf8)
            .transpose()
            .map_err(|_| corrupt(op, "text"))
    };
    let number = |i: usize, what: &str| -> Result<Option<u64>> {
        let n: Option<i64> = row.try_get(i).map_err(|e| protocol(op, e))?;
        n.map(|n| u64::try_from(n).map_err(|_| corrupt(op, what)))
            .transpose()
    };
    let key = text(0)?.ok_or_else(|| corrupt(op, "key"))?;
    let state = text(1)?.ok_or_else(|| corrupt(op, "state"))?;
    let columns = Columns {
        state: Columns::state_word(&state).ok_or_else(|| corrupt(op, "state"))?,
        token: text(2)?,
        holder: text(3)?,
        fencing: number(4, "fencing")?.ok_or_else(|| corrupt(op, "fencing"))?,
        holds: number(5, "hold count")?.and_then(|h| u32::try_from(h).ok()),
        expires_us: number(6, "time")?.ok_or_else(|| corrupt(op, "time"))?,
        forget_us: number(7, "time")?.ok_or_else(|| corrupt(op, "time"))?,
        shares: text(8)?,
        writer: text(9)?,
    };
    let record = columns.into_record().map_err(|what| corrupt(op, what))?;
    Ok((key, record))
}
