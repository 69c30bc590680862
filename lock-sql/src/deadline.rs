//! A call's deadline.

use std::future::Future;
use std::time::Duration;

use lock_core::{Error, ErrorKind, Operation, Result};
use tokio::time::Instant;

/// What a deadline error names: the backend, its deadline, and where the user sets it.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    /// The backend's name.
    pub backend: &'static str,
    /// The deadline of one call.
    pub timeout: Duration,
    /// Where the user sets it, e.g. `PostgresBuilder::timeout / timeout=`.
    pub setting: &'static str,
}

/// Runs `fut` by `deadline`: its output, or a retry-safe [`ErrorKind::Unavailable`] that
/// names the deadline and its setting.
///
/// # Errors
/// The deadline passed.
///
/// # Cancel safety
/// As `fut`'s: it is dropped at the deadline.
pub async fn within<T>(
    named: &Deadline,
    op: Operation,
    deadline: Instant,
    fut: impl Future<Output = T>,
) -> Result<T> {
    tokio::time::timeout_at(deadline, fut)
        .await
        .map_err(|_| named.error(op))
}

impl Deadline {
    /// The error of a call of `op` that reached this deadline: a retry-safe
    /// [`ErrorKind::Unavailable`] that names the deadline and its setting.
    pub fn error(&self, op: Operation) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            self.backend,
            op,
            format!(
                "no answer within the deadline of {:?} ({}); it is safe to retry",
                self.timeout, self.setting
            ),
        )
    }
}
