//! [`PostgresBuilder`]: every setting of a [`PostgresBackend`] before it is made, from code
//! or from a URL's options.

use std::fmt;
use std::str::FromStr;

use lock_core::backend::{Token, UrlOptions};
use lock_core::{Error, ErrorKind, Operation, Result};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;

use crate::backend::{PostgresBackend, Settings};
use crate::error::map_error;
use crate::sql::{Names, Statements};
use crate::NAME;

/// The URL options sqlx's Postgres driver reads (it logs and ignores any other; `options[`
/// stands for every `options[NAME]`): passed to it; any other option the builder does not
/// read is refused as a typo.
const SQLX_OPTIONS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
    "options[",
];

/// The URL schemes a [`PostgresBuilder`] takes.
pub const SCHEMES: &[&str] = lock_core::backend::schemes::POSTGRES;

/// Where the connections come from.
#[derive(Clone)]
enum Source {
    Url(String),
    Pool(PgPool),
}

/// The settings of a [`PostgresBackend`], all known before it is made: from
/// [`PostgresBackend::builder`], [`PostgresBackend::builder_on`] or
/// [`PostgresBuilder::from_url`], consumed by [`PostgresBuilder::build`]. Its `Debug` never
/// shows the URL's password.
#[derive(Clone, serde::Deserialize)]
#[serde(try_from = "String")]
#[must_use = "a builder does nothing until build()"]
pub struct PostgresBuilder {
    source: Source,
    schema: String,
    table: String,
    notifications: bool,
    durable: bool,
    statements: Statements,
    common: lock_sql::Common,
}

impl fmt::Debug for PostgresBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Url(url) => lock_core::redact_url(url),
            Source::Pool(_) => "an existing pool".to_owned(),
        };
        f.debug_struct("PostgresBuilder")
            .field("source", &source)
            .field("table", &format_args!("{}.{}", self.schema, self.table))
            .field("notifications", &self.notifications)
            .field("durable", &self.durable)
            .field("statements", &self.statements)
            .field("common", &self.common)
            .finish()
    }
}

impl PostgresBuilder {
    fn new(source: Source) -> Self {
        PostgresBuilder {
            source,
            schema: PostgresBackend::DEFAULT_SCHEMA.to_owned(),
            table: PostgresBackend::DEFAULT_TABLE.to_owned(),
            notifications: true,
            durable: true,
            statements: Statements::Prepared,
            common: lock_sql::Common::new(
                PostgresBackend::DEFAULT_TIMEOUT,
                PostgresBackend::DEFAULT_POOL_SIZE,
            ),
        }
    }

    pub(crate) fn on_url(url: String) -> Self {
        Self::new(Source::Url(url))
    }

    pub(crate) fn on_pool(pool: PgPool) -> Self {
        Self::new(Source::Pool(pool))
    }

