//! sqlx errors turned into the one `lock_core::Error`, with what to do about them.

use lock_core::{Error, ErrorKind, Operation};
use sqlx::mysql::MySqlDatabaseError;

use crate::NAME;

/// Server error numbers the backend reacts to (the same in MariaDB and MySQL).
pub(crate) mod number {
    /// The lock table is gone (dropped under a running backend).
    pub(crate) const NO_SUCH_TABLE: u16 = 1146;
    /// `--read-only` (a replica, or a primary set read-only).
    pub(crate) const READ_ONLY: u16 = 1290;
    /// A read-only transaction (`transaction_read_only` / `tx_read_only`).
    pub(crate) const READ_ONLY_TRANSACTION: u16 = 1792;
    /// InnoDB in read-only mode (`innodb_read_only`).
    pub(crate) const READ_ONLY_ENGINE: u16 = 1836;
}

/// The server's error number of `e`, if the server answered one.
fn server_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number)
}

/// Whether `e` says the lock table does not exist (any more).
pub(crate) fn is_missing_table(e: &sqlx::Error) -> bool {
    server_number(e) == Some(number::NO_SUCH_TABLE)
}

/// Whether the server answered `e` with error `number`.
pub(crate) fn has_number(e: &sqlx::Error, number: u16) -> bool {
    server_number(e) == Some(number)
}

/// Whether `e` says the table's procedure is missing (ER_SP_DOES_NOT_EXIST: never made, or
/// dropped) or may not be called by this user (ER_PROCACCESS_DENIED_ERROR, no EXECUTE).
pub(crate) fn is_unusable_procedure(e: &sqlx::Error) -> bool {
    matches!(server_number(e), Some(1305 | 1370))
}

/// Whether `e` says the connection is no use any more: gone (closed, killed, cut, timed
/// out), or on a server that has become read-only (a replica after a failover: a fresh
/// connection may reach the new primary).
pub(crate) fn is_broken_connection(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        _ => server_number(e).is_some_and(|n| {
            matches!(
                kind_of(n),
                (ErrorKind::Unavailable, Hint::Dropped | Hint::ReadOnly)
            )
        }),
    }
}

/// Why an error number falls in its kind: each says what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hint {
    Password,
    SocketOnly,
    Privilege,
    ReadOnly,
    Deadline,
    Deadlock,
    Dropped,
    NoDatabase,
    NotLockTable,
    Other,
}

impl Hint {
    fn says(self) -> &'static str {
        match self {
            Hint::Password => "check the user and password in the MySQL URL",
            Hint::SocketOnly => {
                "the server lets this user in through its local socket only (unix_socket \
                 authentication, as Debian's MariaDB does for root), never over TCP with a \
                 password: use a user created for the locks (CREATE USER locks@'%' \
                 IDENTIFIED BY '...'; GRANT ALL ON db.* TO locks@'%') in the MySQL URL"
            }
            Hint::Privilege => {
                "the user lacks a privilege on the lock table; grant SELECT, INSERT, UPDATE, \
                 DELETE on it, or run migrate() as a user that may create it"
            }
            Hint::ReadOnly => {
                "the server is read-only: it is a replica (after a failover, point the URL at \
                 the new primary) or read_only, tx_read_only or transaction_read_only is set for it; locks \
                 need a writable primary. It is safe to retry"
            }
            Hint::Deadline => {
                "the statement ran into the backend's deadline (MySqlBuilder::timeout / \
                 timeout=), most likely queued behind another operation on the same key; it \
                 is safe to retry"
            }
            Hint::Deadlock => {
                "the server rolled the operation back to break a deadlock; nothing was \
                 written, it is safe to retry"
            }
            Hint::Dropped => "the server dropped or refused the call; it is safe to retry",
            Hint::NoDatabase => {
                "the URL names no database, or one that does not exist: \
                 mysql://user@host:port/DATABASE"
            }
            Hint::NotLockTable => {
                "the table is not an InnoDB lock table: choose another table name (table=, \
                 MySqlBuilder::table), or drop that table"
            }
            Hint::Other => "unexpected error from the server",
        }
    }
}

