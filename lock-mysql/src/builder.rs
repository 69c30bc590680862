//! [`MySqlBuilder`]: every setting of a [`MySqlBackend`] before it is made, from code or
//! from a URL's options.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lock_core::backend::{Grace, UrlOptions};
use lock_core::{Error, ErrorKind, Operation, Result};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::MySqlPool;

use crate::backend::MySqlBackend;
use crate::error::map_error;
use crate::exec::Db;
use crate::sql::{Names, Session};
use crate::NAME;

/// The URL schemes a [`MySqlBuilder`] takes: `mysql://` and `mariadb://`.
pub const SCHEMES: &[&str] = lock_core::backend::schemes::MYSQL;

/// Where the connections come from.
#[derive(Clone)]
enum Source {
    Url(String),
    Pool(MySqlPool),
}

/// The settings of a [`MySqlBackend`], all known before it is made: from
/// [`MySqlBackend::builder`], [`MySqlBackend::builder_on`] or [`MySqlBuilder::from_url`],
/// consumed by [`MySqlBuilder::build`]. Its `Debug` never shows the URL's password.
#[derive(Clone, serde::Deserialize)]
#[serde(try_from = "String")]
#[must_use = "a builder does nothing until build()"]
pub struct MySqlBuilder {
    source: Source,
    table: String,
    grace: Option<Duration>,
    timeout: Duration,
    auto_migrate: bool,
    pool_size: u32,
}

impl fmt::Debug for MySqlBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Url(url) => lock_core::redact_url(url),
            Source::Pool(_) => "an existing pool".to_owned(),
        };
        f.debug_struct("MySqlBuilder")
            .field("source", &source)
            .field("table", &self.table)
            .field("grace", &self.grace)
            .field("timeout", &self.timeout)
            .field("auto_migrate", &self.auto_migrate)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

impl MySqlBuilder {
    fn new(source: Source) -> Self {
        MySqlBuilder {
            source,
            table: MySqlBackend::DEFAULT_TABLE.to_owned(),
            grace: None,
            timeout: MySqlBackend::DEFAULT_TIMEOUT,
            auto_migrate: true,
            pool_size: MySqlBackend::DEFAULT_POOL_SIZE,
        }
    }

