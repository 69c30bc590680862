//! Fenced writes to Postgres (see `lock_core::fence`): a fence table keeps the highest
//! fencing token that wrote to each resource, and [`PgFence::check`], run inside the
//! caller's own transaction before its write, refuses a stale token in one statement
//! (`sql/fence.sql`). The write and the check commit together or not at all, and the fence
//! row stays locked until then, so no newer holder's check can come between.
//!
//! ```no_run
//! use lock_core::{ErrorKind, Fencing};
//! use lock_postgres::fence::PgFence;
//!
//! # async fn run(pool: sqlx::PgPool, fencing: Fencing) -> Result<(), Box<dyn std::error::Error>> {
//! let fence = PgFence::new();
//! fence.migrate(&pool).await?; // once, at start-up
//! let mut tx = pool.begin().await?;
//! fence.check(&mut tx, "account:17", fencing).await?; // StaleToken: roll back, stop
//! sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 17")
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

use lock_core::fence::stale;
use lock_core::{Error, ErrorKind, Fencing, Operation, Result};
use sqlx::{PgConnection, PgPool, Row as _};

/// The store's name in errors.
const NAME: &str = "postgres fence";

/// The statements, one file (read it top to bottom).
const SQL: &str = include_str!("sql/fence.sql");

/// A fence table: `distlock_fence` in the connection's schema by default.
#[derive(Debug, Clone)]
pub struct PgFence {
    migrate: String,
    check: String,
    highest: String,
}

impl Default for PgFence {
    fn default() -> Self {
        Self::in_table(None, "distlock_fence").expect("the default name is valid")
    }
}

impl PgFence {
    /// The fence table `distlock_fence`, in the first schema of the connection's
    /// `search_path`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The fence table `schema.table` (each a plain lowercase identifier:
    /// `[a-z_][a-z0-9_]{0,47}`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for another name.
    pub fn table(schema: &str, table: &str) -> Result<Self> {
        Self::in_table(Some(schema), table)
    }

    fn in_table(schema: Option<&str>, table: &str) -> Result<Self> {
        let plain = lock_sql::sql_file::plain_identifier;
        if !plain(table) || !schema.is_none_or(plain) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                NAME,
                Operation::Validate,
                "a fence table's schema and name are plain lowercase identifiers \
                 ([a-z_][a-z0-9_]{0,47})",
            ));
        }
        let name_sql = match schema {
            Some(schema) => format!("\"{schema}\".\"{table}\""),
            None => format!("\"{table}\""),
        };
        let statement = |name: &str| {
            lock_sql::sql_file::statement(SQL, name)
                .expect("every statement is in fence.sql")
                .replace("{table}", &name_sql)
        };
        Ok(PgFence {
            migrate: statement("migrate"),
            check: statement("check"),
            highest: statement("highest"),
        })
    }

    /// Creates the fence table if missing. Idempotent; concurrent calls take turns (two
    /// `CREATE TABLE IF NOT EXISTS` at once can both try to create it, and one fails), on
    /// a transaction-scoped advisory lock.
    ///
    /// # Errors
    /// The database's error ([`ErrorKind::Unavailable`], or [`ErrorKind::PermissionDenied`]
    /// without the right to create it).
    pub async fn migrate(&self, pool: &PgPool) -> Result<()> {
        let mut tx = pool.begin().await.map_err(db_error)?;
        sqlx::query("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))")
            .bind(&self.migrate)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        sqlx::query(&self.migrate)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    /// Checks `token` for `resource` and records it, inside the caller's transaction
    /// (`&mut tx`): call it before the write it guards, and commit both together.
    ///
    /// # Errors
    /// [`ErrorKind::StaleToken`] when a higher token wrote to `resource`: roll back, and
    /// stop acting as the lock's holder; [`ErrorKind::InvalidInput`] for a token above
    /// `i64::MAX` (no backend of this workspace hands one out); the database's error.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the transaction in an unknown state: roll it back.
    pub async fn check(&self, tx: &mut PgConnection, resource: &str, token: Fencing) -> Result<()> {
        let presented = i64::try_from(token.0).map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput,
                NAME,
                Operation::Fence,
                format!("fencing token {token} does not fit the fence table's bigint"),
            )
        })?;
        let written = sqlx::query(&self.check)
            .bind(resource)
            .bind(presented)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        if written.is_some() {
            return Ok(());
        }
        let highest: i64 = sqlx::query(&self.highest)
            .bind(resource)
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(db_error)?;
        let highest = Fencing(u64::try_from(highest).unwrap_or(0));
        Err(stale(NAME, resource, token, highest))
    }

    /// The highest token that wrote to `resource`, if any.
    ///
    /// # Errors
    /// The database's error.
    pub async fn highest(&self, pool: &PgPool, resource: &str) -> Result<Option<Fencing>> {
        let row = sqlx::query(&self.highest)
            .bind(resource)
            .fetch_optional(pool)
            .await
            .map_err(db_error)?;
        row.map(|row| row.try_get::<i64, _>(0))
            .transpose()
            .map(|t| t.map(|t| Fencing(u64::try_from(t).unwrap_or(0))))
            .map_err(db_error)
    }
}

/// What a role without the fence's privileges is told to do.
const PRIVILEGES: &str = "the role lacks a privilege on the fence table: grant it SELECT, \
    INSERT and UPDATE there (and USAGE on its schema), and CREATE to the role that runs \
    migrate()";

fn db_error(e: sqlx::Error) -> Error {
    let denied = matches!(&e, sqlx::Error::Database(d) if d.code().as_deref() == Some("42501"));
    let (kind, message) = match denied {
        true => (ErrorKind::PermissionDenied, format!("{e}; {PRIVILEGES}")),
        false => (ErrorKind::Unavailable, e.to_string()),
    };
    Error::new(kind, NAME, Operation::Fence, message).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_statement_is_read_whole_from_the_file() {
        let f = PgFence::table("s", "t").unwrap();
        assert!(
            f.migrate
                .starts_with("CREATE TABLE IF NOT EXISTS \"s\".\"t\""),
            "{}",
            f.migrate
        );
        assert!(
            f.check.starts_with("INSERT INTO \"s\".\"t\" AS f"),
            "{}",
            f.check
        );
        assert!(f.check.ends_with("RETURNING f.token"), "{}", f.check);
        assert_eq!(
            f.highest,
            "SELECT token FROM \"s\".\"t\" WHERE resource = $1"
        );
    }
}
