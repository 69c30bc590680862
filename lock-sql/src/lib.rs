//! What the SQL lock backends share: the plumbing around a transaction, never its wire
//! protocol. `lock-postgres` and `lock-mysql` keep their own SQL (`sql.rs`, `schema.sql`)
//! and the decisions (`lock_core::backend::rules`, or a stored function held to the same
//! table); what they would otherwise both write lives here, generic over the sqlx driver:
//!
//! - [`connection`]: a pooled connection by a deadline, saying why a server cannot be
//!   reached; [`Open`], a connection inside a transaction that is closed rather than pooled
//!   when its caller is cancelled; [`discard_idle`], the idle connections closed once one is
//!   found dead;
//! - [`within`]: a call's deadline, as a retry-safe `Unavailable` error naming the setting;
//! - [`SchemaOnce`]: the schema made or checked once, concurrent calls waiting for it;
//!   [`Tables`], a backend's table as the generic code sees it, with [`with_schema`] (the
//!   loop of every call: the table made, the call, the table made again if it vanished)
//!   and [`list_page`] (a page of its keys) written once;
//! - [`errors`]: the error kinds of the failures every driver shares;
//! - [`Common`] and [`common_setters!`]: the settings every builder has (deadline, grace,
//!   migration on first use, pool size) with their URL options and setters;
//!   [`pool_options`], the pool a builder makes from a URL; [`Pooled`], that pool with the
//!   deadline of its calls;
//! - [`reply`]: what a server-side routine (Postgres's function, MariaDB's procedure)
//!   answers, turned into the contract's outcomes and the routine kit's verdict
//!   (`lock_core::backend::routine`, which routes each call).
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{ErrorKind, Operation};
//! use tokio::time::Instant;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let deadline = Instant::now() + Duration::from_millis(10);
//! let never = std::future::pending::<()>();
//! let setting = lock_sql::Deadline { backend: "postgres", timeout: Duration::from_millis(10), setting: "PostgresBuilder::timeout / timeout=" };
//! let err = lock_sql::within(&setting, Operation::Obtain, deadline, never).await.unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::Unavailable);
//! assert!(err.to_string().contains("safe to retry"));
//! # }
//! ```

mod conn;
mod deadline;
pub mod errors;
mod pooled;
pub mod reply;
mod schema;
mod settings;
pub mod sql_file;
mod tables;

pub use conn::{connection, discard_idle, Open};
pub use deadline::{within, Deadline};

#[doc(hidden)]
pub use lock_core as __lock_core;
pub use pooled::{Options, Pooled};
pub use schema::SchemaOnce;
pub use settings::{pool_options, Common};
pub use tables::{list_page, with_schema, Row, Tables};

/// The page of a lock table's listing from the names its statement returned (in key order,
/// at most `limit + 1`: one more than the page, to tell whether the walk goes on).
///
/// # Errors
/// [`ErrorKind::Protocol`](lock_core::ErrorKind::Protocol) for a name that is no valid lock
/// key (the statement leaves the library's own names out).
pub fn key_page(
    backend: &'static str,
    names: Vec<String>,
    limit: usize,
) -> lock_core::Result<lock_core::backend::KeyPage> {
    let keys = names
        .into_iter()
        .map(|name| {
            lock_core::Key::new(name).map_err(|_| {
                errors::protocol(
                    backend,
                    lock_core::Operation::List,
                    "a key in the lock table is not a valid lock key",
                )
            })
        })
        .collect::<lock_core::Result<Vec<_>>>()?;
    Ok(lock_core::backend::listing::ordered_page(keys, limit))
}