    /// A builder from a URL that carries its settings too, as `lock-config` takes them:
    /// `mysql://user[:password]@host[:port]/database` (or `mariadb://`) with the options
    /// `table=`, `migrate=false`, `timeout=` (a duration: `5s`), `grace=`, `pool=`. Other
    /// options stay in the URL for sqlx (`ssl-mode=required`).
    ///
    /// ```
    /// use lock_mysql::MySqlBuilder;
    ///
    /// let b = MySqlBuilder::from_url("mariadb://app:secret@db/app?table=app_locks&timeout=2s")?;
    /// assert!(format!("{b:?}").contains("app_locks"));
    /// assert!(!format!("{b:?}").contains("secret"));
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for another scheme or a malformed option (naming it, never the
    /// password).
    pub fn from_url(url: &str) -> Result<Self> {
        let mut url = UrlOptions::parse(NAME, url);
        if !SCHEMES.contains(&url.scheme()) {
            return Err(not_a_url());
        }
        let mut b = Self::new(Source::Url(String::new()));
        if let Some(table) = url.take("table")? {
            b = b.table(&table);
        }
        if let Some(on) = url.take_flag("migrate")? {
            b = b.auto_migrate(on);
        }
        if let Some(t) = url.take_duration("timeout")? {
            b = b.timeout(t);
        }
        if let Some(g) = url.take_duration("grace")? {
            b = b.grace(g);
        }
        if let Some(n) = url.take_parsed("pool", "a number of connections")? {
            b = b.pool_size(n);
        }
        b.source = Source::Url(url.into_client_url());
        Ok(b)
    }

    /// Keeps the locks in `table` of the URL's database (matching `[a-z_][a-z0-9_]{0,47}`,
    /// checked by [`MySqlBuilder::build`]) instead of `distlock`; different tables never
    /// meet.
    pub fn table(mut self, table: &str) -> Self {
        table.clone_into(&mut self.table);
        self
    }

    /// Keeps expired rows for `grace` instead of each lock's ttl, for late detection (at
    /// most 365 days, checked by [`MySqlBuilder::build`]).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// The deadline of every call (default 5 s, longer than zero): waiting for a pooled
    /// connection, connecting, and both messages of the transaction, including any wait
    /// behind another operation on the same key. The server enforces it too
    /// (`innodb_lock_wait_timeout` and `lock_wait_timeout`, rounded up to whole seconds,
    /// and on MariaDB `max_statement_time`), so a statement cannot wait on past it. A call
    /// that hits it returns a retry-safe [`ErrorKind::Unavailable`] naming the deadline;
    /// the connection it used is closed, and the server rolls its transaction back.
    ///
    /// Keep it well under your locks' ttl: a watchdog's prolong that is still waiting when
    /// the validity ends counts the lock as lost.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// With `false`, the backend never creates the table: on first use it only checks
    /// that it is there with the right shape, and says what is missing. For a
    /// least-privilege user with `SELECT, INSERT, UPDATE, DELETE` on the table; run
    /// [`MySqlBackend::migrate`] once as a user that may create it (`migrate=false` in a
    /// `lock-config` URL). Default `true`: created on first use.
    pub fn auto_migrate(mut self, on: bool) -> Self {
        self.auto_migrate = on;
        self
    }

    /// How many connections the pool opens at most (default 16, at least 1) when the
    /// builder made it from a URL; no effect on an existing pool.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Makes the backend. No I/O: the pool connects on the first operation (or
    /// [`MySqlBackend::migrate`]). A builder made from a URL makes its pool here, which
    /// needs a current Tokio runtime; one on an existing pool does not.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed URL, a table name that is not a plain
    /// identifier, a zero deadline, or (from a URL) no current Tokio runtime;
    /// [`ErrorKind::InvalidInput`] for a grace over 365 days.
    pub fn build(self) -> Result<MySqlBackend> {
        let names = Names::new(&self.table).ok_or_else(|| {
            config(format!(
                "{:?}: the table name must match [a-z_][a-z0-9_]{{0,47}}",
                self.table
            ))
        })?;
        let grace = self.grace.map(Grace::new).transpose()?;
        lock_core::backend::check_call_timeout(self.timeout).map_err(config)?;
        let own = matches!(self.source, Source::Url(_));
        let session = Session::new(self.timeout, own);
        let pool = match self.source {
            Source::Pool(pool) => pool,
            Source::Url(url) => {
                if tokio::runtime::Handle::try_current().is_err() {
                    // sqlx's lazy pool would panic without one.
                    return Err(config(
                        "MySqlBuilder::build needs a Tokio runtime to make its pool: call it \
                         from async code (or inside Runtime::enter)",
                    ));
                }
                let Some(rest) = SCHEMES
                    .iter()
                    .find_map(|s| url.strip_prefix(&format!("{s}://")))
                else {
                    return Err(not_a_url());
                };
                let options = MySqlConnectOptions::from_str(&format!("mysql://{rest}"))
                    .map_err(|e| map_error(Operation::Connect, e))?;
                let settings = session.settings.clone();
                MySqlPoolOptions::new()
                    .max_connections(self.pool_size)
                    // The session's settings once per connection (see `sql::Session`).
                    .after_connect(move |conn, _| {
                        let settings = settings.clone();
                        Box::pin(async move {
                            sqlx::Executor::execute(conn, sqlx::raw_sql(&settings)).await?;
                            Ok(())
                        })
                    })
                    // Each call bounds its own wait for a connection by its deadline; this
                    // is only the pool's outer limit.
                    .acquire_timeout(Duration::from_secs(60))
                    // No ping before each transaction: a round trip more per operation.
                    // Dead idle connections are dropped together instead (`exec.rs`).
                    .test_before_acquire(false)
                    .connect_lazy_with(options)
            }
        };
        Ok(MySqlBackend::new(Db {
            pool,
            names,
            session,
            timeout: self.timeout,
            grace,
            auto_migrate: self.auto_migrate,
            schema: lock_sql::SchemaOnce::default(),
            sweeping: AtomicBool::new(false),
        }))
    }
}

impl MySqlBackend {
    /// A builder for a backend on `url` (`mysql://user[:password]@host[:port]/database` or
    /// `mariadb://…`, with sqlx's options such as `ssl-mode=required`); see
    /// [`MySqlBuilder`] for the settings, and [`MySqlBuilder::from_url`] for a URL that
    /// carries them too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_mysql::MySqlBackend;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let backend = MySqlBackend::builder("mysql://app@db.internal/app")
    ///     .table("app_locks")
    ///     .timeout(Duration::from_secs(2))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> MySqlBuilder {
        MySqlBuilder::new(Source::Url(url.into()))
    }

