//! Fenced writes to MySQL and MariaDB (see `lock_core::fence`): a fence table keeps the
//! highest fencing token that wrote to each resource, and [`MySqlFence::check`], run inside
//! the caller's own transaction before its write, refuses a stale token
//! (`sql/fence.sql`: an upsert that keeps the higher token and locks the row, then a
//! locking read of it, which sees the newest token whatever the transaction read before). The write and the check commit together or not at all, and the fence row stays
//! locked until then, so no newer holder's check can come between.
//!
//! ```no_run
//! use lock_core::Fencing;
//! use lock_mysql::fence::MySqlFence;
//!
//! # async fn run(pool: sqlx::MySqlPool, fencing: Fencing) -> Result<(), Box<dyn std::error::Error>> {
//! let fence = MySqlFence::new();
//! fence.migrate(&pool).await?; // once, at start-up
//! let mut tx = pool.begin().await?;
//! fence.check(&mut tx, "account:17", fencing).await?; // StaleToken: roll back, stop
//! sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 17")
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

use lock_core::fence::{admits, stale};
use lock_core::{Error, ErrorKind, Fencing, Operation, Result};
use sqlx::{MySqlConnection, MySqlPool, Row as _};

/// The store's name in errors.
const NAME: &str = "mysql fence";

/// The statements, one file (read it top to bottom).
const SQL: &str = include_str!("sql/fence.sql");

/// The longest resource name, in bytes (the table's key).
pub const MAX_RESOURCE: usize = 767;

/// A fence table: `distlock_fence` in the connection's database by default.
#[derive(Debug, Clone)]
pub struct MySqlFence {
    migrate: String,
    raise: String,
    checked: String,
    highest: String,
}

impl Default for MySqlFence {
    fn default() -> Self {
        Self::table("distlock_fence").expect("the default name is valid")
    }
}

impl MySqlFence {
    /// The fence table `distlock_fence` in the connection's database.
    pub fn new() -> Self {
        Self::default()
    }

    /// The fence table `table` (a plain lowercase identifier: `[a-z_][a-z0-9_]{0,47}`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for another name.
    pub fn table(table: &str) -> Result<Self> {
        if !lock_sql::sql_file::plain_identifier(table) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                NAME,
                Operation::Validate,
                "a fence table's name is a plain lowercase identifier ([a-z_][a-z0-9_]{0,47})",
            ));
        }
        let quoted = format!("`{table}`");
        let statement = |name: &str| {
            lock_sql::sql_file::statement(SQL, name)
                .expect("every statement is in fence.sql")
                .replace("{table}", &quoted)
        };
        Ok(MySqlFence {
            migrate: statement("migrate"),
            raise: statement("raise"),
            checked: statement("checked"),
            highest: statement("highest"),
        })
    }

    /// Creates the fence table if missing. Idempotent.
    ///
    /// # Errors
    /// The database's error ([`ErrorKind::Unavailable`], or [`ErrorKind::PermissionDenied`]
    /// without the right to create it).
    pub async fn migrate(&self, pool: &MySqlPool) -> Result<()> {
        sqlx::query(&self.migrate)
            .execute(pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Checks `token` for `resource` and records it, inside the caller's transaction
    /// (`&mut tx`): call it before the write it guards, and commit both together.
    ///
    /// # Errors
    /// [`ErrorKind::StaleToken`] when a higher token wrote to `resource`: roll back, and
    /// stop acting as the lock's holder; [`ErrorKind::InvalidInput`] for a resource name
    /// longer than [`MAX_RESOURCE`] bytes; the database's error.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the transaction in an unknown state: roll it back.
    pub async fn check(
        &self,
        tx: &mut MySqlConnection,
        resource: &str,
        token: Fencing,
    ) -> Result<()> {
        if resource.len() > MAX_RESOURCE {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                NAME,
                Operation::Fence,
                format!(
                    "a resource name of {} bytes is longer than the fence table's {MAX_RESOURCE}",
                    resource.len()
                ),
            ));
        }
        sqlx::query(&self.raise)
            .bind(resource.as_bytes())
            .bind(token.0)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let highest: u64 = sqlx::query(&self.checked)
            .bind(resource.as_bytes())
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(db_error)?;
        let highest = Fencing(highest);
        if admits(Some(highest), token) {
            Ok(())
        } else {
            Err(stale(NAME, resource, token, highest))
        }
    }

    /// The highest token that wrote to `resource`, if any.
    ///
    /// # Errors
    /// The database's error.
    pub async fn highest(&self, pool: &MySqlPool, resource: &str) -> Result<Option<Fencing>> {
        let row = sqlx::query(&self.highest)
            .bind(resource.as_bytes())
            .fetch_optional(pool)
            .await
            .map_err(db_error)?;
        row.map(|row| row.try_get::<u64, _>(0).map(Fencing))
            .transpose()
            .map_err(db_error)
    }
}

/// What a user without the fence's privileges is told to do.
const PRIVILEGES: &str = "the user lacks a privilege on the fence table: grant it SELECT, \
    INSERT and UPDATE there, and CREATE to the user that runs migrate()";

/// The server's error by its number (a permission, a deadlock, a dropped connection: see
/// `crate::error`), never by SQLSTATE alone: `42000` is a syntax error as well as a
/// missing privilege.
fn db_error(e: sqlx::Error) -> Error {
    let number = e
        .as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .map(sqlx::mysql::MySqlDatabaseError::number);
    let (kind, message) = match number.map(crate::error::kind_of) {
        Some((ErrorKind::PermissionDenied, _)) => {
            (ErrorKind::PermissionDenied, format!("{e}; {PRIVILEGES}"))
        }
        Some((kind, _)) => (kind, e.to_string()),
        None => (ErrorKind::Unavailable, e.to_string()),
    };
    Error::new(kind, NAME, Operation::Fence, message).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_statement_is_read_whole_from_the_file() {
        let f = MySqlFence::table("t").unwrap();
        assert!(
            f.migrate.starts_with("CREATE TABLE IF NOT EXISTS `t`"),
            "{}",
            f.migrate
        );
        assert!(
            f.raise.ends_with("GREATEST(token, VALUES(token))"),
            "{}",
            f.raise
        );
        assert_eq!(f.highest, "SELECT token FROM `t` WHERE resource = ?");
        assert_eq!(
            f.checked,
            "SELECT token FROM `t` WHERE resource = ? FOR UPDATE"
        );
        assert_eq!(
            MySqlFence::table("Bad").unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
}
