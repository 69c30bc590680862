//! Choose a lock backend by configuration, not by code: the same program locks through a
//! directory in development and through Redis or Postgres in production.
//!
//! ```
//! use lock_config::LockConfig;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! // In production: LOCK_URL=redis://cache:6379/0 LOCK_TTL=5m
//! let config = LockConfig::from_url("memory:").ttl("30s");
//! let locker = config.locker().await?;
//! let guard = locker.lock("nightly-report").obtain().await?.obtained().expect("free");
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # URLs
//! | URL | backend |
//! |---|---|
//! | `memory:` | a fresh in-process [`MemoryBackend`] (tests) |
//! | `file:///var/lock/myapp`, `file://locks`, `file:locks` | [`lock_file::FileBackend`] in that directory (relative paths from the working directory) |
//! | `redis://[user:pass@]host:port/db`, `rediss://…` | Redis, Lua variant |
//! | `redis+watch://…`, `rediss+watch://…`, or `?variant=watch` | Redis, WATCH/MULTI variant |
//! | `redis+cluster://[user:pass@]host:port[,host:port…]/` | a Redis Cluster (the hosts are seeds) |
//! | `redis+sentinel://[user:pass@]host:port[,host:port…]/service[/db]` | the primary Redis Sentinel names for `service` |
//! | `postgres://user@host/db?table=schema.table` | Postgres (`postgresql://` too) |
//! | `mysql://user@host:port/db?table=name` | MySQL or MariaDB (`mariadb://` too) |
//! | `etcd://[user:pass@]host:port[,host:port…]/prefix`, `etcds://…?ca=PATH[&cert=PATH&key=PATH]` | etcd, `etcds://` over TLS (cargo feature `etcd`, off by default: building it needs `protoc`) |
//!
//! Options in the query string, removed before the URL reaches the backend:
//! `grace=30s` (any backend); for Redis `prefix=myapp:`, `variant=lua|watch`, `pool=16`,
//! `timeout=2s` (the deadline of one call), `wait=1` (wait for one replica to acknowledge
//! each write) with `wait_timeout=500ms` (see `RedisBuilder::replica_acks`);
//! for Postgres `table=[schema.]table`, `notify=false` (behind PgBouncer),
//! `statements=simple` (behind PgBouncer before 1.21), `durable=false`, `migrate=false` (a least-privilege role: check the schema, never create
//! it), `timeout=5s` (the deadline of one call); for MySQL/MariaDB `table=`, `migrate=false`,
//! `timeout=`, `grace=`, `pool=`; for etcd `timeout=`, `grace=`, and with `etcds://` `ca=`, `cert=`, `key=` (PEM files). Other query parameters go to the backend's own client
//! (`sslmode=…`, `ssl-mode=…`).
//!
//! Each backend crate reads its own URLs and options (`MemoryBackend::from_url`,
//! `lock_file::FileBackend::from_url`, `lock_redis::RedisBuilder::from_url`,
//! `lock_postgres::PostgresBuilder::from_url`, `lock_mysql::MySqlBuilder::from_url`,
//! `lock_etcd::EtcdBuilder::from_url`, all through `lock_core::backend::UrlOptions`, which
//! percent-decodes values: `prefix=a%3Ab` is `a:b`); this crate only picks the crate by
//! scheme. (The `url` crate is not used: it refuses the comma-separated hosts of
//! `redis+cluster://` and `redis+sentinel://`, and turns `file:locks` into an absolute path.)
//!
//! A URL with an unknown scheme, a malformed option, or a scheme whose backend this build
//! left out (cargo features `file`, `redis`, `postgres`, `mysql`, all on by default, and
//! `etcd`, off by default because etcd's client compiles its API with `protoc`) is an
//! [`ErrorKind::Config`] error that names the problem.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::UrlOptions;
use lock_core::{Error, ErrorKind, LockBackend, Locker, MemoryBackend, Operation, Result, Retry};
use serde::Deserialize;

pub use lock_core::parse_duration;
use lock_core::redact_url;

const NAME: &str = "LockConfig";

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, NAME, Operation::Connect, message)
}

