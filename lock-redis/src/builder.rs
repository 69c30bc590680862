//! [`RedisBuilder`]: every setting of a [`RedisBackend`] before it connects, and the
//! connecting itself, for each topology.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Grace;
use lock_core::{Error, ErrorKind, Operation, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::backend::{Engine, RedisBackend};
use crate::conn::link::{Acks, Link, LinkKind};
use crate::conn::pool::Pool;
use crate::conn::primary::{Primary, SentinelLink};
use crate::conn::shards::Shards;
use crate::conn::topology::{AddressMap, Topology};
use crate::conn::Pools;
use crate::error::map_error;
use crate::lua::{self, Lua};
use crate::notify::{Notifier, Sharded};
use crate::variant::Variant;
use crate::watch::{self, Watch};

/// The URL options redis-rs reads (its `parse_redis_url`); the builder reads its own.
const REDIS_RS_OPTIONS: &[&str] = &["protocol", "db", "user", "pass"];

/// The settings of a [`RedisBackend`], all known before it connects: made by
/// [`RedisBackend::builder`], consumed by [`RedisBuilder::connect`]. Its `Debug` never
/// shows the URL's password.
#[derive(Clone, serde::Deserialize)]
#[serde(try_from = "String")]
#[must_use = "a builder does nothing until connect()"]
pub struct RedisBuilder {
    pub(crate) url: String,
    pub(crate) variant: Variant,
    pub(crate) prefix: String,
    pub(crate) grace: Option<Duration>,
    pub(crate) timeout: Duration,
    pub(crate) pool_size: usize,
    pub(crate) acks: Option<(u32, Duration)>,
    pub(crate) address_map: Vec<(String, String)>,
}

/// The URL schemes a [`RedisBuilder::from_url`] takes.
pub const SCHEMES: &[&str] = lock_core::backend::schemes::REDIS;

impl RedisBackend {
    /// A builder for a backend on `url`: one server (`redis://`, `rediss://`), a Redis
    /// Cluster (`redis+cluster://host:port[,host:port…]/`) or a Sentinel-managed primary
    /// (`redis+sentinel://host:port[,host:port…]/service[/db]`). Nothing connects before
    /// [`RedisBuilder::connect`].
    ///
    /// ```no_run
    /// # async fn run() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_redis::{RedisBackend, Variant};
    ///
    /// let backend = RedisBackend::builder("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/locks")
    ///     .variant(Variant::Lua)
    ///     .prefix("billing:")
    ///     .replica_acks(1, Duration::from_millis(100))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> RedisBuilder {
        RedisBuilder {
            url: url.into(),
            variant: Variant::Lua,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            grace: None,
            timeout: Self::DEFAULT_TIMEOUT,
            pool_size: Self::DEFAULT_POOL_SIZE,
            acks: None,
            address_map: Vec::new(),
        }
    }

    /// Connects the Lua variant to `url`, with every other setting at its default; see
    /// [`RedisBackend::builder`] for the URL forms.
    ///
    /// # Errors
    /// As for [`RedisBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Connects the chosen variant to `url`; see [`RedisBackend::connect`].
    ///
    /// # Errors
    /// As for [`RedisBuilder::connect`].
    pub async fn connect_with(url: &str, variant: Variant) -> Result<Self> {
        Self::builder(url).variant(variant).connect().await
    }
}

