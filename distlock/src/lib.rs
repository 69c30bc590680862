//! Distributed locks with one contract on every backend: the crate to depend on.
//!
//! - **Taking locks**: [`Locker`] and its [`LockBuilder`] ([`Locker::lock_all`] and its
//!   [`LockAllBuilder`] for several keys at once, all or nothing; [`Locker::elect`] for
//!   leader election), the [`LockGuard`] with its
//!   fencing token and lost signal, [`Attempt`] and [`Busy`], [`Retry`] strategies, the
//!   outcomes ([`ReleaseOutcome`], [`LockState`], ...) and [`Error`] with its [`ErrorKind`].
//! - **Choosing a backend** by URL: [`connect`] or [`LockConfig`]; or by type, each behind a
//!   cargo feature: `FileBackend` (`file`, the default: one machine), `RedisBackend`
//!   (`redis`: one server, a Cluster or a Sentinel-managed primary), `PostgresBackend`
//!   (`postgres`, directly or through PgBouncer), `MySqlBackend` (`mysql`: MariaDB or
//!   MySQL), `EtcdBackend` (`etcd`: a consensus store; building it needs `protoc`);
//!   [`MemoryBackend`] for tests.
//! - **Watching locks in production**: [`Locker::stats`], an [`observe::Observer`] on the
//!   locker, and with the `metrics` feature `observe::metrics::MetricsObserver`, which
//!   records wait times, hold times, losses, renewals and errors through the `metrics`
//!   facade.
//! - **Writing a backend of your own**: the trait [`LockBackend`] and everything only a
//!   backend author needs (request types, owner tokens, the contract's decisions as pure
//!   functions) are in [`backend`]; the feature `conformance` adds the suite that checks it
//!   in a few lines. The rules themselves are in [`contract`].
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

#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The user's items, by name. What only a backend author needs is under [`backend`].
pub use lock_config::{connect, parse_retry, LockConfig};
pub use lock_core::{
    backend, contract, listing, observe, parse_duration, redact_url, waiting, Attempt, Busy,
    BusyReason, Campaign, Error, ErrorKind, Fencing, HeldLock, HolderInfo, Key, Leader, Leadership,
    LockAllBuilder, LockBackend, LockBuilder, LockGuard, LockState, Locker, LockerStats,
    LostFuture, MemoryBackend, Mode, MultiGuard, Observation, ObtainOutcome, Operation,
    ProlongOutcome, ReleaseOutcome, Result, Retry, SharedHold, Ttl,
};

pub use lock_core::settle;

/// Lock files in a directory, for one machine.
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub use lock_file::{self as file, FileBackend};

/// Redis: one server, a Cluster or a Sentinel-managed primary; the Lua or the WATCH/MULTI
/// variant.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use lock_redis::{self as redis, RedisBackend, Variant as RedisVariant};

/// Postgres, directly or through PgBouncer in transaction mode.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use lock_postgres::{self as postgres, PostgresBackend};

/// MariaDB or MySQL: one InnoDB row per key.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use lock_mysql::{self as mysql, MySqlBackend};

/// etcd: each hold a key on a lease of its own, fencing tokens from etcd's revision.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use lock_etcd::{self as etcd, EtcdBackend};

/// Fencing checked where the write lands: the rule and its typed error
/// (`lock_core::fence`), and a ready fence for each store, behind its backend's feature:
/// `fence::file`, `fence::redis`, `fence::postgres`, `fence::mysql`.
pub mod fence {
    pub use lock_core::fence::*;

    /// Fenced replacement of a file's content.
    #[cfg(feature = "file")]
    #[cfg_attr(docsrs, doc(cfg(feature = "file")))]
    pub use lock_file::fence as file;

    /// Fenced `SET` of a Redis key, one script.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use lock_redis::fence as redis;

    /// A fence table checked inside your Postgres transaction.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub use lock_postgres::fence as postgres;

    /// A fence table checked inside your MySQL or MariaDB transaction.
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub use lock_mysql::fence as mysql;
}

/// The conformance suite: `distlock::conformance::suite!("mine", MyHarness)`.
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub use lock_conformance as conformance;

/// The README's Rust snippets, compiled and run as doctests (`cargo test -p distlock
/// --all-features --doc`; the test command runs it), so that what a newcomer copies from
/// the README compiles as given.
#[cfg(all(
    doctest,
    feature = "file",
    feature = "metrics",
    feature = "conformance"
))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeSnippets;
