//! etcd's failures in the contract's vocabulary, and the deadline every call runs under.

use std::future::Future;
use std::time::Duration;

use etcd_client::Error as EtcdError;
use lock_core::{Error, ErrorKind, Operation, Result};
use tonic::Code;

use crate::NAME;

/// A key or value that cannot be read.
pub(crate) fn corrupt(op: Operation, message: String) -> Error {
    Error::new(lock_core::ErrorKind::Corrupt, crate::NAME, op, message)
}

/// `error` from `what` (a short name of the call: "read", "txn", "lease grant") as a lock
/// error: refused credentials and permissions are [`ErrorKind::PermissionDenied`], what
/// the server says it cannot do now (no leader, too many requests, unavailable) and every
/// transport failure [`ErrorKind::Unavailable`], anything else [`ErrorKind::Protocol`].
pub(crate) fn map(op: Operation, what: &str, error: EtcdError) -> Error {
    let kind = match &error {
        EtcdError::GRpcStatus(status) => match status.code() {
            Code::PermissionDenied | Code::Unauthenticated => ErrorKind::PermissionDenied,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                ErrorKind::Protocol
            }
            _ => ErrorKind::Unavailable,
        },
        EtcdError::InvalidArgs(_) | EtcdError::InvalidUri(_) => ErrorKind::Config,
        _ => ErrorKind::Unavailable,
    };
    let advice = match kind {
        ErrorKind::PermissionDenied => {
            "; check the user and password, and that the user's role may read and write the \
             backend's prefix and grant leases"
        }
        ErrorKind::Unavailable => "; nothing may have been written, or all of it: safe to retry",
        _ => "",
    };
    let said = match &error {
        // A status of the client's own (a failed connection) keeps the transport's error,
        // and the operating system's reason, among its causes.
        EtcdError::GRpcStatus(status) => causes(status.message().to_owned(), status),
        other => causes(other.to_string(), other),
    };
    // Only on the first call: later, a closed connection is a member that went away.
    let hint = match op {
        Operation::Connect => not_etcd(&error, &said),
        _ => "",
    };
    let message = format!("{what}: {said}{hint}{advice}");
    Error::new(kind, NAME, op, message).with_source(error)
}

/// `text` and each cause of `error` it does not already say: a failed connection reads "tcp
/// connect error" and keeps the operating system's reason ("Connection refused (os error
/// 111)") among its causes, which is what an operator needs.
fn causes(mut text: String, error: &dyn std::error::Error) -> String {
    let mut cause = error.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

/// What to add when a connection was made but what answered did not speak etcd's gRPC
/// (HTTP/2): the URL names another service's port (Redis, Postgres, a web server).
fn not_etcd(error: &EtcdError, said: &str) -> &'static str {
    let transport = match error {
        EtcdError::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unknown | Code::Unavailable | Code::Internal | Code::Cancelled
        ),
        EtcdError::TransportError(_) => true,
        _ => false,
    };
    let spoke_otherwise = [
        "h2 protocol error",
        "http2 error",
        "frame",
        "broken pipe",
        "connection closed",
        "connection reset",
    ]
    .iter()
    .any(|sign| said.contains(sign));
    let never_connected = said.contains("tcp connect error") || said.contains("dns error");
    if transport && spoke_otherwise && !never_connected {
        "; the server there did not answer as etcd does (gRPC over HTTP/2): check that the \
         URL names an etcd client endpoint (port 2379 by default), not another service"
    } else {
        ""
    }
}

/// The end of one operation's time: every call it makes to etcd ends by then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    /// When.
    pub(crate) at: tokio::time::Instant,
    /// The backend's timeout it was set from, for messages.
    pub(crate) timeout: Duration,
}

impl Deadline {
    /// `timeout` from now.
    pub(crate) fn after(timeout: Duration) -> Self {
        Deadline {
            at: tokio::time::Instant::now() + timeout,
            timeout,
        }
    }
}

/// Runs `call` until `deadline`: a call that does not answer in time is a retry-safe
/// [`ErrorKind::Unavailable`] naming the deadline (it may or may not have been applied).
pub(crate) async fn within<T>(
    op: Operation,
    what: &str,
    deadline: Deadline,
    call: impl Future<Output = std::result::Result<T, EtcdError>>,
) -> Result<T> {
    match tokio::time::timeout_at(deadline.at, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(map(op, what, e)),
        Err(_) => Err(Error::new(
            ErrorKind::Unavailable,
            NAME,
            op,
            format!(
                "{what}: no answer from etcd within the operation's deadline ({:?}); it may \
                 or may not have been applied: safe to retry",
                deadline.timeout
            ),
        )),
    }
}
