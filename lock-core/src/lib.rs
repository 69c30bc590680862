//! The contract of a distributed lock, and the client API every backend shares.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use lock_core::{Attempt, LockBackend, Locker, MemoryBackend};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! // Any backend: MemoryBackend here, lock_file::FileBackend or lock_redis::RedisBackend in
//! // a real program. The code below does not change with it.
//! let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
//! let locker = Locker::new(backend).with_ttl(Duration::from_secs(30))?;
//!
//! match locker.lock("nightly-report").watchdog().obtain().await? {
//!     Attempt::Obtained(guard) => {
//!         // Hand the fencing token to the resource you write, so it can refuse a stale
//!         // holder; stop if the lock is lost.
//!         let fencing = guard.fencing();
//!         tokio::select! {
//!             _ = guard.lost() => eprintln!("lost the lock, stopping"),
//!             _ = async { println!("writing the report with fencing {fencing}") } => {}
//!         }
//!         guard.release().await?;
//!     }
//!     Attempt::Busy(busy) => println!("someone else is on it: {busy}"),
//! }
//! # Ok(()) }
//! ```
//!
//! # The pieces
//! - [`contract`]: the rules every backend keeps, each naming the conformance case that
//!   checks it.
//! - [`LockBackend`]: the contract (obtain, prolongate, release, inspect), implemented by
//!   [`MemoryBackend`] here and by the `lock-file`, `lock-redis`, `lock-postgres`,
//!   `lock-mysql` (MariaDB, MySQL) and `lock-etcd` crates.
//!   Contention is an outcome ([`ObtainOutcome::Busy`]), never an [`Error`].
//! - [`Locker`]: waiting with a deadline and a [`Retry`] strategy, a "don't queue" policy,
//!   the [`LockGuard`] with its watchdog and lost signal, [`Locker::with_lock`] and
//!   [`Locker::release_all`], written once for every backend.
//! - [`observe`]: what the locks do, for an operator: [`Locker::stats`], an
//!   [`Observer`](observe::Observer) called on every event, and with the `metrics`
//!   feature, metrics through the `metrics` facade.
//! - Validated inputs ([`Key`], [`Ttl`], [`HolderInfo`]) refused with
//!   [`ErrorKind::InvalidInput`] before any I/O.
//! - [`backend`]: what only a backend author needs (the request types, owner tokens, the
//!   contract's decisions as pure functions in [`backend::rules`], a whole backend from a
//!   storage in [`backend::storage`], wrappers in [`backend::layer`], URL options, waiter
//!   wake-ups), apart from what a user of locks sees.
//!
//! # What happens if the holder dies, or the server restarts
//! A holder that dies stops prolonging; its lock expires after its ttl and the next obtain
//! gets it with a higher fencing token. A backend that loses its data answers `Lost` to the
//! old holder's prolong (never `Prolonged`), its watchdog fires [`LockGuard::lost`], and
//! fencing tokens keep growing.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc = include_str!("contract.md")]
pub mod contract {}

pub mod backend;
mod client;
mod duration;
mod error;
pub mod fence;
mod holder;
mod key;
pub mod listing;
mod memory;
mod mode;
pub mod observe;
mod outcome;
mod reach;
mod redact;
mod token;
mod ttl;
mod url;
mod waiters;

pub use backend::LockBackend;
// The backend author's items, under their short names inside this crate.
pub(crate) use backend::{
    rules, Capabilities, Grace, ObtainRequest, ProlongRequest, ReleaseRequest, ReleaseSubscription,
    Token, UrlOptions, Waiters,
};
pub use client::detached::settle;
pub use client::guard::{LockGuard, LostFuture};
pub use client::locker::{
    Attempt, Campaign, HeldLock, Leader, Leadership, LockAllBuilder, LockBuilder, Locker,
    MultiGuard, Observation,
};
pub use client::retry::Retry;
pub use client::waiting;
pub use duration::parse_duration;
pub use error::{Error, ErrorKind, Operation, Result};
pub use holder::HolderInfo;
pub use key::Key;
pub use memory::MemoryBackend;
pub use mode::Mode;
pub use observe::LockerStats;
pub use outcome::{
    Busy, BusyReason, Fencing, LockState, ObtainOutcome, ProlongOutcome, ReleaseOutcome, SharedHold,
};
pub use redact::redact_url;
pub use ttl::Ttl;
