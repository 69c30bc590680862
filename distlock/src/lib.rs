//! Distributed locks with one contract on every backend: the crate to depend on.
//!
//! It re-exports the client API and the contract ([`lock_core`]), choosing a backend by URL
//! ([`connect`], [`LockConfig`]), and each backend behind a cargo feature: `file` (the
//! default), `redis`, `postgres`; `conformance` adds the suite that checks a backend of your
//! own.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use distlock::{Attempt, FileBackend, Locker};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
//! # let tmp = tempfile::tempdir().unwrap();
//! # let dir = tmp.path().join("locks");
//! // In production: distlock::connect("redis://cache:6379/0") with the `redis` feature,
//! // and the code below does not change.
//! let locker = Locker::new(Arc::new(FileBackend::new(&dir)?)).with_ttl(Duration::from_secs(30))?;
//! match locker.lock("nightly-report").watchdog().try_obtain().await? {
//!     Attempt::Obtained(guard) => {
//!         println!("fencing token {}", guard.fencing());
//!         guard.release().await?;
//!     }
//!     Attempt::Busy(busy) => println!("someone else is on it: {busy}"),
//! }
//! # Ok(()) }
//! ```
//!
//! What each backend guarantees under faults is in the repository's `GUARANTEES.md`; the
//! rules themselves are in [`contract`].

pub use lock_config::{connect, parse_duration, parse_retry, redact, LockConfig};
pub use lock_core::*;

/// Lock files in a directory, for one machine.
#[cfg(feature = "file")]
pub use lock_file::{self as file, FileBackend};

/// Redis: one server, the Lua or the WATCH/MULTI variant.
#[cfg(feature = "redis")]
pub use lock_redis::{self as redis, RedisBackend, Variant as RedisVariant};

/// Postgres, directly or through PgBouncer in transaction mode.
#[cfg(feature = "postgres")]
pub use lock_postgres::{self as postgres, PostgresBackend};

/// The conformance suite: `distlock::conformance::suite!("mine", MyHarness)`.
#[cfg(feature = "conformance")]
pub use lock_conformance as conformance;
