//! Redis errors and malformed replies, turned into the one `lock_core::Error`.

use lock_core::{Error, ErrorKind, Operation};

/// Maps a redis-rs error; the message never holds the URL (and so never a password).
pub(crate) fn map_error(backend: &'static str, op: Operation, e: redis::RedisError) -> Error {
    // A pipeline reports the first failing command's error inside its own.
    let code = e.code().map(str::to_owned).or_else(|| {
        let errors = e.clone().into_server_errors()?;
        errors.first().map(|(_, s)| s.code().to_owned())
    });
    // One line, for a log: a parse error lists what it did not expect a line each.
    let detail = e
        .detail()
        .map_or_else(|| e.to_string(), str::to_owned)
        .trim()
        .replace('\n', " ");
    let (kind, hint) = if matches!(code.as_deref(), Some("CORRUPT" | "WRONGTYPE")) {
        (
            ErrorKind::Corrupt,
            "a key of the lock's name holds something else; delete or rename it",
        )
    } else if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code.as_deref(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
    {
        (
            ErrorKind::PermissionDenied,
            "check the user and password in the Redis URL and the user's ACL",
        )
    } else if detail.contains("certificate") {
        // rustls refused the server's certificate: retrying cannot help.
        (
            ErrorKind::Config,
            "the server's TLS certificate is not trusted: install its CA in the system's \
             roots, or, for a test server only, end the URL with #insecure",
        )
    } else if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_connection_refusal()
        || matches!(
            code.as_deref(),
            Some("LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN")
        )
    {
        (
            ErrorKind::Unavailable,
            "the server is unreachable or busy; the call is safe to retry",
        )
    } else if matches!(
        code.as_deref(),
        Some("MOVED" | "ASK" | "CLUSTERDOWN" | "READONLY" | "EXECABORT")
    ) || matches!(
        e.kind(),
        redis::ErrorKind::MasterNameNotFoundBySentinel
            | redis::ErrorKind::NoValidReplicasFoundBySentinel
            | redis::ErrorKind::ClusterConnectionNotFound
    ) {
        // Nothing was applied: the slot moved, the cluster is failing over, the node is a
        // replica now, or the sentinels name no reachable primary (mid-failover).
        (
            ErrorKind::Unavailable,
            "the lock's primary moved (failover or resharding); the call is safe to retry",
        )
    } else {
        (ErrorKind::Protocol, "unexpected reply from Redis")
    };
    // On the first call, a reply Redis never sends (a MariaDB greeting, a Postgres or an
    // HTTP answer), or a connection made and then dropped at once, is another service at
    // that port more likely than a broken Redis.
    let another_service = op == Operation::Connect
        && !e.is_connection_refusal()
        && (e.kind() == redis::ErrorKind::Parse || e.is_connection_dropped());
    let hint = if another_service {
        format!(
            "{hint}; the server there did not answer as Redis does: check that the URL names a \
             Redis server's port (6379 by default), not another service's"
        )
    } else {
        hint.to_owned()
    };
    Error::new(kind, backend, op, format!("{detail}; {hint}")).with_source(e)
}

/// A reply that does not have the shape the protocol promises.
pub(crate) fn protocol(
    backend: &'static str,
    op: Operation,
    what: impl std::fmt::Display,
) -> Error {
    Error::new(
        ErrorKind::Protocol,
        backend,
        op,
        format!("unexpected reply: {what}"),
    )
}

/// A record whose fields do not make a lock record.
pub(crate) fn corrupt(backend: &'static str, op: Operation, what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Corrupt,
        backend,
        op,
        format!("{what}; delete or rename the key, or force-release the lock"),
    )
}
