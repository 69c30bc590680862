//! The server that takes writes: a fixed one, or the primary a set of sentinels names now.
//!
//! Behind Sentinel the primary moves: after a failover the old one is unreachable, or comes
//! back as a replica that answers writes with `READONLY`. Any such error makes the backend
//! [`Primary::forget`] the address, and the next connection asks the sentinels again (and
//! checks with `ROLE` that the node they name is a primary). The call that met the error
//! fails retry-safe; nothing is retried behind the caller's back.

use std::sync::Mutex;

use lock_core::{Operation, Result};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};

use super::topology::{AddressMap, Sentinel};
use crate::error::map_error;
use redis::ConnectionAddr;

/// Where connections for commands and subscriptions go.
pub(crate) enum Primary {
    /// One server, at a fixed address.
    Fixed(redis::Client),
    /// Whatever primary the sentinels name.
    Sentinel {
        sentinels: Box<tokio::sync::Mutex<SentinelClient>>,
        current: Mutex<Option<redis::Client>>,
        map: AddressMap,
    },
}

impl Primary {
    pub(crate) fn sentinel(s: Sentinel, map: AddressMap, name: &'static str) -> Result<Self> {
        let mut b = SentinelClientBuilder::new(s.sentinels, s.service, SentinelServerType::Master)
            .map_err(|e| map_error(name, Operation::Connect, e))?
            .set_client_to_redis_db(s.db);
        if let Some(u) = s.username {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = s.password {
            b = b.set_client_to_redis_password(p);
        }
        if let Some(tls) = s.tls {
            b = b
                .set_client_to_redis_tls_mode(tls)
                .set_client_to_sentinel_tls_mode(tls);
        }
        let client = b
            .build()
            .map_err(|e| map_error(name, Operation::Connect, e))?;
        Ok(Primary::Sentinel {
            sentinels: Box::new(tokio::sync::Mutex::new(client)),
            current: Mutex::new(None),
            map,
        })
    }

    /// A client for the primary: the fixed server, the one found last, or the one the
    /// sentinels name now.
    pub(crate) async fn client(&self, name: &'static str, op: Operation) -> Result<redis::Client> {
        match self {
            Primary::Fixed(c) => Ok(c.clone()),
            Primary::Sentinel {
                sentinels,
                current,
                map,
            } => {
                if let Some(c) = lock(current).clone() {
                    return Ok(c);
                }
                let mut sentinels = sentinels.lock().await;
                if let Some(c) = lock(current).clone() {
                    return Ok(c);
                }
                let named = sentinels
                    .async_get_client()
                    .await
                    .map_err(|e| map_error(name, op, e))?;
                let info = named.get_connection_info().clone();
                // Reached as mapped, with the URL's TLS settings.
                let addr = match info.addr() {
                    ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                        map.reach(info.addr(), host, *port)
                    }
                    other => other.clone(),
                };
                let client =
                    redis::Client::open(info.set_addr(addr)).map_err(|e| map_error(name, op, e))?;
                tracing::debug!(primary = %client.get_connection_info().addr(), "sentinels named the primary");
                *lock(current) = Some(client.clone());
                Ok(client)
            }
        }
    }

    /// Forgets the primary after `e` if `e` may mean it moved (the next connection asks
    /// the sentinels again); says whether it may have.
    pub(crate) fn failed(&self, e: &redis::RedisError) -> bool {
        let moved = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"));
        if moved {
            self.forget();
        }
        moved
    }

    /// Forgets the primary whatever happened (a call that hit its deadline).
    pub(crate) fn forget(&self) {
        if let Primary::Sentinel { current, .. } = self {
            if lock(current).take().is_some() {
                tracing::debug!("primary forgotten; the next call asks the sentinels");
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One multiplexed connection to the primary behind Sentinel, opened on first use and
/// dropped (with the primary's address) after an error that may mean a failover.
pub(crate) struct SentinelLink {
    pub(crate) primary: std::sync::Arc<Primary>,
    conn: Mutex<Option<redis::aio::MultiplexedConnection>>,
}

impl SentinelLink {
    pub(crate) fn new(primary: std::sync::Arc<Primary>) -> Self {
        SentinelLink {
            primary,
            conn: Mutex::new(None),
        }
    }

    pub(crate) async fn connection(
        &self,
        name: &'static str,
        op: Operation,
    ) -> Result<redis::aio::MultiplexedConnection> {
        if let Some(c) = lock(&self.conn).clone() {
            return Ok(c);
        }
        let client = self.primary.client(name, op).await?;
        let conn = client
            .get_multiplexed_async_connection_with_config(&connection_config())
            .await
            .map_err(|e| {
                self.failed(&e);
                map_error(name, op, e)
            })?;
        *lock(&self.conn) = Some(conn.clone());
        Ok(conn)
    }

    /// After an error on the connection: drops it, and the primary's address, when the
    /// error may mean the connection is broken or the primary moved.
    pub(crate) fn failed(&self, e: &redis::RedisError) {
        if self.primary.failed(e) {
            lock(&self.conn).take();
        }
    }

    /// After a call that hit its deadline: the primary may be gone silently.
    pub(crate) fn forget(&self) {
        self.primary.forget();
        lock(&self.conn).take();
    }
}

/// How every dedicated connection is opened: a short connect timeout, and no response
/// timeout of the driver's own (each call's deadline bounds it, whatever it waits for).
pub(crate) fn connection_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(2)))
        .set_response_timeout(None)
}