    /// A builder from a URL that carries its settings too, as `lock-config` takes them:
    /// `postgres://user[:password]@host[:port]/database` (or `postgresql://`) with the
    /// options `table=[schema.]table`, `schema=`, `notify=false` (behind PgBouncer),
    /// `statements=simple` (behind PgBouncer before 1.21), `durable=false`, `migrate=false`,
    /// `timeout=` (a duration: `5s`), `grace=`, `pool=`.
    /// Other options stay in the URL for sqlx (`sslmode=require`).
    ///
    /// ```
    /// use lock_postgres::PostgresBuilder;
    ///
    /// let b = PostgresBuilder::from_url("postgres://app:secret@db/app?table=locks.app&notify=false")?;
    /// assert!(format!("{b:?}").contains("locks.app"));
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
            return Err(config(
                "not a Postgres URL: expected postgres://user[:password]@host[:port]/database",
            ));
        }
        let mut b = Self::on_url(String::new());
        let (table, schema) = (url.take("table")?, url.take("schema")?);
        if table.is_some() || schema.is_some() {
            let table = table.unwrap_or_else(|| PostgresBackend::DEFAULT_TABLE.to_owned());
            let (s, t) = match table.split_once('.') {
                Some((s, t)) => (s.to_owned(), t.to_owned()),
                None => (schema.unwrap_or(b.schema.clone()), table),
            };
            b = b.table(&s, &t);
        }
        if let Some(on) = url.take_flag("notify")? {
            b = b.notifications(on);
        }
        if let Some(on) = url.take_flag("durable")? {
            b = b.durable_commits(on);
        }
        b.common.take_options(&mut url)?;
        if let Some(form) = url.take("statements")? {
            b = b.statements(match form.as_str() {
                "prepared" => Statements::Prepared,
                "simple" => Statements::Simple,
                _ => return Err(config("statements= takes prepared or simple")),
            });
        }
        b.source = Source::Url(url.into_client_url_with(SQLX_OPTIONS)?);
        Ok(b)
    }

    /// Keeps the locks in `schema.table` (both matching `[a-z_][a-z0-9_]{0,47}`, checked by
    /// [`PostgresBuilder::build`]) instead of `public.distlock`; different tables never meet.
    pub fn table(mut self, schema: &str, table: &str) -> Self {
        self.schema = schema.to_owned();
        self.table = table.to_owned();
        self
    }

    /// Turns release notifications (`LISTEN`/`NOTIFY`) on (the default) or off. Turn them
    /// off through PgBouncer in transaction mode, where `LISTEN` cannot work: a release then
    /// wakes the waiters of the same backend (and its clones) at once, and waiters of other
    /// processes poll.
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// With `false`, each operation commits with `synchronous_commit = off`: it returns
    /// without waiting for its WAL to reach the disk, several times faster on most disks.
    /// The price: a server *crash* (not a clean restart) may forget the last few hundred
    /// milliseconds of operations. A forgotten acquisition then makes its holder's next
    /// prolong or release answer `Lost` (the contract's answer after data loss, as with a
    /// Redis restart without persistence), and fencing still grows; but until that call the
    /// holder believes it holds a lock another may take. Default `true`: durable, whatever
    /// the server, database or role sets (their `synchronous_commit = off` is raised to
    /// `local` for the lock's own commits; stronger levels are kept).
    pub fn durable_commits(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    lock_sql::common_setters!(
        timeout_on_the_server = "The server enforces it too (as `lock_timeout`, and as \
            `statement_timeout` in the simple form), so a statement cannot wait on past it.",
        without_migration = "For a least-privilege role that may use the table and execute \
            the function but may not create them: run [`PostgresBackend::migrate`] once as a \
            role that may.",
    );

    /// How statements go to the server: prepared once per connection (the default, the
    /// fastest), or parsed anew on every call for a transaction-pooling proxy that cannot
    /// keep prepared statements (PgBouncer before 1.21, or with `max_prepared_statements =
    /// 0`): see [`Statements`]. Through such a proxy the prepared form fails with a
    /// `Config` error that names this setting.
    pub fn statements(mut self, form: Statements) -> Self {
        self.statements = form;
        self
    }

    /// Makes the backend. No I/O: the pool connects on the first operation (or
    /// [`PostgresBackend::migrate`]). A builder made from a URL makes its pool here, which
    /// needs a current Tokio runtime; one on an existing pool does not.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed URL, a table name that is not a plain
    /// identifier, a zero deadline, or (from a URL) no current Tokio runtime;
    /// [`ErrorKind::InvalidInput`] for a grace over 365 days.
    pub fn build(self) -> Result<PostgresBackend> {
        let names = Names::new(&self.schema, &self.table).ok_or_else(|| {
            config(format!(
                "{:?}.{:?}: schema and table names must match [a-z_][a-z0-9_]{{0,47}}",
                self.schema, self.table
            ))
        })?;
        let grace = self.common.checked_grace(NAME)?;
        let (pool, application_name) = match self.source {
            Source::Pool(pool) => {
                let name = pool
                    .connect_options()
                    .get_application_name()
                    .unwrap_or_default()
                    .to_owned();
                (pool, name)
            }
            Source::Url(url) => {
                let pool = lock_sql::pool_options(NAME, "PostgresBuilder", self.common.pool_size)?;
                if !SCHEMES.iter().any(|s| url.starts_with(&format!("{s}://"))) {
                    return Err(config(
                        "not a Postgres URL: expected \
                         postgres://user[:password]@host[:port]/database",
                    ));
                }
                let name = format!("lock-postgres-{}", &Token::generate()?.to_hex()[..12]);
                let options = PgConnectOptions::from_str(&url)
                    .map_err(|e| map_error(Operation::Connect, e))?
                    .application_name(&name);
                let pool = pool.connect_lazy_with(options);
                (pool, name)
            }
        };
        Ok(PostgresBackend::new(Settings {
            pool,
            names,
            grace,
            notifications: self.notifications,
            durable: self.durable,
            timeout: self.common.timeout,
            auto_migrate: self.common.auto_migrate,
            statements: self.statements,
            application_name,
            waiter_id: Token::generate()?.to_hex(),
        }))
    }
}

