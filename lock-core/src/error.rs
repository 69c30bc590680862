//! The one error type every backend and the client layer return.

use std::fmt;

/// A shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of failure an [`Error`] is: the thing a caller matches on.
///
/// Contention is never an error: a held lock is [`ObtainOutcome::Busy`](crate::ObtainOutcome),
/// a lock taken by someone else is [`ProlongOutcome::Lost`](crate::ProlongOutcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A key, ttl, metadata or configuration value was refused before any I/O.
    InvalidInput,
    /// The backend could not be reached or did not answer (connection refused, timeout,
    /// connection dropped mid-call, I/O error on the lock directory).
    Unavailable,
    /// A record exists but cannot be read: garbage, a foreign format, a key of the wrong type.
    Corrupt,
    /// The backend answered something the protocol does not allow (an unexpected reply, a
    /// script or table of the wrong shape, too many optimistic-transaction conflicts).
    Protocol,
    /// The backend refused us: wrong password, missing privilege, read-only directory.
    PermissionDenied,
    /// The backend granted the lock, but the grant arrived after its ttl had already run out
    /// by the local clock, so it was given back and does not count as obtained.
    ExpiredOnArrival,
    /// The configuration (a URL, a config file) is wrong or names a backend not compiled in.
    Config,
    /// The guard's lock turned out to be lost during the call: a mode change found that the
    /// backend no longer has the hold it was to change (it expired, was force-released, or
    /// the backend lost its data). Nothing was changed; the guard's lost signal has fired.
    /// Release the guard and obtain the lock anew, and treat what was read under it as
    /// possibly stale.
    Lost,
    /// A fenced write was refused: its fencing token is below the highest one the resource
    /// has seen, so a newer holder of the lock has written since (see [`crate::fence`]).
    /// Nothing was written. The lock this token came from is not yours any more: stop, and
    /// obtain it anew before writing again. [`Error::stale_token`] names both tokens.
    StaleToken,
    /// The backend cannot do what was asked, whatever the input (listing on a backend whose
    /// store cannot walk its keys): nothing was sent. The message says what to use instead.
    Unsupported,
}

impl ErrorKind {
    /// A short lowercase name, used in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Unavailable => "backend unavailable",
            ErrorKind::Corrupt => "corrupt record",
            ErrorKind::Protocol => "protocol error",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::ExpiredOnArrival => "lock expired before the grant arrived",
            ErrorKind::Config => "configuration error",
            ErrorKind::Lost => "lock lost",
            ErrorKind::StaleToken => "stale fencing token",
            ErrorKind::Unsupported => "not supported by this backend",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The operation an [`Error`] happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Validating input before any I/O.
    Validate,
    /// Connecting or building the backend.
    Connect,
    /// [`LockBackend::obtain`](crate::LockBackend::obtain).
    Obtain,
    /// [`LockBackend::prolongate`](crate::LockBackend::prolongate).
    Prolongate,
    /// [`LockBackend::release`](crate::LockBackend::release).
    Release,
    /// [`LockBackend::inspect`](crate::LockBackend::inspect).
    Inspect,
    /// [`LockBackend::force_release`](crate::LockBackend::force_release).
    ForceRelease,
    /// [`LockBackend::subscribe`](crate::LockBackend::subscribe).
    Subscribe,
    /// A fenced write at a resource (see [`crate::fence`]).
    Fence,
    /// [`LockBackend::list_keys`](crate::LockBackend::list_keys), or a listing built on it.
    List,
}

impl Operation {
    /// A short lowercase name, used in messages and spans.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Validate => "validate",
            Operation::Connect => "connect",
            Operation::Obtain => "obtain",
            Operation::Prolongate => "prolongate",
            Operation::Release => "release",
            Operation::Inspect => "inspect",
            Operation::ForceRelease => "force_release",
            Operation::Subscribe => "subscribe",
            Operation::Fence => "fence",
            Operation::List => "list",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The cause, shared: an error is cloned when one failure answers every request of a
/// batch ([`LockBackend::prolongate_many`](crate::LockBackend::prolongate_many)).
type SharedSource = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong, where, and whether trying again is safe.
///
/// Every backend maps its driver's errors into this one type, so a caller handles a Redis
/// outage and a full disk the same way. The message never contains an owner token or a
/// password.
///
/// ```
/// use lock_core::{Error, ErrorKind, Operation};
///
/// let err = Error::new(ErrorKind::Unavailable, "redis-lua", Operation::Obtain, "connection refused");
/// assert_eq!(err.kind(), ErrorKind::Unavailable);
/// assert!(err.is_retry_safe());
/// assert_eq!(err.to_string(), "redis-lua: obtain failed: backend unavailable: connection refused");
/// ```
#[derive(thiserror::Error, Clone)]
#[error("{backend}: {operation} failed: {kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    backend: &'static str,
    operation: Operation,
    message: String,
    #[source]
    source: Option<SharedSource>,
}

