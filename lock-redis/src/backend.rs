//! The `LockBackend` implementation over one Lua script.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    Busy, Capabilities, Error, ErrorKind, Fencing, HolderInfo, Key, LockBackend, LockState,
    ObtainOutcome, ObtainRequest, Operation, ProlongOutcome, ProlongRequest, ReleaseOutcome,
    ReleaseRequest, Result, Ttl,
};
use redis::aio::ConnectionManager;
use redis::Script;

use crate::keys::LockKeys;

const SCRIPT: &str = include_str!("scripts/lock.lua");

/// Locks on a Redis server, each operation one `EVALSHA` of one Lua script.
///
/// Built with [`RedisBackend::connect`] from a `redis://` URL (password and ACL user taken
/// from it, never shown in `Debug` or errors) or from an existing [`ConnectionManager`],
/// which reconnects in the background after a dropped connection.
#[derive(Clone)]
pub struct RedisBackend {
    conn: ConnectionManager,
    script: Arc<Script>,
    prefix: String,
    grace: Option<Duration>,
}

impl RedisBackend {
    /// The backend's name in errors and reports.
    pub const LUA_NAME: &'static str = "redis-lua";
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "lock:";

    /// Connects to `url` (`redis://[user:password@]host:port/db`).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed URL, [`ErrorKind::PermissionDenied`] for a
    /// refused password, [`ErrorKind::Unavailable`] when the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Self> {
        // The URL may hold a password: it never goes into the message.
        let client = redis::Client::open(url).map_err(|_| {
            Error::new(
                ErrorKind::Config,
                Self::LUA_NAME,
                Operation::Connect,
                "not a Redis URL: expected redis://[user:password@]host:port/db",
            )
        })?;
        let conn = ConnectionManager::new(client)
            .await
            .map_err(|e| map_error(Operation::Connect, e))?;
        Ok(Self::from_manager(conn))
    }

    /// Uses an existing connection manager.
    pub fn from_manager(conn: ConnectionManager) -> Self {
        RedisBackend {
            conn,
            script: Arc::new(Script::new(SCRIPT)),
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            grace: None,
        }
    }

    /// Puts every key under `prefix` instead of `lock:`; different prefixes never meet.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Keeps expired records for `grace` instead of each lock's ttl, for late detection.
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// The server-side id of the backend's connection (`CLIENT ID`), for operators and fault
    /// tests that `CLIENT KILL` it.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] when the server cannot be reached.
    pub async fn client_id(&self) -> Result<i64> {
        let mut conn = self.conn.clone();
        redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .map_err(|e| map_error(Operation::Inspect, e))
    }

    fn grace_ms(&self, ttl: Ttl) -> u64 {
        self.grace
            .map(|g| u64::try_from(g.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(ttl.as_millis())
    }

    async fn call(&self, op: Operation, key: &Key, args: &[&str]) -> Result<Vec<String>> {
        let keys = LockKeys::new(&self.prefix, key);
        let mut invocation = self.script.key(&keys.record);
        invocation.key(&keys.fence).key(&keys.channel);
        for a in args {
            invocation.arg(*a);
        }
        let mut conn = self.conn.clone();
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| map_error(op, e))
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("variant", &"lua")
            .field("prefix", &self.prefix)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

fn map_error(op: Operation, e: redis::RedisError) -> Error {
    let (kind, hint) = if e.code() == Some("CORRUPT") {
        (
            ErrorKind::Corrupt,
            "a key of the lock's name holds something else; delete or rename it",
        )
    } else if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
    {
        (
            ErrorKind::PermissionDenied,
            "check the user and password in the Redis URL and the user's ACL",
        )
    } else if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_connection_refusal()
    {
        (
            ErrorKind::Unavailable,
            "the server is unreachable; the call is safe to retry",
        )
    } else {
        (ErrorKind::Protocol, "unexpected reply from Redis")
    };
    let detail = e.detail().map_or_else(|| e.to_string(), str::to_owned);
    let message = format!("{detail}; {hint}");
    Error::new(kind, RedisBackend::LUA_NAME, op, message).with_source(e)
}

fn protocol(op: Operation, reply: &[String]) -> Error {
    Error::new(
        ErrorKind::Protocol,
        RedisBackend::LUA_NAME,
        op,
        format!("unexpected script reply {:?}", reply.first()),
    )
}

fn number(op: Operation, reply: &[String], i: usize) -> Result<u64> {
    reply
        .get(i)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol(op, reply))
}

fn holder(op: Operation, json: &str) -> Result<HolderInfo> {
    serde_json::from_str(json).map_err(|e| {
        Error::new(
            ErrorKind::Corrupt,
            RedisBackend::LUA_NAME,
            op,
            format!("the record's holder field is not holder info: {e}"),
        )
    })
}

#[async_trait]
impl LockBackend for RedisBackend {
    fn name(&self) -> &'static str {
        Self::LUA_NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none().cross_process(true).cross_host(true)
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        let op = Operation::Obtain;
        let holder_json = serde_json::to_string(req.holder).unwrap_or_default();
        let (ttl, grace) = (
            req.ttl.as_millis().to_string(),
            self.grace_ms(req.ttl).to_string(),
        );
        let reply = self
            .call(
                op,
                req.key,
                &["obtain", &req.token.to_hex(), &ttl, &grace, &holder_json],
            )
            .await?;
        match reply.first().map(String::as_str) {
            Some("acquired") => Ok(ObtainOutcome::Acquired {
                fencing: Fencing(number(op, &reply, 1)?),
                ttl: req.ttl,
            }),
            Some("reacquired") => Ok(ObtainOutcome::Reacquired {
                holds: u32::try_from(number(op, &reply, 1)?).unwrap_or(u32::MAX),
            }),
            Some("busy") => Ok(ObtainOutcome::Busy(Busy {
                remaining: Duration::from_millis(number(op, &reply, 1)?),
                holder: match reply.get(2).map(String::as_str) {
                    None | Some("") => None,
                    Some(json) => Some(holder(op, json)?),
                },
            })),
            _ => Err(protocol(op, &reply)),
        }
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        let op = Operation::Prolongate;
        let (ttl, grace) = (
            req.ttl.as_millis().to_string(),
            self.grace_ms(req.ttl).to_string(),
        );
        let reply = self
            .call(op, req.key, &["prolong", &req.token.to_hex(), &ttl, &grace])
            .await?;
        match reply.first().map(String::as_str) {
            Some("prolonged") => Ok(ProlongOutcome::Prolonged),
            Some("prolonged_late") => Ok(ProlongOutcome::ProlongedLate),
            Some("lost") => Ok(ProlongOutcome::Lost),
            _ => Err(protocol(op, &reply)),
        }
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        let op = Operation::Release;
        let delay = req.delay_after.map_or(0, Ttl::as_millis).to_string();
        let reply = self
            .call(op, req.key, &["release", &req.token.to_hex(), &delay])
            .await?;
        match reply.first().map(String::as_str) {
            Some("released") => Ok(ReleaseOutcome::Released),
            Some("released_late") => Ok(ReleaseOutcome::ReleasedLate),
            Some("decremented") => Ok(ReleaseOutcome::Decremented {
                holds: u32::try_from(number(op, &reply, 1)?).unwrap_or(u32::MAX),
            }),
            Some("lost") => Ok(ReleaseOutcome::Lost),
            _ => Err(protocol(op, &reply)),
        }
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        let reply = self.call(Operation::Inspect, key, &["inspect"]).await?;
        parse_state(Operation::Inspect, &reply)
    }

    async fn force_release(&self, key: &Key) -> Result<LockState> {
        let reply = self.call(Operation::ForceRelease, key, &["force"]).await?;
        parse_state(Operation::ForceRelease, &reply)
    }
}

fn parse_state(op: Operation, reply: &[String]) -> Result<LockState> {
    match reply.first().map(String::as_str) {
        Some("free") => Ok(LockState::Free),
        Some("cooling") => Ok(LockState::Cooling {
            remaining: Duration::from_millis(number(op, reply, 1)?),
        }),
        Some("held") => Ok(LockState::Held {
            remaining: Duration::from_millis(number(op, reply, 1)?),
            holder: holder(op, reply.get(2).map_or("", String::as_str))?,
            fencing: Fencing(number(op, reply, 3)?),
            holds: u32::try_from(number(op, reply, 4)?).unwrap_or(u32::MAX),
        }),
        _ => Err(protocol(op, reply)),
    }
}