    /// A builder for a backend on an existing pool (its `pool_size` setting is ignored).
    /// Each transaction pins its session's `time_zone`, isolation level and lock waits
    /// first (see [`MySqlBuilder::timeout`]); the pool's connections keep those settings.
    pub fn builder_on(pool: MySqlPool) -> MySqlBuilder {
        MySqlBuilder::new(Source::Pool(pool))
    }

    /// A backend on `url` with every setting at its default. It connects lazily: nothing
    /// is sent until the first operation (or [`MySqlBackend::migrate`]), so it needs a
    /// Tokio runtime to make its pool in, but no server yet.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed URL, or when called outside a Tokio runtime. A
    /// wrong password, a missing database or an unreachable server shows on the first
    /// operation.
    pub fn lazy(url: &str) -> Result<Self> {
        Self::builder(url).build()
    }
}

fn config(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, NAME, Operation::Validate, message)
}

fn not_a_url() -> Error {
    config("not a MySQL URL: expected mysql://user[:password]@host[:port]/database (or mariadb://)")
}

/// A builder from a URL with its options ([`MySqlBuilder::from_url`]); with serde, a
/// configuration file holds the URL as a string.
///
/// ```
/// # use lock_mysql::MySqlBuilder;
/// #[derive(serde::Deserialize)]
/// struct Config {
///     locks: MySqlBuilder,
/// }
/// let config: Config = serde_json::from_str(r#"{"locks": "mysql://app@db/app?table=locks"}"#).unwrap();
/// # let _ = config.locks;
/// ```
impl TryFrom<String> for MySqlBuilder {
    type Error = Error;

    fn try_from(url: String) -> Result<Self> {
        Self::from_url(&url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn building_outside_a_runtime_is_an_error_not_a_panic() {
        let err = MySqlBackend::builder("mysql://u@127.0.0.1:1/d")
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(err.to_string().contains("Tokio runtime"), "{err}");
    }

    #[test]
    fn a_url_keeps_everything_but_the_options_it_read() {
        let b = MySqlBuilder::from_url(
            "mariadb://u:p%40w@h/d?table=t&ssl-mode=required&pool=4&migrate=off&timeout=2s",
        )
        .unwrap();
        let Source::Url(url) = &b.source else {
            panic!("a URL builder")
        };
        assert_eq!(url, "mariadb://u:p%40w@h/d?ssl-mode=required");
        assert_eq!(b.table, "t");
        assert_eq!((b.pool_size, b.auto_migrate), (4, false));
        assert_eq!(b.timeout, Duration::from_secs(2));
        let err = MySqlBuilder::from_url("mysql://u:secret@h/d?migrate=perhaps").unwrap_err();
        assert!(err.to_string().contains("true or false"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = MySqlBuilder::from_url("postgres://u:secret@h/d").unwrap_err();
        assert!(err.to_string().contains("not a MySQL URL"), "{err}");
    }

    #[test]
    fn settings_are_checked_before_any_io() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _in = rt.enter();
        let url = "mysql://u:secret@127.0.0.1:1/d";
        for (builder, says) in [
            (MySqlBackend::builder(url).table("Bad"), "must match"),
            (
                MySqlBackend::builder(url).timeout(Duration::ZERO),
                "longer than zero",
            ),
            (
                MySqlBackend::builder(url).timeout(Duration::MAX),
                "at most 3600s",
            ),
            (MySqlBackend::builder("postgres://x/y"), "not a MySQL URL"),
        ] {
            let err = builder.build().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{err}");
            assert!(err.to_string().contains(says), "{err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        let grace = MySqlBackend::builder(url).grace(Duration::MAX).build();
        assert_eq!(grace.unwrap_err().kind(), ErrorKind::InvalidInput);
        assert!(MySqlBackend::builder(url).build().is_ok());
        assert!(MySqlBackend::builder("mariadb://u@h/d").build().is_ok());
    }
}
