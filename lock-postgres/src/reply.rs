//! The function's answer: one row per operation, decoded into lock-sql's [`Reply`], which
//! turns it into the contract's outcomes.

use std::time::Duration;

use lock_core::{Operation, Result};
pub(crate) use lock_sql::reply::{Reply, Word};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::protocol;
use crate::NAME;

/// Decodes one row of the function's answer (`o_outcome`, `o_ms`, `o_holder`, `o_fencing`,
/// `o_holds` in `schema.sql`).
pub(crate) fn decode(op: Operation, row: &PgRow) -> Result<Reply> {
    let word: Option<String> = row.try_get(0).map_err(|e| protocol(op, e))?;
    let mut reply = Reply::new(NAME, op, &word.unwrap_or_default())?;
    let mut fill = || -> std::result::Result<(), sqlx::Error> {
        let ms: Option<i64> = row.try_get(1)?;
        reply.remaining = ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
        reply.holder = row.try_get(2)?;
        reply.fencing = row.try_get(3)?;
        reply.holds = row.try_get::<Option<i32>, _>(4)?.map(i64::from);
        Ok(())
    };
    fill().map_err(|e| protocol(op, e))?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::Word;

    /// Every outcome word the function writes decodes; another word does not. (A word the
    /// decoder missed was a protocol error on every waiter's listing, `wait`.)
    #[test]
    fn every_word_the_function_writes_decodes() {
        let schema = include_str!("sql/schema.sql");
        let mut words = vec!["wait", "unwait"];
        for line in schema.lines().filter(|l| l.contains("o_outcome :=")) {
            let quoted = line.split('\'').skip(1).step_by(2);
            // `CASE WHEN phase = 'live' THEN …`: the phase is not an outcome.
            words.extend(quoted.filter(|w| *w != "live"));
        }
        assert!(words.len() > 12, "{words:?}");
        for word in words {
            assert!(Word::parse(word).is_some(), "{word:?} does not decode");
        }
        assert_eq!(Word::parse("bogus"), None);
        assert_eq!(Word::parse(""), None);
    }
}