impl RedisBuilder {
    /// A builder from a URL that carries its settings too, as `lock-config` takes them:
    /// any form [`RedisBackend::builder`] takes, `redis+watch://` / `rediss+watch://` for
    /// the WATCH variant, and the options `variant=lua|watch`, `prefix=`, `pool=`,
    /// `timeout=` (a duration: `2s`), `grace=`, `wait=N` (replicas to wait for, see
    /// [`RedisBuilder::replica_acks`]) with `wait_timeout=` (default 500ms). Other options
    /// stay in the URL for the server connection (`protocol=resp3`).
    ///
    /// ```
    /// use lock_redis::{RedisBuilder, Variant};
    ///
    /// let b = RedisBuilder::from_url("redis+watch://cache:6379/0?prefix=billing%3A&pool=32")?;
    /// assert!(format!("{b:?}").contains("billing:"));
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for another scheme or a malformed option (naming it, never
    /// the password).
    pub fn from_url(url: &str) -> Result<Self> {
        let mut url = lock_core::backend::UrlOptions::parse(lua::NAME, url);
        let scheme = url.scheme().to_owned();
        if !SCHEMES.contains(&scheme.as_str()) {
            return Err(config(
                lua::NAME,
                "not a Redis URL: expected redis://, rediss://, redis+watch://, \
                 redis+cluster:// or redis+sentinel://",
            ));
        }
        let mut b = RedisBackend::builder(String::new());
        if scheme.ends_with("+watch") {
            b = b.variant(Variant::Watch);
        }
        match url.take("variant")?.as_deref() {
            None => {}
            Some("lua") => b = b.variant(Variant::Lua),
            Some("watch") => b = b.variant(Variant::Watch),
            Some(other) => {
                return Err(config(
                    lua::NAME,
                    format!("variant={other:?}: expected lua or watch"),
                ))
            }
        }
        if let Some(p) = url.take("prefix")? {
            b = b.prefix(p);
        }
        if let Some(n) = url.take_parsed("pool", "a number")? {
            b = b.pool_size(n);
        }
        if let Some(t) = url.take_duration("timeout")? {
            b = b.timeout(t);
        }
        if let Some(g) = url.take_duration("grace")? {
            b = b.grace(g);
        }
        let wait_timeout = url.take_duration("wait_timeout")?;
        match (
            url.take_parsed("wait", "a number of replicas")?,
            wait_timeout,
        ) {
            (Some(n), t) => b = b.replica_acks(n, t.unwrap_or(Duration::from_millis(500))),
            (None, Some(_)) => {
                return Err(config(
                    lua::NAME,
                    "wait_timeout= without wait=N (the number of replicas to wait for)",
                ))
            }
            (None, None) => {}
        }
        // The server's URL: the same scheme without `+watch`, and the options nobody read,
        // each one redis-rs takes (any other is a typo it would ignore).
        let rest = url.into_client_url_with(REDIS_RS_OPTIONS)?;
        b.url = match scheme.strip_suffix("+watch") {
            Some(plain) => format!("{plain}{}", &rest[scheme.len()..]),
            None => rest,
        };
        Ok(b)
    }

    /// Which implementation of the contract to run (default [`Variant::Lua`]).
    pub fn variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// Puts every key under `prefix` instead of `lock:`; different prefixes never meet.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Keeps expired records for `grace` instead of each lock's ttl, for late detection
    /// (at most 365 days, checked by [`RedisBuilder::connect`] before any I/O).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// The deadline of every call (default 2 s, longer than zero): waiting for a pooled
    /// connection or a reconnect, and the server's answer. A call that hits it returns a
    /// retry-safe [`ErrorKind::Unavailable`] naming the deadline; the call may or may not
    /// have been applied (the contract's uncertain failure, which a retry resolves). Keep it
    /// well under your locks' ttl: a watchdog's prolong still waiting when the validity ends
    /// counts the lock as lost. On a cluster it is also each node's response timeout, after
    /// which the cluster connection counts the node as gone and reads the slot map again.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The WATCH variant's number of dedicated connections (default 16, at least 1; per
    /// primary on a cluster): at most that many operations run at once, the others wait for
    /// a connection. No effect on the Lua variant, whose multiplexed connection carries any
    /// number of operations.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// After every write, waits (`WAIT`) until `replicas` replicas acknowledged it, at most
    /// `timeout`; fewer in time is a retry-safe [`ErrorKind::Unavailable`] (the write stands
    /// on the primary). Off by default.
    ///
    /// Redis replicates asynchronously: a primary that fails right after granting a lock may
    /// take the grant with it, and the replica promoted in its place lets a second holder
    /// in. Waiting for one replica narrows that window to writes the replica has not
    /// received *and* a failover that picks a replica without them (Sentinel and Cluster
    /// prefer the most up-to-date replica); it does not close it — `WAIT` is not
    /// consensus — which is what fencing tokens are for. It costs one more round trip and
    /// the replication delay on every obtain, prolong and release; the README gives the
    /// figures measured.
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.acks = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Reaches the node that the servers announce as `announced` (`host:port`, as `CLUSTER
    /// SLOTS` or the sentinels name it) at `reachable` (`host:port`) instead: for servers
    /// behind NAT, in containers, or reached through a tunnel or proxy. The URL's own
    /// hosts are used as written.
    pub fn map_address(
        mut self,
        announced: impl Into<String>,
        reachable: impl Into<String>,
    ) -> Self {
        self.address_map.push((announced.into(), reachable.into()));
        self
    }

    /// Connects: finds the servers, opens a first connection (so a wrong address, password
    /// or certificate fails here), within [`RedisBackend::CONNECT_TIMEOUT`].
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed URL or setting, [`ErrorKind::InvalidInput`] for
    /// a grace over 365 days (all before any I/O), [`ErrorKind::PermissionDenied`] for a
    /// refused password, [`ErrorKind::Unavailable`] when the servers cannot be reached.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future drops whatever connections it opened.
    pub async fn connect(self) -> Result<RedisBackend> {
        let name = match self.variant {
            Variant::Lua => lua::NAME,
            Variant::Watch => watch::NAME,
        };
        let grace = self.grace.map(Grace::new).transpose()?;
        lock_core::backend::check_call_timeout(self.timeout).map_err(|e| config(name, e))?;
        if let Some((_, t)) = self.acks {
            if t.is_zero() || t >= self.timeout {
                return Err(config(
                    name,
                    format!(
                        "the replica wait ({t:?}) must be longer than zero and shorter than \
                         the call's deadline ({:?})",
                        self.timeout
                    ),
                ));
            }
        }
        let topology = Topology::parse(&self.url, name)?;
        let map = AddressMap::parse(&self.address_map, name)?;
        let connected = tokio::time::timeout(
            RedisBackend::CONNECT_TIMEOUT,
            self.connect_to(topology, map, name),
        )
        .await
        .unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Unavailable,
                name,
                Operation::Connect,
                format!(
                    "the servers did not answer within {:?}; it is safe to retry",
                    RedisBackend::CONNECT_TIMEOUT
                ),
            ))
        })?;
        let (engine, notifier) = connected;
        Ok(RedisBackend::build(
            engine,
            notifier,
            &self.prefix,
            grace,
            self.timeout,
        ))
    }

    async fn connect_to(
        &self,
        topology: Topology,
        map: AddressMap,
        name: &'static str,
    ) -> Result<(Engine, Notifier)> {
        let op = Operation::Connect;
        let acks = self
            .acks
            .map(|(replicas, timeout)| Acks { replicas, timeout });
        let primary = Arc::new(match topology {
            Topology::Cluster(nodes) => return self.connect_cluster(nodes, map, acks, name).await,
            Topology::Server(client) => Primary::Fixed(client),
            Topology::Sentinel(s) => Primary::sentinel(s, map, name)?,
        });
        let engine = match (self.variant, primary.as_ref()) {
            (Variant::Lua, Primary::Fixed(client)) => {
                // Two quick retries: a wrong address or certificate fails in about a second,
                // and later reconnects start over anyway on the next call.
                // No response timeout of the driver's own: each call's deadline bounds it.
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(2)
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(None);
                let conn = ConnectionManager::new_with_config(client.clone(), config)
                    .await
                    .map_err(|e| map_error(name, op, e))?;
                let node = client.get_connection_info().addr().to_string();
                Engine::Lua(Lua::new(Link {
                    kind: LinkKind::Server { conn, node },
                    acks,
                }))
            }
            (Variant::Lua, Primary::Sentinel { .. }) => {
                let shared = SentinelLink::new(primary.clone());
                // Fail now on a wrong address or password, not on the first lock.
                shared.connection(name, op).await?;
                Engine::Lua(Lua::new(Link {
                    kind: LinkKind::Sentinel(shared),
                    acks,
                }))
            }
            (Variant::Watch, _) => {
                let pool = Pool::new(primary.clone(), self.pool_size, name);
                pool.get(op).await?.done();
                Engine::Watch(Box::new(Watch {
                    pools: Pools::Primary(pool),
                    acks,
                }))
            }
        };
        Ok((engine, Notifier::new(primary, name)))
    }

    /// A cluster: one cluster connection for the Lua variant's calls and every sharded
    /// subscription; the WATCH variant's pools per primary.
    async fn connect_cluster(
        &self,
        nodes: Vec<redis::ConnectionInfo>,
        map: AddressMap,
        acks: Option<Acks>,
        name: &'static str,
    ) -> Result<(Engine, Notifier)> {
        let op = Operation::Connect;
        let sharded = Sharded::new();
        let client = redis::cluster::ClusterClientBuilder::new(nodes.clone())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(sharded.sender())
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(self.timeout)
            // Nothing is sent again behind our back: after a connection cut under a call the
            // client would re-send a call the server may have applied (an obtain or a release
            // applied twice). link.rs sends again only what a node refused before running it.
            .retries(0)
            .node_address_map(map.for_cluster())
            .build()
            .map_err(|e| map_error(name, op, e))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| map_error(name, op, e))?;
        let engine = match self.variant {
            Variant::Lua => Engine::Lua(Lua::new(Link {
                kind: LinkKind::Cluster(conn.clone()),
                acks,
            })),
            Variant::Watch => {
                let template = nodes[0].clone();
                let shards = Shards::new(conn.clone(), template, map, self.pool_size, name);
                Engine::Watch(Box::new(Watch {
                    pools: Pools::Cluster(Box::new(shards)),
                    acks,
                }))
            }
        };
        Ok((engine, sharded.into_notifier(conn, name)))
    }
}

