//! sqlx errors turned into the one `lock_core::Error`, with what to do about them.

use lock_core::{Error, ErrorKind, Operation};

use crate::NAME;

/// Postgres error codes the backend reacts to.
pub(crate) mod code {
    /// The table or the function is gone (dropped under a running backend).
    pub(crate) const UNDEFINED_TABLE: &str = "42P01";
    pub(crate) const UNDEFINED_FUNCTION: &str = "42883";
    /// The transaction is read-only: a hot standby, or `default_transaction_read_only`.
    pub(crate) const READ_ONLY: &str = "25006";
}

/// Whether `e` says the lock table or its function does not exist (any more).
pub(crate) fn is_missing_schema(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == code::UNDEFINED_TABLE || c == code::UNDEFINED_FUNCTION)
}

/// Whether `e` says the connection is no use any more: gone (closed, terminated, cut, timed
/// out), or on a server that has become read-only (a standby after a failover: a fresh
/// connection may reach the new primary).
pub(crate) fn is_broken_connection(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("57P0") || c.starts_with("08") || c == code::READ_ONLY),
        _ => false,
    }
}

pub(crate) fn map_error(op: Operation, e: sqlx::Error) -> Error {
    let (kind, message) = match &e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let (kind, hint) = match code.as_str() {
                "28P01" | "28000" => (
                    ErrorKind::PermissionDenied,
                    "check the user and password in the Postgres URL",
                ),
                "42501" => (
                    ErrorKind::PermissionDenied,
                    "the user lacks a privilege on the lock table, its schema or function; \
                     grant it, or run migrate() as a user that may create them",
                ),
                code::READ_ONLY => (
                    ErrorKind::Unavailable,
                    "the server only accepts read-only transactions: it is a hot standby (after \
                     a failover, point the URL at the new primary) or default_transaction_read_only \
                     is on for this role or database (turn it off for the lock user); locks need \
                     a writable primary",
                ),
                // 55P03: a lock wait ran into `lock_timeout`, which the function sets to
                // the deadline.
                "57014" | "55P03" => (
                    ErrorKind::Unavailable,
                    "the statement ran into the backend's deadline (PostgresBuilder::timeout / timeout=), \
                     most likely queued behind other statements on the same key; it is safe to \
                     retry",
                ),
                "40001" => (
                    ErrorKind::Unavailable,
                    "the operation was rolled back because its row changed under it; it is safe \
                     to retry",
                ),
                // A prepared statement the connection should have, missing or already
                // there: a proxy hands the statements of one session to others.
                "26000" | "42P05" => (
                    ErrorKind::Config,
                    "a transaction-pooling proxy that cannot carry prepared statements sits \
                     between the backend and the server (PgBouncer before 1.21, or \
                     max_prepared_statements = 0): set statements=simple in the URL \
                     (PostgresBuilder::statements(Statements::Simple)), or upgrade the proxy",
                ),
                "3D000" => (
                    ErrorKind::Config,
                    "the database does not exist: create it, or fix the URL",
                ),
                "3F000" => (
                    ErrorKind::Config,
                    "the schema does not exist: run migrate(), or fix the schema name",
                ),
                c if c.starts_with("08")
                    || c.starts_with("57P")
                    || c.starts_with("53")
                    || c == "40001"
                    || c == "40P01" =>
                {
                    (
                        ErrorKind::Unavailable,
                        "the server dropped or refused the call; it is safe to retry",
                    )
                }
                _ => (ErrorKind::Protocol, "unexpected error from Postgres"),
            };
            (kind, format!("{} (SQLSTATE {code}); {hint}", db.message()))
        }
        _ => lock_sql::errors::transport(&e, &URL)
            .unwrap_or_else(|| (ErrorKind::Protocol, e.to_string())),
    };
    Error::new(kind, NAME, op, message).with_source(e)
}

/// How a Postgres URL looks, for the errors that say to fix it.
const URL: lock_sql::errors::UrlShape = lock_sql::errors::UrlShape {
    database: "Postgres",
    form: "postgres://user[:password]@host[:port]/database",
    tls_option: "sslmode",
    port: 5432,
};

/// A reply row that does not have the shape the function promises.
pub(crate) fn protocol(op: Operation, what: impl std::fmt::Display) -> Error {
    lock_sql::errors::protocol(NAME, op, what)
}
