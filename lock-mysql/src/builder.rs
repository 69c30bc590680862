//! [`MySqlBuilder`]: every setting of a [`MySqlBackend`] before it is made, from code or
//! from a URL's options.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;

use lock_core::backend::UrlOptions;
use lock_core::{Error, ErrorKind, Operation, Result};
use sqlx::mysql::MySqlConnectOptions;
use sqlx::MySqlPool;

use crate::backend::MySqlBackend;
use crate::error::map_error;
use crate::exec::Db;
use crate::sql::{Names, Session};
use crate::NAME;

/// The URL options sqlx's MySQL driver reads (it ignores any other): passed to it; any
/// other option the builder does not read is refused as a typo.
const SQLX_OPTIONS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslca",
    "ssl-ca",
    "charset",
    "collation",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "socket",
    "timezone",
    "time-zone",
];

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
    common: lock_sql::Common,
    /// Exclusive holds through the table's procedure (the default).
    procedure: bool,
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
            .field("common", &self.common)
            .field("procedure", &self.procedure)
            .finish()
    }
}

impl MySqlBuilder {
    fn new(source: Source) -> Self {
        MySqlBuilder {
            source,
            table: MySqlBackend::DEFAULT_TABLE.to_owned(),
            common: lock_sql::Common::new(
                MySqlBackend::DEFAULT_TIMEOUT,
                MySqlBackend::DEFAULT_POOL_SIZE,
            ),
            procedure: true,
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
        b.common.take_options(&mut url)?;
        b.source = Source::Url(url.into_client_url_with(SQLX_OPTIONS)?);
        Ok(b)
    }

    /// Keeps the locks in `table` of the URL's database (matching `[a-z_][a-z0-9_]{0,47}`,
    /// checked by [`MySqlBuilder::build`]) instead of `distlock`; different tables never
    /// meet.
    pub fn table(mut self, table: &str) -> Self {
        table.clone_into(&mut self.table);
        self
    }

    /// Decides every operation in the client, never calling the table's procedure: what
    /// the backend does by itself when the procedure cannot be made or called. For the
    /// tests that hold both ways to the contract; not part of the public API.
    #[doc(hidden)]
    pub fn decide_in_client(mut self) -> Self {
        self.procedure = false;
        self
    }

    lock_sql::common_setters!(
        timeout_on_the_server = "Both messages of the transaction count. The server enforces \
            it too (`innodb_lock_wait_timeout` and `lock_wait_timeout`, rounded up to whole \
            seconds, and on MariaDB `max_statement_time`), so a statement cannot wait on past \
            it; the server rolls back the transaction of a call that hits it.",
        without_migration = "For a least-privilege user with `SELECT, INSERT, UPDATE, DELETE` \
            on the table and `EXECUTE` on its procedure (`<table>_op_v2`): run \
            [`MySqlBackend::migrate`] once as a user that may create them (the procedure \
            needs `CREATE ROUTINE`). Without the procedure every operation still works, in \
            two round trips instead of one.",
    );

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
        let grace = self.common.checked_grace(NAME)?;
        let own = matches!(self.source, Source::Url(_));
        let session = Session::new(self.common.timeout, own);
        let pool = match self.source {
            Source::Pool(pool) => pool,
            Source::Url(url) => {
                let pool = lock_sql::pool_options(NAME, "MySqlBuilder", self.common.pool_size)?;
                let Some(rest) = SCHEMES
                    .iter()
                    .find_map(|s| url.strip_prefix(&format!("{s}://")))
                else {
                    return Err(not_a_url());
                };
                let options = MySqlConnectOptions::from_str(&format!("mysql://{rest}"))
                    .map_err(|e| map_error(Operation::Connect, e))?;
                let settings = session.settings.clone();
                pool
                    // The session's settings once per connection (see `sql::Session`).
                    .after_connect(move |conn, _| {
                        let settings = settings.clone();
                        Box::pin(async move {
                            sqlx::Executor::execute(conn, sqlx::raw_sql(&settings)).await?;
                            Ok(())
                        })
                    })
                    .connect_lazy_with(options)
            }
        };
        Ok(MySqlBackend::new(Db {
            pooled: lock_sql::Pooled {
                pool,
                deadline: lock_sql::Deadline {
                    backend: NAME,
                    timeout: self.common.timeout,
                    setting: "MySqlBuilder::timeout / timeout=",
                },
                address: |o| {
                    o.get_socket()
                        .is_none()
                        .then(|| (o.get_host().to_owned(), o.get_port()))
                },
            },
            names,
            session,
            procedure: std::sync::atomic::AtomicBool::new(self.procedure),
            wants_procedure: self.procedure,
            grace,
            auto_migrate: self.common.auto_migrate,
            schema: lock_sql::SchemaOnce::default(),
            sweeping: AtomicBool::new(false),
            waiters: lock_core::backend::Waiters::default(),
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
    use std::time::Duration;

    use super::*;

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
        assert_eq!((b.common.pool_size, b.common.auto_migrate), (4, false));
        assert_eq!(b.common.timeout, Duration::from_secs(2));
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