impl Error {
    /// A new error of `kind`, raised by `backend` during `operation`.
    pub fn new(
        kind: ErrorKind,
        backend: &'static str,
        operation: Operation,
        message: impl Into<String>,
    ) -> Self {
        Error {
            kind,
            backend,
            operation,
            message: message.into(),
            source: None,
        }
    }

    /// An [`ErrorKind::InvalidInput`] raised while validating, before any I/O.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(
            ErrorKind::InvalidInput,
            "lock-core",
            Operation::Validate,
            message,
        )
    }

    /// The [`ErrorKind::Protocol`] error for an obtain answered
    /// [`ObtainOutcome::Lost`](crate::ObtainOutcome::Lost) although it changed no mode.
    pub(crate) fn lost_unasked(backend: &'static str) -> Self {
        Error::new(
            ErrorKind::Protocol,
            backend,
            Operation::Obtain,
            "the backend answered Lost to an obtain that changes no mode (only a mode change \
             may be answered Lost); the backend breaks the contract",
        )
    }

    /// Attaches the underlying cause (a driver or I/O error).
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(SharedSource::from(source.into()));
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The name of the backend that raised it (`"lock-core"` for input validation).
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The operation that failed.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// The human-readable detail, without kind, backend or operation.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The tokens of a refused fenced write ([`ErrorKind::StaleToken`]); `None` for any other
    /// error.
    pub fn stale_token(&self) -> Option<&crate::fence::StaleToken> {
        self.source.as_deref()?.downcast_ref()
    }

    /// Whether repeating the same call is safe and may succeed.
    ///
    /// Every backend operation is written so that a retry after an error leaves the lock in
    /// a state the contract allows ([`contract`](crate::contract), guarantee 5); this says whether a retry can
    /// help: yes for an unreachable backend, no for bad input, corrupt records or a refused
    /// password, which need a person.
    pub fn is_retry_safe(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Unavailable | ErrorKind::ExpiredOnArrival
        )
    }
}

/// `{:?}` is what a person reads: the message, then each cause the message does not already
/// say. It is what a `main` that returns `distlock::Result` prints when it fails, so that
/// reads `Error: redis: obtain failed: backend unavailable: ...`, not a dump of fields. `{:#?}` is
/// the fields.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            write!(f, "{self}")?;
            let mut cause = std::error::Error::source(self);
            while let Some(c) = cause {
                let said = c.to_string();
                if !self.message.contains(&said) {
                    write!(f, "\n  caused by: {said}")?;
                }
                cause = c.source();
            }
            return Ok(());
        }
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind)
            .field("backend", &self.backend)
            .field("operation", &self.operation)
            .field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", &format_args!("{source}"));
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `main` returning `distlock::Result` prints: the message and the causes it does
    /// not say already, never a dump of fields (that is `{:#?}`).
    #[test]
    fn debug_reads_as_the_message_with_its_causes() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Error::new(
            ErrorKind::Unavailable,
            "redis",
            Operation::Obtain,
            "no connection to 127.0.0.1:1",
        )
        .with_source(cause);
        assert_eq!(
            format!("{e:?}"),
            "redis: obtain failed: backend unavailable: no connection to 127.0.0.1:1\n  caused by: refused"
        );
        let said_already = Error::new(
            ErrorKind::Unavailable,
            "redis",
            Operation::Obtain,
            "no connection: refused",
        )
        .with_source(std::io::Error::other("refused"));
        assert!(!format!("{said_already:?}").contains("caused by"));
        assert!(format!("{e:#?}").starts_with("Error {"));
    }
}
