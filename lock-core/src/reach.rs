//! Why a server cannot be reached: for backends whose driver only says "no connection
//! within the deadline" (a pool that retries a refused connection until it times out),
//! one TCP connection attempt of their own tells the user what happened.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The longest a backend waits for a connection before it asks [`why_unreachable`] why none
/// came.
pub const PROBE_AFTER: Duration = Duration::from_millis(500);

/// Why `host:port` cannot be reached by TCP, learned by one connection attempt of at most
/// `within`: refused (nothing listens there), no route, or a name that does not resolve,
/// as an error whose message names the address. `None` when the attempt connects (the
/// server is there and slow: keep waiting for it) or takes longer than `within`, and for a
/// Unix socket path (a `host` that starts with `/`).
pub async fn why_unreachable(host: &str, port: u16, within: Duration) -> Option<std::io::Error> {
    if host.starts_with('/') {
        return None;
    }
    let attempt = tokio::net::TcpStream::connect((host, port));
    match tokio::time::timeout(within, attempt).await {
        Ok(Err(e)) => Some(std::io::Error::new(
            e.kind(),
            format!(
                "cannot connect to {host}:{port}: {e}; is the server running and listening there?"
            ),
        )),
        Ok(Ok(_)) | Err(_) => None,
    }
}

/// Waits for `connect` (a pooled connection, say) until `deadline`. With `cold`, the
/// server's address (give it only when the pool holds no connection at all: a warm pool
/// pays for nothing here), asks [`why_unreachable`] why when the connection has not come
/// after [`PROBE_AFTER`] (or a quarter of the time left, if less): a refused or unroutable
/// address ends the wait at once with that error, instead of at the deadline with none.
///
/// `Ok(None)`: the deadline passed.
///
/// # Errors
/// The address's error, when it cannot be reached.
///
/// # Cancel safety
/// Cancel safe when `connect` is: dropping the future drops `connect` and the probe.
pub async fn connect_or_say_why<T>(
    connect: impl Future<Output = T>,
    deadline: Instant,
    cold: Option<(&str, u16)>,
) -> std::io::Result<Option<T>> {
    let connect = tokio::time::timeout_at(deadline, connect);
    tokio::pin!(connect);
    let Some((host, port)) = cold else {
        return Ok(connect.await.ok());
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let after = PROBE_AFTER.min(left / 4);
    tokio::select! {
        biased;
        done = &mut connect => return Ok(done.ok()),
        () = tokio::time::sleep(after) => {}
    }
    let probe = why_unreachable(host, port, left.saturating_sub(after));
    tokio::select! {
        biased;
        done = &mut connect => Ok(done.ok()),
        why = probe => match why {
            Some(e) => Err(e),
            None => Ok(connect.await.ok()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_address_says_so_and_names_itself() {
        // A port nothing listens on: bind one, note it, let it go.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = why_unreachable("127.0.0.1", port, Duration::from_secs(5))
            .await
            .expect("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let never = std::future::pending::<()>();
        let started = std::time::Instant::now();
        let got = connect_or_say_why(never, deadline, Some(("127.0.0.1", port))).await;
        assert!(got.is_err(), "a refused address ends the wait");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "long before the deadline"
        );
    }

    #[tokio::test]
    async fn a_listening_address_or_a_warm_pool_waits_for_the_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(why_unreachable("127.0.0.1", port, Duration::from_secs(5))
            .await
            .is_none());
        assert!(
            why_unreachable("/run/postgresql", 5432, Duration::from_secs(5))
                .await
                .is_none()
        );
        // Past the probe (500 ms), long before the deadline.
        let deadline = Instant::now() + Duration::from_secs(4);
        let slow = async {
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            7
        };
        let got = connect_or_say_why(slow, deadline, Some(("127.0.0.1", port))).await;
        assert_eq!(got.unwrap(), Some(7));
        let never = std::future::pending::<()>();
        let deadline = Instant::now() + Duration::from_millis(100);
        let got = connect_or_say_why(never, deadline, None).await;
        assert_eq!(
            got.unwrap(),
            None,
            "a warm pool is not probed: the deadline passes"
        );
    }
}
