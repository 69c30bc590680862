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
//!
//! Options in the query string, removed before the URL reaches the backend:
//! `grace=30s` (any backend); for Redis `prefix=myapp:`, `variant=lua|watch`, `pool=16`,
//! `timeout=2s` (the deadline of one call), `wait=1` (wait for one replica to acknowledge
//! each write) with `wait_timeout=500ms` (see `RedisBuilder::replica_acks`);
//! for Postgres `table=[schema.]table`, `notify=false` (behind PgBouncer),
//! `durable=false`, `migrate=false` (a least-privilege role: check the schema, never create
//! it), `timeout=5s` (the deadline of one call). Other query parameters go to the backend's own client (`sslmode=…`).
//!
//! A URL with an unknown scheme, a malformed option, or a scheme whose backend this build
//! left out (cargo features `file`, `redis`, `postgres`, all on by default) is an
//! [`ErrorKind::Config`] error that names the problem.

mod duration;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, ErrorKind, LockBackend, Locker, MemoryBackend, Operation, Result, Retry};
use serde::Deserialize;

pub use duration::parse_duration;

const NAME: &str = "lock-config";

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
#[derive(Debug, Clone, Default, Deserialize)]
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

/// The backend a URL names; see the crate docs for the forms.
///
/// # Errors
/// [`ErrorKind::Config`] for an unknown scheme, a malformed option or a backend this
/// build left out; the backend's own errors when it cannot be reached.
pub async fn connect(url: &str) -> Result<Arc<dyn LockBackend>> {
    let (scheme, _) = url.split_once(':').ok_or_else(|| {
        config_error(format!(
            "{:?} is not a lock URL: expected memory:, file://DIR, redis://…, postgres://…",
            redact(url)
        ))
    })?;
    let (base, mut params) = split_query(url);
    let grace = take(&mut params, "grace")?
        .map(|g| duration("grace", &g))
        .transpose()?;
    let backend: Arc<dyn LockBackend> = match scheme {
        "memory" => {
            let mut b = MemoryBackend::new();
            if let Some(g) = grace {
                b = b.with_grace(g)?;
            }
            no_leftovers(scheme, &params)?;
            Arc::new(b)
        }
        "file" => file(&base, grace, &params)?,
        "redis" | "rediss" | "redis+watch" | "rediss+watch" | "redis+cluster"
        | "rediss+cluster" | "redis+sentinel" | "rediss+sentinel" => {
            redis(scheme, &base, grace, params).await?
        }
        "postgres" | "postgresql" => postgres(&base, grace, params)?,
        other => {
            return Err(config_error(format!(
                "unknown lock URL scheme {other:?}: expected memory, file, redis, rediss, \
                 redis+watch, redis+cluster, redis+sentinel or postgres"
            )))
        }
    };
    Ok(backend)
}

fn no_leftovers(scheme: &str, params: &[(String, String)]) -> Result<()> {
    match params.first() {
        None => Ok(()),
        Some((k, _)) => Err(config_error(format!(
            "unknown option {k:?} for a {scheme}: URL"
        ))),
    }
}

#[cfg(feature = "file")]
fn file(
    base: &str,
    grace: Option<Duration>,
    params: &[(String, String)],
) -> Result<Arc<dyn LockBackend>> {
    no_leftovers("file", params)?;
    let path = base
        .strip_prefix("file://")
        .or_else(|| base.strip_prefix("file:"))
        .unwrap_or(base);
    if path.is_empty() {
        return Err(config_error(
            "file: URL without a directory: write file:///var/lock/myapp or file://locks",
        ));
    }
    let mut b = lock_file::FileBackend::new(path)?;
    if let Some(g) = grace {
        b = b.with_grace(g)?;
    }
    Ok(Arc::new(b))
}

#[cfg(not(feature = "file"))]
fn file(_: &str, _: Option<Duration>, _: &[(String, String)]) -> Result<Arc<dyn LockBackend>> {
    Err(left_out("file"))
}

