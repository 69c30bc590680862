//! The error kinds of the failures every sqlx driver shares; what the server itself says
//! (a SQLSTATE, an error number) is each backend's.

use lock_core::{Error, ErrorKind, Operation};

/// How a backend's URL looks and which of its options sets TLS: what a configuration error
/// tells the user to fix.
#[derive(Debug, Clone, Copy)]
pub struct UrlShape {
    /// The database, e.g. `Postgres`.
    pub database: &'static str,
    /// The URL's form, e.g. `postgres://user[:password]@host[:port]/database`.
    pub form: &'static str,
    /// The TLS option, e.g. `sslmode`.
    pub tls_option: &'static str,
    /// The server's usual port, e.g. 5432: what a reply in another protocol (a URL that
    /// names another service's port) says to check.
    pub port: u16,
}

/// The kind and message of a failure that did not come from the server's own error
/// reply: unreachable (retry-safe `Unavailable`), TLS or a malformed URL (`Config`).
/// `None` for a server error and anything else, which the backend judges.
pub fn transport(e: &sqlx::Error, url: &UrlShape) -> Option<(ErrorKind, String)> {
    Some(match e {
        // Something answered, in another protocol: the URL names another service's port.
        sqlx::Error::Protocol(_) => another_service(e, url),
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            another_service(e, url)
        }
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => (
            ErrorKind::Unavailable,
            format!("{e}; the server is unreachable, the call is safe to retry"),
        ),
        sqlx::Error::Tls(_) => (
            ErrorKind::Config,
            format!(
                "{e}; check the server's certificate and the URL's {}",
                url.tls_option
            ),
        ),
        sqlx::Error::Configuration(_) => (
            ErrorKind::Config,
            format!("not a usable {} URL: expected {}", url.database, url.form),
        ),
        _ => return None,
    })
}

/// A connection that something answered in another protocol than the database's.
fn another_service(e: &sqlx::Error, url: &UrlShape) -> (ErrorKind, String) {
    (
        ErrorKind::Unavailable,
        format!(
            "{e}; the server there did not answer as {0} does: check that the URL names a {0} \
             server's port ({1} by default), not another service's; the call is safe to retry",
            url.database, url.port
        ),
    )
}

/// A reply that does not have the shape the backend's statements promise.
pub fn protocol(backend: &'static str, op: Operation, what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Protocol,
        backend,
        op,
        format!("unexpected reply: {what}"),
    )
}

/// A row whose `what` is not what the backend writes.
pub fn corrupt(backend: &'static str, op: Operation, what: &str) -> Error {
    Error::new(
        ErrorKind::Corrupt,
        backend,
        op,
        format!("the lock row's {what} is not what this backend writes; force-release the lock"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: UrlShape = UrlShape {
        database: "Postgres",
        form: "postgres://user@host/db",
        tls_option: "sslmode",
        port: 5432,
    };

    #[test]
    fn unreachable_is_retry_safe_and_a_bad_url_says_its_form() {
        let (kind, said) = transport(&sqlx::Error::PoolTimedOut, &URL).unwrap();
        assert_eq!(kind, ErrorKind::Unavailable);
        assert!(said.contains("safe to retry"), "{said}");
        let bad = sqlx::Error::Configuration("nope".into());
        let (kind, said) = transport(&bad, &URL).unwrap();
        assert_eq!(kind, ErrorKind::Config);
        assert!(said.contains("postgres://user@host/db"), "{said}");
        assert!(transport(&sqlx::Error::RowNotFound, &URL).is_none());
    }

    /// A reply in another protocol (a URL with a Redis or MariaDB port) says to check the
    /// port, and is retry-safe as any transport failure.
    #[test]
    fn another_protocol_says_to_check_the_port() {
        let other = std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected response");
        for e in [
            sqlx::Error::Io(other),
            sqlx::Error::Protocol("unknown message type".into()),
        ] {
            let (kind, said) = transport(&e, &URL).unwrap();
            assert_eq!(kind, ErrorKind::Unavailable);
            assert!(said.contains("did not answer as Postgres does"), "{said}");
            assert!(said.contains("(5432 by default)"), "{said}");
        }
    }
}