/// Everything a program needs to lock, from a file (TOML, JSON… through serde), the
/// environment ([`LockConfig::from_env`]) or code.
///
/// ```toml
/// [lock]
/// url = "redis://cache.internal:6379/0?prefix=billing:"
/// ttl = "5m"
/// wait = "30s"
/// grace = "10m"
/// retry = "exponential:10ms..1s+notified"
/// ```
/// Unknown fields are refused, so a typo (`tll`) is an error, not a silent default.
///
/// Durations are human strings (`30s`, `5m`, `1h`); `retry` is `none`, `linear:<interval>`,
/// `exponential:<min>..<max>`, each optionally followed by `+notified`, or `notified`
/// (the default: woken by the backend's release notification, with a jittered fallback poll).
///
/// Its `Debug` output masks the URL's password (see [`redact_url`]).
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockConfig {
    /// The backend URL; see the crate docs.
    pub url: String,
    /// Prepended to every key by the [`Locker`].
    #[serde(default)]
    pub prefix: Option<String>,
    /// The default ttl of locks.
    #[serde(default)]
    pub ttl: Option<String>,
    /// How long an obtain waits for a busy lock by default.
    #[serde(default)]
    pub wait: Option<String>,
    /// How long expired records are kept to tell late from lost (default: each lock's ttl).
    #[serde(default)]
    pub grace: Option<String>,
    /// The retry strategy while waiting.
    #[serde(default)]
    pub retry: Option<String>,
}

impl std::fmt::Debug for LockConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockConfig")
            .field("url", &redact_url(&self.url))
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("grace", &self.grace)
            .field("retry", &self.retry)
            .finish()
    }
}

impl LockConfig {
    /// A configuration with only a URL.
    pub fn from_url(url: impl Into<String>) -> Self {
        LockConfig {
            url: url.into(),
            ..LockConfig::default()
        }
    }

    /// Reads `LOCK_URL` (required), `LOCK_PREFIX`, `LOCK_TTL`, `LOCK_WAIT`, `LOCK_GRACE` and
    /// `LOCK_RETRY`.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] when `LOCK_URL` is not set.
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Ok(LockConfig {
            url: var("LOCK_URL").ok_or_else(|| {
                config_error("LOCK_URL is not set: e.g. LOCK_URL=file:///var/lock/myapp")
            })?,
            prefix: var("LOCK_PREFIX"),
            ttl: var("LOCK_TTL"),
            wait: var("LOCK_WAIT"),
            grace: var("LOCK_GRACE"),
            retry: var("LOCK_RETRY"),
        })
    }

    /// Sets the default ttl (`"30s"`).
    pub fn ttl(mut self, ttl: impl Into<String>) -> Self {
        self.ttl = Some(ttl.into());
        self
    }

    /// Sets the default wait (`"10s"`).
    pub fn wait(mut self, wait: impl Into<String>) -> Self {
        self.wait = Some(wait.into());
        self
    }

    /// Connects the backend the URL names (grace applied).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a bad URL or option; the backend's own errors when it
    /// cannot be reached.
    pub async fn backend(&self) -> Result<Arc<dyn LockBackend>> {
        let mut url = self.url.clone();
        if let Some(grace) = &self.grace {
            url = with_param(&url, "grace", grace);
        }
        connect(&url).await
    }

    /// A [`Locker`] on the backend, with the prefix, ttl, wait and retry applied.
    ///
    /// # Errors
    /// As for [`LockConfig::backend`], and [`ErrorKind::Config`] for a bad duration or
    /// retry strategy.
    pub async fn locker(&self) -> Result<Locker> {
        let mut locker = Locker::new(self.backend().await?);
        if let Some(prefix) = &self.prefix {
            locker = locker.with_prefix(prefix.clone());
        }
        if let Some(ttl) = &self.ttl {
            locker = locker.with_ttl(duration("ttl", ttl)?)?;
        }
        if let Some(wait) = &self.wait {
            locker = locker.with_wait(duration("wait", wait)?);
        }
        if let Some(retry) = &self.retry {
            locker = locker.with_retry(parse_retry(retry)?);
        }
        Ok(locker)
    }
}

fn duration(what: &str, text: &str) -> Result<Duration> {
    parse_duration(text).ok_or_else(|| {
        config_error(format!(
            "{what} = {text:?} is not a duration: write e.g. 250ms, 30s, 5m, 1h"
        ))
    })
}

/// Parses a retry strategy: `none`, `notified`, `linear:<interval>`,
/// `exponential:<min>..<max>`, the last two optionally followed by `+notified`.
///
/// # Errors
/// [`ErrorKind::Config`] naming the expected forms.
pub fn parse_retry(text: &str) -> Result<Retry> {
    let bad = || {
        config_error(format!(
            "retry = {text:?}: expected none, notified, linear:100ms or exponential:5ms..250ms \
             (optionally +notified)"
        ))
    };
    let (base, notified) = match text.strip_suffix("+notified") {
        Some(base) => (base, true),
        None => (text, false),
    };
    let retry = match base.split_once(':') {
        None if base == "none" => Retry::none(),
        None if base == "notified" => Retry::default(),
        Some(("linear", d)) => Retry::linear(parse_duration(d).ok_or_else(bad)?),
        Some(("exponential", range)) => {
            let (min, max) = range.split_once("..").ok_or_else(bad)?;
            let (min, max) = (
                parse_duration(min).ok_or_else(bad)?,
                parse_duration(max).ok_or_else(bad)?,
            );
            if min > max || min.is_zero() {
                return Err(bad());
            }
            Retry::exponential(min, max)
        }
        _ => return Err(bad()),
    };
    Ok(if notified { retry.notified() } else { retry })
}