#[cfg(feature = "redis")]
async fn redis(
    scheme: &str,
    base: &str,
    grace: Option<Duration>,
    mut params: Vec<(String, String)>,
) -> Result<Arc<dyn LockBackend>> {
    use lock_redis::{RedisBackend, Variant};
    let mut variant = if scheme.ends_with("+watch") {
        Variant::Watch
    } else {
        Variant::Lua
    };
    match take(&mut params, "variant")?.as_deref() {
        None => {}
        Some("lua") => variant = Variant::Lua,
        Some("watch") => variant = Variant::Watch,
        Some(other) => {
            return Err(config_error(format!(
                "variant={other:?}: expected lua or watch"
            )))
        }
    }
    let prefix = take(&mut params, "prefix")?;
    let pool = take(&mut params, "pool")?
        .map(|p| {
            p.parse::<usize>()
                .map_err(|_| config_error(format!("pool={p:?} is not a number")))
        })
        .transpose()?;
    let timeout = take(&mut params, "timeout")?
        .map(|t| duration("timeout", &t))
        .transpose()?;
    let wait_timeout = take(&mut params, "wait_timeout")?
        .map(|t| duration("wait_timeout", &t))
        .transpose()?;
    let wait = take(&mut params, "wait")?
        .map(|n| {
            n.parse::<u32>()
                .map_err(|_| config_error(format!("wait={n:?} is not a number of replicas")))
        })
        .transpose()?;
    // What is left goes to the server's own URL (`protocol=resp3`, …).
    let url = rebuild(&base.replacen("+watch", "", 1), &params);
    let mut b = RedisBackend::builder(url).variant(variant);
    if let Some(p) = prefix {
        b = b.prefix(p);
    }
    if let Some(g) = grace {
        b = b.grace(g);
    }
    if let Some(n) = pool {
        b = b.pool_size(n);
    }
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    match (wait, wait_timeout) {
        (Some(n), t) => b = b.replica_acks(n, t.unwrap_or(Duration::from_millis(500))),
        (None, Some(_)) => {
            return Err(config_error(
                "wait_timeout= without wait=N (the number of replicas to wait for)",
            ))
        }
        (None, None) => {}
    }
    Ok(Arc::new(b.connect().await?))
}

#[cfg(not(feature = "redis"))]
async fn redis(
    _: &str,
    _: &str,
    _: Option<Duration>,
    _: Vec<(String, String)>,
) -> Result<Arc<dyn LockBackend>> {
    Err(left_out("redis"))
}

#[cfg(feature = "postgres")]
fn postgres(
    base: &str,
    grace: Option<Duration>,
    mut params: Vec<(String, String)>,
) -> Result<Arc<dyn LockBackend>> {
    use lock_postgres::PostgresBackend;
    let flag = |v: Option<String>, name: &str| -> Result<Option<bool>> {
        v.map(|v| match v.as_str() {
            "true" | "on" | "1" => Ok(true),
            "false" | "off" | "0" => Ok(false),
            _ => Err(config_error(format!(
                "{name}={v:?}: expected true or false"
            ))),
        })
        .transpose()
    };
    let table = take(&mut params, "table")?;
    let schema = take(&mut params, "schema")?;
    let notify = flag(take(&mut params, "notify")?, "notify")?;
    let durable = flag(take(&mut params, "durable")?, "durable")?;
    let migrate = flag(take(&mut params, "migrate")?, "migrate")?;
    let timeout = take(&mut params, "timeout")?
        .map(|t| duration("timeout", &t))
        .transpose()?;
    let mut b = PostgresBackend::connect(&rebuild(base, &params))?;
    if table.is_some() || schema.is_some() {
        let table = table.unwrap_or_else(|| PostgresBackend::DEFAULT_TABLE.to_owned());
        let (s, t) = match table.split_once('.') {
            Some((s, t)) => (s.to_owned(), t.to_owned()),
            None => (
                schema.unwrap_or_else(|| PostgresBackend::DEFAULT_SCHEMA.to_owned()),
                table,
            ),
        };
        b = b.with_table(&s, &t)?;
    }
    if let Some(g) = grace {
        b = b.with_grace(g)?;
    }
    if let Some(n) = notify {
        b = b.with_notifications(n);
    }
    if let Some(d) = durable {
        b = b.with_durable_commits(d);
    }
    if let Some(m) = migrate {
        b = b.with_auto_migrate(m);
    }
    if let Some(t) = timeout {
        b = b.with_timeout(t)?;
    }
    Ok(Arc::new(b))
}