fn config(name: &'static str, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, name, Operation::Validate, msg.into())
}

impl fmt::Debug for RedisBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBuilder")
            .field("url", &lock_core::redact_url(&self.url))
            .field("variant", &self.variant)
            .field("prefix", &self.prefix)
            .field("grace", &self.grace)
            .field("timeout", &self.timeout)
            .field("pool_size", &self.pool_size)
            .field("replica_acks", &self.acks)
            .field("address_map", &self.address_map)
            .finish()
    }
}

/// A builder from a URL with its options ([`RedisBuilder::from_url`]); with serde, a
/// configuration file holds the URL as a string.
///
/// ```
/// # use lock_redis::RedisBuilder;
/// #[derive(serde::Deserialize)]
/// struct Config {
///     locks: RedisBuilder,
/// }
/// let config: Config = serde_json::from_str(r#"{"locks": "redis://cache:6379/0?prefix=app%3A"}"#).unwrap();
/// # let _ = config.locks;
/// ```
impl TryFrom<String> for RedisBuilder {
    type Error = Error;

    fn try_from(url: String) -> Result<Self> {
        Self::from_url(&url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_everything_but_the_options_it_read() {
        let b = RedisBuilder::from_url(
            "rediss+watch://:pa+watch%3Ass@h:1/0?prefix=a%3A&protocol=resp3#insecure",
        )
        .unwrap();
        assert_eq!(
            b.url,
            "rediss://:pa+watch%3Ass@h:1/0?protocol=resp3#insecure"
        );
        assert_eq!((b.variant, b.prefix.as_str()), (Variant::Watch, "a:"));
        // `+watch` in a password is the password's, not the scheme's.
        let b = RedisBuilder::from_url("redis://:pa+watchss@h:1/0").unwrap();
        assert_eq!(b.url, "redis://:pa+watchss@h:1/0");
        assert_eq!(b.variant, Variant::Lua);
    }

    #[test]
    fn debug_never_shows_the_password() {
        let b = RedisBackend::builder("redis+sentinel://user:hunter2@s1:26379,s2/locks/1");
        let shown = format!("{b:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("user:***@s1:26379,s2/locks/1"), "{shown}");
        assert!(!format!("{:?}", RedisBackend::builder("rediss://:pw@h/0")).contains("pw@"));
    }

    #[tokio::test]
    async fn settings_are_checked_before_any_io() {
        // Port 1 on loopback: nothing listens, so reaching I/O would be Unavailable.
        let url = "redis://127.0.0.1:1/0";
        let cases = [
            RedisBackend::builder(url).timeout(Duration::ZERO),
            RedisBackend::builder(url).replica_acks(1, Duration::from_secs(5)),
            RedisBackend::builder(url).replica_acks(1, Duration::ZERO),
            RedisBackend::builder("redis+cluster://127.0.0.1:1/0"),
        ];
        for b in cases {
            let e = b.clone().connect().await.expect_err("refused");
            assert_eq!(e.kind(), ErrorKind::Config, "{b:?}: {e}");
        }
        let e = RedisBackend::builder(url)
            .grace(Duration::from_secs(400 * 86_400))
            .connect()
            .await
            .expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
}
