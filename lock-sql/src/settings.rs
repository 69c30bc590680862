//! What every SQL backend's builder takes alike: the call's deadline, the grace period,
//! whether the schema is made on first use, the pool's size; the URL options that carry
//! them; the pool made from them.

use std::time::Duration;

use lock_core::backend::{check_call_timeout, Grace, UrlOptions};
use lock_core::{Error, ErrorKind, Operation, Result};
use sqlx::pool::PoolOptions;
use sqlx::Database;

/// The settings every SQL backend's builder has, before they are checked. A builder keeps
/// one and sets it through the methods [`common_setters!`](crate::common_setters) writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Common {
    /// How long expired rows are kept for late detection; `None`: each lock's ttl.
    pub grace: Option<Duration>,
    /// The deadline of every call.
    pub timeout: Duration,
    /// Make the schema on first use rather than only check it.
    pub auto_migrate: bool,
    /// The most connections a pool made from a URL opens.
    pub pool_size: u32,
}

impl Common {
    /// The defaults: no grace (each lock's ttl), schema made on first use.
    pub fn new(timeout: Duration, pool_size: u32) -> Self {
        Common {
            grace: None,
            timeout,
            auto_migrate: true,
            pool_size,
        }
    }

    /// Takes `migrate=`, `timeout=`, `grace=` and `pool=` out of `url`, leaving the rest.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a malformed value, naming the option.
    pub fn take_options(&mut self, url: &mut UrlOptions) -> Result<()> {
        if let Some(on) = url.take_flag("migrate")? {
            self.auto_migrate = on;
        }
        if let Some(t) = url.take_duration("timeout")? {
            self.timeout = t;
        }
        if let Some(g) = url.take_duration("grace")? {
            self.grace = Some(g);
        }
        if let Some(n) = url.take_parsed("pool", "a number of connections")? {
            self.pool_size = u32::max(n, 1);
        }
        Ok(())
    }

    /// The grace, checked, after checking the deadline too.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a deadline of zero or over an hour;
    /// [`ErrorKind::InvalidInput`] for a grace over 365 days.
    pub fn checked_grace(&self, backend: &'static str) -> Result<Option<Grace>> {
        let grace = self.grace.map(Grace::new).transpose()?;
        check_call_timeout(self.timeout).map_err(|message| {
            Error::new(ErrorKind::Config, backend, Operation::Validate, message)
        })?;
        Ok(grace)
    }
}

/// The options of a pool a builder makes from a URL: at most `size` connections, no ping
/// before each statement (a second round trip per lock operation; dead idle connections
/// are closed together instead, see [`discard_idle`](crate::discard_idle)), and only an
/// outer limit on the wait for a connection, since each call bounds its own by its
/// deadline.
///
/// # Errors
/// [`ErrorKind::Config`] when no Tokio runtime is current (sqlx's lazy pool would panic
/// without one), saying what to do; `builder` names the type, as `PostgresBuilder`.
pub fn pool_options<DB: Database>(
    backend: &'static str,
    builder: &str,
    size: u32,
) -> Result<PoolOptions<DB>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::new(
            ErrorKind::Config,
            backend,
            Operation::Validate,
            format!(
                "{builder}::build needs a Tokio runtime to make its pool: call it from async \
                 code (or inside Runtime::enter)"
            ),
        ));
    }
    Ok(PoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(60))
        .test_before_acquire(false))
}

/// The setters of the settings in [`Common`], for a builder with a field `common: Common`
/// and a method `build`. The two literals are the backend's own paragraphs: how its server
/// enforces the deadline, and what `auto_migrate(false)` leaves to the user.
#[macro_export]
macro_rules! common_setters {
    (timeout_on_the_server = $server:literal, without_migration = $migration:literal $(,)?) => {
        /// Keeps expired rows for `grace` instead of each lock's ttl, for late detection
        /// (at most 365 days, checked by [`Self::build`]).
        pub fn grace(mut self, grace: ::std::time::Duration) -> Self {
            self.common.grace = Some(grace);
            self
        }

        /// The deadline of every call (default 5 s, longer than zero, at most an hour):
        /// waiting for a pooled connection, connecting, and the call's statements,
        /// including any wait behind another operation on the same key.
        #[doc = $server]
        /// A call that hits it returns a retry-safe [`lock_core::ErrorKind::Unavailable`]
        /// naming the deadline; the connection it used is closed.
        ///
        /// Keep it well under your locks' ttl: a watchdog's prolong that is still waiting
        /// when the validity ends counts the lock as lost.
        pub fn timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.common.timeout = timeout;
            self
        }

        /// With `false`, the backend never creates or changes the schema: on first use it
        /// only checks that what it needs is there and usable, and says what is missing.
        #[doc = $migration]
        /// Default `true`: made on first use (`migrate=false` in a `lock-config` URL).
        pub fn auto_migrate(mut self, on: bool) -> Self {
            self.common.auto_migrate = on;
            self
        }

        /// How many connections the pool opens at most (default 16, at least 1) when the
        /// builder made it from a URL; no effect on an existing pool.
        pub fn pool_size(mut self, size: u32) -> Self {
            self.common.pool_size = size.max(1);
            self
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_options_are_taken_and_the_rest_left() {
        let mut url = UrlOptions::parse(
            "postgres",
            "postgres://u:p@h/d?pool=0&migrate=off&timeout=2s&grace=1m&sslmode=require",
        );
        let mut common = Common::new(Duration::from_secs(5), 16);
        common.take_options(&mut url).unwrap();
        assert_eq!(
            common,
            Common {
                grace: Some(Duration::from_secs(60)),
                timeout: Duration::from_secs(2),
                auto_migrate: false,
                pool_size: 1,
            }
        );
        assert_eq!(url.into_client_url(), "postgres://u:p@h/d?sslmode=require");
        let mut url = UrlOptions::parse("postgres", "postgres://u:secret@h/d?timeout=soon");
        let err = common.take_options(&mut url).unwrap_err();
        assert!(err.to_string().contains("timeout"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn the_deadline_and_the_grace_are_checked() {
        let mut common = Common::new(Duration::ZERO, 16);
        let err = common.checked_grace("mysql").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        common.timeout = Duration::from_secs(1);
        common.grace = Some(Duration::MAX);
        let err = common.checked_grace("mysql").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        common.grace = Some(Duration::from_secs(3));
        assert_eq!(
            common.checked_grace("mysql").unwrap().map(Grace::as_millis),
            Some(3_000)
        );
    }

    #[test]
    fn a_pool_made_outside_a_runtime_is_an_error_not_a_panic() {
        let err = pool_options::<sqlx::Postgres>("postgres", "PostgresBuilder", 4)
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(
            err.to_string()
                .contains("PostgresBuilder::build needs a Tokio runtime"),
            "{err}"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _in = rt.enter();
        let options = pool_options::<sqlx::Postgres>("postgres", "PostgresBuilder", 4).unwrap();
        assert_eq!(options.get_max_connections(), 4);
        assert!(!options.get_test_before_acquire());
    }
}