#[cfg(not(feature = "postgres"))]
fn postgres(
    _: &str,
    _: Option<Duration>,
    _: Vec<(String, String)>,
) -> Result<Arc<dyn LockBackend>> {
    Err(left_out("postgres"))
}

#[cfg(not(all(feature = "file", feature = "redis", feature = "postgres")))]
fn left_out(feature: &str) -> Error {
    config_error(format!(
        "this build of lock-config left out the {feature} backend: enable its cargo feature \
         `{feature}`"
    ))
}

/// The URL without its query, and the query's pairs.
fn split_query(url: &str) -> (String, Vec<(String, String)>) {
    // A fragment (`#insecure` for rediss) stays with the base.
    let (url, fragment) = match url.split_once('#') {
        Some((u, f)) => (u, format!("#{f}")),
        None => (url, String::new()),
    };
    match url.split_once('?') {
        None => (format!("{url}{fragment}"), Vec::new()),
        Some((base, query)) => (
            format!("{base}{fragment}"),
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (p.to_owned(), String::new()),
                })
                .collect(),
        ),
    }
}

/// Removes option `key` and returns its value, percent-decoded (`%3A` is `:`; `+` stays a
/// plus). Options lock-config does not know stay encoded for the backend's own client.
///
/// # Errors
/// [`ErrorKind::Config`] when the decoded value is not UTF-8.
fn take(params: &mut Vec<(String, String)>, key: &str) -> Result<Option<String>> {
    let Some(i) = params.iter().position(|(k, _)| k == key) else {
        return Ok(None);
    };
    let raw = params.remove(i).1;
    percent_encoding::percent_decode_str(&raw)
        .decode_utf8()
        .map(|v| Some(v.into_owned()))
        .map_err(|_| config_error(format!("{key}=…: the percent-decoded value is not UTF-8")))
}

fn rebuild(base: &str, params: &[(String, String)]) -> String {
    if params.is_empty() {
        return base.to_owned();
    }
    let (base, fragment) = match base.split_once('#') {
        Some((b, f)) => (b, format!("#{f}")),
        None => (base, String::new()),
    };
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{base}?{}{fragment}", query.join("&"))
}

fn with_param(url: &str, key: &str, value: &str) -> String {
    let (base, mut params) = split_query(url);
    params.retain(|(k, _)| k != key);
    params.push((key.to_owned(), value.to_owned()));
    rebuild(&base, &params)
}