impl PostgresBackend {
    /// A builder for a backend on `url` (`postgres://user[:password]@host[:port]/database`,
    /// with sqlx's options such as `sslmode=require`); see [`PostgresBuilder`] for the
    /// settings, and [`PostgresBuilder::from_url`] for a URL that carries them too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_postgres::PostgresBackend;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let backend = PostgresBackend::builder("postgres://app@db.internal/app")
    ///     .table("locks", "app_locks")
    ///     .timeout(Duration::from_secs(2))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> PostgresBuilder {
        PostgresBuilder::on_url(url.into())
    }

    /// A builder for a backend on an existing pool (its `pool_size` setting is ignored).
    pub fn builder_on(pool: PgPool) -> PostgresBuilder {
        PostgresBuilder::on_pool(pool)
    }

    /// A backend on `url` with every setting at its default. It connects lazily: nothing
    /// is sent until the first operation (or [`PostgresBackend::migrate`]), so it needs a
    /// Tokio runtime to make its pool in, but no server yet.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed URL, or when called outside a Tokio runtime. A
    /// wrong password, a missing database or an unreachable server shows on the first
    /// operation.
    pub fn lazy(url: &str) -> Result<Self> {
        Self::builder(url).build()
    }

    /// A backend on an existing pool with every setting at its default.
    pub fn from_pool(pool: PgPool) -> Self {
        // Only the settings can fail to build, and the defaults are valid.
        Self::builder_on(pool)
            .build()
            .expect("the default settings are valid")
    }
}

fn config(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, NAME, Operation::Validate, message)
}

/// A builder from a URL with its options ([`PostgresBuilder::from_url`]); with serde, a
/// configuration file holds the URL as a string.
///
/// ```
/// # use lock_postgres::PostgresBuilder;
/// #[derive(serde::Deserialize)]
/// struct Config {
///     locks: PostgresBuilder,
/// }
/// let config: Config = serde_json::from_str(r#"{"locks": "postgres://app@db/app?table=locks.app"}"#).unwrap();
/// # let _ = config.locks;
/// ```
impl TryFrom<String> for PostgresBuilder {
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
        let b = PostgresBuilder::from_url(
            "postgres://u:p%40w@h/d?schema=s&table=t&sslmode=require&pool=4&notify=off&statements=simple",
        )
        .unwrap();
        assert_eq!(b.statements, Statements::Simple);
        let Source::Url(url) = &b.source else {
            panic!("a URL builder")
        };
        assert_eq!(url, "postgres://u:p%40w@h/d?sslmode=require");
        assert_eq!((b.schema.as_str(), b.table.as_str()), ("s", "t"));
        assert_eq!((b.common.pool_size, b.notifications), (4, false));
        let b = PostgresBuilder::from_url("postgresql://h/d?table=x.y&schema=ignored").unwrap();
        assert_eq!((b.schema.as_str(), b.table.as_str()), ("x", "y"));
        assert_eq!(b.statements, Statements::Prepared);
        let err =
            PostgresBuilder::from_url("postgres://u:secret@h/d?statements=cached").unwrap_err();
        assert!(err.to_string().contains("prepared or simple"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn an_existing_pool_needs_no_current_runtime() {
        // The pool was made inside a runtime; the backend is made outside one (as in a
        // synchronous constructor of the application's state).
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let pool = rt.block_on(async {
            sqlx::postgres::PgPoolOptions::new()
                .connect_lazy("postgres://u@127.0.0.1:1/d")
                .unwrap()
        });
        let backend = PostgresBackend::from_pool(pool.clone());
        assert_eq!(backend.table(), "public.distlock");
        assert!(PostgresBackend::builder_on(pool).build().is_ok());
    }

    #[test]
    fn settings_are_checked_before_any_io() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _in = rt.enter();
        let url = "postgres://u:secret@127.0.0.1:1/d";
        for (builder, says) in [
            (
                PostgresBackend::builder(url).table("Bad", "x"),
                "must match",
            ),
            (
                PostgresBackend::builder(url).timeout(Duration::ZERO),
                "longer than zero",
            ),
            (
                PostgresBackend::builder(url).timeout(Duration::MAX),
                "at most 3600s",
            ),
            (
                PostgresBackend::builder("mysql://x/y"),
                "not a Postgres URL",
            ),
        ] {
            let err = builder.build().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{err}");
            assert!(err.to_string().contains(says), "{err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        let grace = PostgresBackend::builder(url).grace(Duration::MAX).build();
        assert_eq!(grace.unwrap_err().kind(), ErrorKind::InvalidInput);
        assert!(PostgresBackend::builder(url).build().is_ok());
    }
}