/// The backend a URL names; see the crate docs for the forms. Each backend crate parses its
/// own URLs and options (`MemoryBackend::from_url`, `FileBackend::from_url`,
/// `RedisBuilder::from_url`, `PostgresBuilder::from_url`); this only picks the crate.
///
/// # Errors
/// [`ErrorKind::Config`] for an unknown scheme, a malformed option or a backend this
/// build left out; the backend's own errors when it cannot be reached.
pub async fn connect(url: &str) -> Result<Arc<dyn LockBackend>> {
    let Some((scheme, _)) = url.split_once(':') else {
        return Err(config_error(format!(
            "{:?} is not a lock URL: expected memory:, file://DIR, redis://…, postgres://…, mysql://…, etcd://…",
            redact_url(url)
        )));
    };
    let backend = BACKENDS
        .iter()
        .find(|b| b.schemes.contains(&scheme))
        .ok_or_else(|| {
            config_error(format!(
                "unknown lock URL scheme {scheme:?}: expected {}",
                BACKENDS
                    .iter()
                    .flat_map(|b| b.schemes.iter().copied())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    (backend.connect)(url.to_owned()).await
}

type Connect = fn(String) -> futures_core::future::BoxFuture<'static, Result<Arc<dyn LockBackend>>>;

/// A backend crate: the URL schemes it takes and how it connects (or, left out of this
/// build, the error naming its cargo feature).
struct Backend {
    schemes: &'static [&'static str],
    connect: Connect,
}

/// How a backend crate behind cargo feature `$feature` connects `$url`, or, left out of
/// this build, the error that names the feature.
macro_rules! built_in {
    ($feature:literal, |$url:ident| $connect:expr) => {
        |$url| {
            Box::pin(async move {
                #[cfg(feature = $feature)]
                {
                    let backend: Arc<dyn LockBackend> = Arc::new($connect);
                    Ok(backend)
                }
                #[cfg(not(feature = $feature))]
                {
                    let _ = $url;
                    Err(left_out($feature))
                }
            })
        }
    };
}

const BACKENDS: &[Backend] = &[
    Backend {
        schemes: lock_core::backend::schemes::MEMORY,
        connect: |url| {
            Box::pin(async move {
                let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::from_url(&url)?);
                Ok(backend)
            })
        },
    },
    Backend {
        schemes: lock_core::backend::schemes::FILE,
        connect: built_in!("file", |url| lock_file::FileBackend::from_url(&url)?),
    },
    Backend {
        schemes: lock_core::backend::schemes::REDIS,
        connect: built_in!("redis", |url| {
            lock_redis::RedisBuilder::from_url(&url)?.connect().await?
        }),
    },
    Backend {
        schemes: lock_core::backend::schemes::POSTGRES,
        connect: built_in!("postgres", |url| {
            lock_postgres::PostgresBuilder::from_url(&url)?.build()?
        }),
    },
    Backend {
        schemes: lock_core::backend::schemes::MYSQL,
        connect: built_in!("mysql", |url| {
            lock_mysql::MySqlBuilder::from_url(&url)?.build()?
        }),
    },
    Backend {
        schemes: lock_core::backend::schemes::ETCD,
        connect: built_in!("etcd", |url| {
            lock_etcd::EtcdBuilder::from_url(&url)?.connect().await?
        }),
    },
];

#[cfg(not(all(
    feature = "file",
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "etcd"
)))]
fn left_out(feature: &str) -> Error {
    config_error(format!(
        "this program was built without the {feature} backend: enable the cargo feature \
         `{feature}` of the crate it depends on (`distlock = {{ version = \"0.1\", features = \
         [\"{feature}\"] }}`; lockrun: `cargo install lockrun --features {feature}`)"
    ))
}

fn with_param(url: &str, key: &str, value: &str) -> String {
    let mut options = UrlOptions::parse(NAME, url);
    options.set(key, value);
    options.into_client_url()
}

#[cfg(test)]
mod tests;