/// The URL with its secrets masked, for messages: see [`lock_core::redact_url`].
pub use lock_core::redact_url as redact;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_percent_decoded_and_the_rest_passed_on_encoded() {
        let (base, mut params) = split_query("redis://h:1/0?prefix=a%3Ab%2F+c&user=x%40y#frag");
        assert_eq!(
            take(&mut params, "prefix").unwrap().as_deref(),
            Some("a:b/+c")
        );
        assert_eq!(rebuild(&base, &params), "redis://h:1/0?user=x%40y#frag");
        let (_, mut bad) = split_query("memory:?prefix=%FF");
        assert_eq!(
            take(&mut bad, "prefix").unwrap_err().kind(),
            ErrorKind::Config
        );
    }

    #[tokio::test]
    async fn a_percent_encoded_option_is_decoded() {
        assert!(connect("memory:?grace=1%6D").await.is_ok(), "grace=1m");
    }

    #[cfg(feature = "file")]
    #[tokio::test]
    async fn memory_and_file_urls_give_backends() {
        assert_eq!(connect("memory:").await.unwrap().name(), "memory");
        let dir = std::env::temp_dir().join(format!("lock-config-{}", std::process::id()));
        let url = format!("file://{}?grace=1m", dir.display());
        assert_eq!(connect(&url).await.unwrap().name(), "file");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn bad_urls_say_what_is_wrong() {
        let mut cases = vec![
            ("nonsense", "not a lock URL"),
            ("mysql://db/x", "unknown lock URL scheme"),
            ("memory:?grace=soon", "not a duration"),
            ("memory:?colour=blue", "unknown option"),
        ];
        if cfg!(feature = "file") {
            cases.push(("file://", "without a directory"));
        }
        if cfg!(feature = "redis") {
            cases.push((
                "redis://127.0.0.1:1/0?variant=fast",
                "expected lua or watch",
            ));
            cases.push((
                "redis+sentinel://:secret@127.0.0.1:1/svc?wait_timeout=1s",
                "wait_timeout= without wait=N",
            ));
            cases.push((
                "redis+cluster://:secret@127.0.0.1:1/?wait=x",
                "not a number",
            ));
            cases.push(("redis+cluster://:secret@127.0.0.1:1/0", "one database"));
            cases.push(("redis+sentinel://:secret@127.0.0.1:1/", "service name"));
        }
        if cfg!(feature = "postgres") {
            cases.push(("postgres://u@h/d?notify=maybe", "expected true or false"));
            cases.push(("postgres://u@h/d?table=Bad-Name", "must match"));
        }
        for (url, says) in cases {
            let err = connect(url).await.map(|_| ()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{url}: {err}");
            assert!(err.to_string().contains(says), "{url}: {err}");
            assert!(!err.to_string().contains("secret"), "{url}: {err}");
        }
    }

    #[tokio::test]
    async fn a_backend_left_out_of_the_build_names_its_feature() {
        for (url, feature, built) in [
            ("file:///tmp/x", "file", cfg!(feature = "file")),
            ("redis://127.0.0.1:1/0", "redis", cfg!(feature = "redis")),
            (
                "postgres://u@127.0.0.1:1/d",
                "postgres",
                cfg!(feature = "postgres"),
            ),
        ] {
            if built {
                continue;
            }
            let err = connect(url).await.map(|_| ()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config);
            assert!(
                err.to_string().contains(&format!("feature `{feature}`")),
                "{err}"
            );
        }
    }

    #[test]
    fn retry_strategies_parse() {
        for ok in [
            "none",
            "notified",
            "linear:100ms",
            "exponential:5ms..250ms+notified",
        ] {
            assert!(parse_retry(ok).is_ok(), "{ok}");
        }
        for bad in [
            "sometimes",
            "linear:x",
            "exponential:1s",
            "exponential:5s..1s",
        ] {
            assert!(parse_retry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn query_options_are_split_off_and_passwords_redacted() {
        let (base, params) = split_query("rediss://:pw@h:6379/0?prefix=a:&pool=4#insecure");
        assert_eq!(base, "rediss://:pw@h:6379/0#insecure");
        assert_eq!(params.len(), 2);
        assert_eq!(
            rebuild(&base, &params[1..]),
            "rediss://:pw@h:6379/0?pool=4#insecure"
        );
        assert_eq!(redact("redis://u:secret@h/0"), "redis://u:***@h/0");
        assert_eq!(redact("postgres://u@h/d"), "postgres://u@h/d");
    }

    #[tokio::test]
    async fn a_config_file_makes_a_locker() {
        let config: LockConfig = serde_json::from_str(
            r#"{"url": "memory:", "prefix": "app:", "ttl": "5s", "wait": "0s", "retry": "none"}"#,
        )
        .unwrap();
        let locker = config.locker().await.unwrap();
        let guard = locker
            .lock("k")
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap();
        assert_eq!(guard.key().as_str(), "app:k");
        assert!(serde_json::from_str::<LockConfig>(r#"{"url": "memory:", "tll": "5s"}"#).is_err());
    }

    #[tokio::test]
    async fn a_toml_section_makes_a_locker() {
        #[derive(Deserialize)]
        struct App {
            lock: LockConfig,
        }
        let app: App = toml::from_str(
            "[lock]\nurl = \"memory:?grace=10m\"\nttl = \"5m\"\nwait = \"30s\"\n\
             retry = \"exponential:10ms..1s+notified\"\n",
        )
        .unwrap();
        let locker = app.lock.locker().await.unwrap();
        assert_eq!(locker.backend().name(), "memory");
        let guard = locker
            .lock("k")
            .try_obtain()
            .await
            .unwrap()
            .obtained()
            .unwrap();
        assert!(
            guard.remaining() > std::time::Duration::from_secs(240),
            "ttl 5m applied"
        );
    }
}
