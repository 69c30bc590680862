//! The lock table and its functions: made (or only checked, with `migrate=false`) before
//! the first statement, and made again if they vanish under a running backend.

use lock_core::{Error, ErrorKind, Operation, Result};
use sqlx::Row;

use crate::error::{map_error, protocol};
use crate::exec::{fetch_rows, Db};
use crate::NAME;

impl Db {
    /// `schema.table` of the lock table.
    pub(crate) fn table(&self) -> String {
        format!("{}.{}", self.names.schema, self.names.table)
    }

    /// `PostgresBackend::migrate`, whose docs say what it does, by the deadline.
    pub(crate) async fn migrate(&self) -> Result<()> {
        let deadline = self.pooled.deadline_from_now();
        let migrate = self.schema.again(|| self.migrate_now(Operation::Connect));
        self.pooled
            .within(Operation::Connect, deadline, migrate)
            .await?
    }

    /// The migration; the caller holds the schema's turn.
    async fn migrate_now(&self, op: Operation) -> Result<()> {
        tracing::debug!(table = %self.table(), "migrating the lock table and its functions");
        let migration = self.names.migration();
        let mut conn = self
            .pooled
            .connection(self.pooled.deadline_from_now())
            .await
            .map_err(|e| map_error(op, e))?;
        // The migration is BEGIN ... COMMIT: a connection left in the middle of it by a
        // cancelled future must not go back to the pool. Closing it after a migration that
        // finished costs one reconnect, once per backend.
        conn.close_on_drop();
        sqlx::Executor::execute(&mut *conn, migration.as_str())
            .await
            .map_err(|e| map_error(op, e))?;
        drop(conn);
        self.check_shape(op).await
    }

    async fn check_shape(&self, op: Operation) -> Result<()> {
        const EXPECTED: [(&str, &str); 12] = [
            ("key", "text"),
            ("state", "text"),
            ("token", "text"),
            ("holder", "text"),
            ("fencing", "bigint"),
            ("holds", "integer"),
            ("expires_at", "timestamp with time zone"),
            ("forget_at", "timestamp with time zone"),
            ("waiters", "integer"),
            ("waiting", "jsonb"),
            ("shares", "jsonb"),
            ("writer", "jsonb"),
        ];
        let query = self.names.shape_query();
        let mut conn = self
            .pooled
            .connection(self.pooled.deadline_from_now())
            .await
            .map_err(|e| map_error(op, e))?;
        let rows = fetch_rows(&mut conn, &query)
            .await
            .map_err(|e| map_error(op, e))?;
        let found: Vec<(String, String)> = rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(|e| map_error(op, e))?;
        if found.is_empty() {
            return Err(self.missing_schema());
        }
        for (column, ty) in EXPECTED {
            match found.iter().find(|(c, _)| c == column) {
                Some((_, t)) if t == ty => {}
                other => {
                    let what = match other {
                        Some((_, t)) => format!("column {column} is {t}, not {ty}"),
                        None => format!("it has no column {column}"),
                    };
                    return Err(Error::new(
                        ErrorKind::Config,
                        NAME,
                        op,
                        format!(
                            "table {} exists but is not a lock table: {what}; choose another \
                             table name (table=schema.name, PostgresBuilder::table), or drop that table",
                            self.table()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Makes (or, with `migrate=false`, checks) the table and functions once, its errors
    /// reported as part of `op`, the call that needed it: calls that come meanwhile wait
    /// for that one and go on, rather than each migrate again in turn.
    pub(crate) async fn ensure_schema(&self, op: Operation) -> Result<()> {
        let (migrate, check) = (|| self.migrate_now(op), || self.verify(op));
        self.schema
            .migrate_or_check(self.auto_migrate, migrate, check)
            .await
    }

    /// Checks, without changing anything, that the table has the right shape and the
    /// function of this version exists.
    async fn verify(&self, op: Operation) -> Result<()> {
        self.check_shape(op).await?;
        let query = format!(
            "SELECT pg_catalog.to_regprocedure({}) IS NOT NULL",
            crate::sql::text(&self.names.function_signature())
        );
        let mut conn = self
            .pooled
            .connection(self.pooled.deadline_from_now())
            .await
            .map_err(|e| map_error(op, e))?;
        let rows = fetch_rows(&mut conn, &query)
            .await
            .map_err(|e| map_error(op, e))?;
        let row = rows
            .last()
            .ok_or_else(|| protocol(op, "the function check answered no row"))?;
        let found: bool = row.try_get(0).map_err(|e| protocol(op, e))?;
        match found {
            true => Ok(()),
            false => Err(self.missing_schema()),
        }
    }

    pub(crate) fn missing_schema(&self) -> Error {
        Error::new(
            ErrorKind::Config,
            NAME,
            Operation::Connect,
            format!(
                "the lock table {} or its function {} is missing (or from another version), \
                 and this backend does not create them (migrate=false): run migrate() once as \
                 a role that may create them, then grant this role USAGE on the schema, \
                 SELECT, INSERT, UPDATE, DELETE on the table and EXECUTE on the functions",
                self.table(),
                self.names.function_signature()
            ),
        )
    }
}