/// The kind of a server error number, and why.
pub(crate) fn kind_of(number: u16) -> (ErrorKind, Hint) {
    match number {
        // ER_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR (wrong password, no access).
        1045 | 1044 => (ErrorKind::PermissionDenied, Hint::Password),
        // ER_ACCESS_DENIED_NO_PASSWORD_ERROR: a user that may log in by the socket only.
        1698 => (ErrorKind::PermissionDenied, Hint::SocketOnly),
        // Table, column, procedure privileges; ER_SPECIFIC_ACCESS_DENIED_ERROR.
        1142 | 1143 | 1370 | 1227 => (ErrorKind::PermissionDenied, Hint::Privilege),
        number::READ_ONLY | number::READ_ONLY_TRANSACTION | number::READ_ONLY_ENGINE => {
            (ErrorKind::Unavailable, Hint::ReadOnly)
        }
        // ER_LOCK_WAIT_TIMEOUT, ER_LOCK_WAIT_TIMEOUT on metadata, MariaDB's
        // ER_STATEMENT_TIMEOUT, MySQL's ER_QUERY_TIMEOUT, ER_QUERY_INTERRUPTED.
        1205 | 1969 | 3024 | 1317 => (ErrorKind::Unavailable, Hint::Deadline),
        // ER_LOCK_DEADLOCK, and ER_LOCK_ABORTED.
        1213 | 1689 => (ErrorKind::Unavailable, Hint::Deadlock),
        // Too many connections, server shutdown, connection killed, lost, aborted.
        1040 | 1053 | 1077 | 1152 | 1153 | 1158..=1161 | 1927 | 4031 => {
            (ErrorKind::Unavailable, Hint::Dropped)
        }
        // ER_NO_DB_ERROR (the URL names none), ER_BAD_DB_ERROR.
        1046 | 1049 => (ErrorKind::Config, Hint::NoDatabase),
        // ER_ILLEGAL_HA (the engine cannot do what InnoDB does), ER_NOT_SUPPORTED_YET.
        1031 | 1235 => (ErrorKind::Config, Hint::NotLockTable),
        _ => (ErrorKind::Protocol, Hint::Other),
    }
}

pub(crate) fn map_error(op: Operation, e: sqlx::Error) -> Error {
    let (kind, message) = match (&e, server_number(&e)) {
        (sqlx::Error::Database(db), Some(n)) => {
            let (kind, hint) = kind_of(n);
            (
                kind,
                format!("{} (error {n}); {}", db.message(), hint.says()),
            )
        }
        (sqlx::Error::Database(db), None) => (
            ErrorKind::Protocol,
            format!("{}; unexpected error from the server", db.message()),
        ),
        _ => lock_sql::errors::transport(&e, &URL)
            .unwrap_or_else(|| (ErrorKind::Protocol, e.to_string())),
    };
    Error::new(kind, NAME, op, message).with_source(e)
}

/// How a MySQL URL looks, for the errors that say to fix it.
const URL: lock_sql::errors::UrlShape = lock_sql::errors::UrlShape {
    database: "MySQL",
    form: "mysql://user[:password]@host[:port]/database",
    tls_option: "ssl-mode",
    port: 3306,
};

/// A reply that does not have the shape the statements promise.
pub(crate) fn protocol(op: Operation, what: impl std::fmt::Display) -> Error {
    lock_sql::errors::protocol(NAME, op, what)
}

/// A row that is not what this backend writes.
pub(crate) fn corrupt(op: Operation, what: &str) -> Error {
    lock_sql::errors::corrupt(NAME, op, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_safe_errors_say_so() {
        for n in [1205, 1213, 1969, 1290, 1792, 1927, 1040] {
            let (kind, hint) = kind_of(n);
            assert_eq!(kind, ErrorKind::Unavailable, "{n}");
            assert!(
                hint.says().contains("safe to retry"),
                "{n}: {}",
                hint.says()
            );
        }
        assert!(kind_of(1290).1.says().contains("primary"));
        assert_eq!(kind_of(1045).0, ErrorKind::PermissionDenied);
        // Issue #36, item 14: Debian's root over TCP was a protocol error.
        assert_eq!(kind_of(1698).0, ErrorKind::PermissionDenied);
        assert!(kind_of(1698).1.says().contains("socket"));
        assert_eq!(kind_of(1142).0, ErrorKind::PermissionDenied);
        assert_eq!(kind_of(1049).0, ErrorKind::Config);
        assert_eq!(kind_of(1064).0, ErrorKind::Protocol);
    }
}
