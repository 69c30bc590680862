//! The lock table: made (or only checked, with `migrate=false`) before the first
//! transaction, and made again if it vanishes under a running backend.

use lock_core::{Error, ErrorKind, Operation, Result};
use sqlx::Row;

use crate::error::{has_number, map_error, protocol};
use crate::exec::{fetch_rows, Db};
use crate::NAME;

/// The columns of a lock table and the base types each may have (MySQL 8 shows `bigint`,
/// MariaDB `bigint(20)`: the width is ignored; under `sql_mode = ORACLE` MariaDB makes a
/// `BLOB` a `longblob`).
const EXPECTED: [(&str, &[&str]); 10] = [
    ("key", &["varbinary"]),
    ("state", &["varbinary"]),
    ("token", &["varbinary"]),
    ("holder", BLOBS),
    ("fencing", &["bigint"]),
    ("holds", &["bigint"]),
    ("expires_us", &["bigint"]),
    ("forget_us", &["bigint"]),
    ("shares", &["longblob"]),
    ("writer", BLOBS),
];

const BLOBS: &[&str] = &["blob", "mediumblob", "longblob"];

impl Db {
    /// `MySqlBackend::migrate`, whose docs say what it does, by the deadline.
    pub(crate) async fn migrate(&self) -> Result<()> {
        let deadline = self.pooled.deadline_from_now();
        let migrate = self.schema.again(|| self.migrate_now(Operation::Connect));
        self.pooled
            .within(Operation::Connect, deadline, migrate)
            .await?
    }

    /// The migration; the caller holds the schema's turn.
    async fn migrate_now(&self, op: Operation) -> Result<()> {
        // One idempotent statement, committed by the server on its own (DDL).
        let mut conn = self
            .pooled
            .connection(self.pooled.deadline_from_now())
            .await
            .map_err(|e| map_error(op, e))?;
        let migration = self.names.migration();
        fetch_rows(&mut conn, &migration)
            .await
            .map_err(|e| map_error(op, e))?;
        drop(conn);
        self.check_shape(op).await?;
        self.make_procedure(op).await
    }

    /// Makes the table's procedure if missing (`CREATE PROCEDURE IF NOT EXISTS`, DDL that
    /// the server commits on its own) under a pinned `sql_mode`, which the routine keeps
    /// whatever the sessions that call it set. When the server refuses (no CREATE ROUTINE
    /// privilege; a MySQL before 8.0.29, which knows no `IF NOT EXISTS` here), the backend
    /// decides every operation in the client, two round trips instead of one, and says so
    /// once; only a failure to reach the server fails the migration. Made or found, it is
    /// used again by a backend that had fallen back.
    async fn make_procedure(&self, op: Operation) -> Result<()> {
        let conn = self
            .pooled
            .connection(self.pooled.deadline_from_now())
            .await
            .map_err(|e| map_error(op, e))?;
        // A connection of its own, closed after: its sql_mode never reaches the pool.
        let mut conn = conn.detach();
        let made = fetch_rows(
            &mut conn,
            "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'",
        )
        .await;
        let made = match made {
            Ok(_) => fetch_rows(&mut conn, &self.names.procedure_migration()).await,
            Err(e) => Err(e),
        };
        drop(conn);
        match made {
            Ok(_) => {
                // Made or found: calls use it again after a fallback (a procedure dropped
                // under a running backend, then migrated back).
                self.procedure
                    .store(self.wants_procedure, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            // ER_SP_ALREADY_EXISTS: another migration made it meanwhile.
            Err(e) if e.as_database_error().is_some() && !has_number(&e, 1304) => {
                self.no_procedure(&e);
                Ok(())
            }
            Err(e) if e.as_database_error().is_some() => Ok(()),
            Err(e) => Err(map_error(op, e)),
        }
    }

    /// Makes (or, with `migrate=false`, checks) the table once, its errors reported as part
    /// of `op`, the call that needed it; calls that come meanwhile wait for that one and go
    /// on ([`lock_sql::SchemaOnce`]).
    pub(crate) async fn ensure_schema(&self, op: Operation) -> Result<()> {
        let (migrate, check) = (|| self.migrate_now(op), || self.check_shape(op));
        self.schema
            .migrate_or_check(self.auto_migrate, migrate, check)
            .await
    }

    /// Checks, without changing anything, that the table has the columns of a lock table
    /// and is InnoDB (another engine has no row locks or transactions).
    async fn check_shape(&self, op: Operation) -> Result<()> {
        let mut conn = self
            .pooled
            .connection(self.pooled.deadline_from_now())
            .await
            .map_err(|e| map_error(op, e))?;
        let query = self.names.shape_query();
        let rows = fetch_rows(&mut conn, &query)
            .await
            .map_err(|e| map_error(op, e))?;
        let found: Vec<(String, String, String)> = rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(|e| protocol(op, e))?;
        if found.is_empty() {
            return Err(self.missing_table());
        }
        let mut wrong = None;
        for (column, types) in EXPECTED {
            match found.iter().find(|(c, _, _)| c == column) {
                Some((_, t, _)) if types.iter().any(|ty| t.split('(').next() == Some(ty)) => {}
                Some((_, t, _)) => {
                    wrong = Some(format!("column {column} is {t}, not {}", types[0]));
                }
                None => wrong = Some(format!("it has no column {column}")),
            }
            if wrong.is_some() {
                break;
            }
        }
        let engine = &found[0].2;
        if wrong.is_none() && !engine.eq_ignore_ascii_case("innodb") {
            wrong = Some(format!(
                "its engine is {engine}, which has no row locks or transactions (InnoDB has)"
            ));
        }
        match wrong {
            None => Ok(()),
            Some(what) => Err(Error::new(
                ErrorKind::Config,
                NAME,
                op,
                format!(
                    "table {} exists but is not a lock table: {what}; choose another table name \
                     (table=, MySqlBuilder::table), or drop that table",
                    self.names.table
                ),
            )),
        }
    }

    pub(crate) fn missing_table(&self) -> Error {
        Error::new(
            ErrorKind::Config,
            NAME,
            Operation::Connect,
            format!(
                "the lock table {} is missing, and this backend does not create it \
                 (migrate=false): run migrate() once as a user that may create it, then \
                 grant this user SELECT, INSERT, UPDATE, DELETE on it and EXECUTE on the \
                 procedure {}",
                self.names.table, self.names.procedure
            ),
        )
    }
}
