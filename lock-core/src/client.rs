//! The client layer, written once for every backend: what turns a [`LockBackend`]'s
//! single calls into locks a program holds.
//!
//! - [`locker`]: [`Locker`] and its builders; waiting with a deadline and a [`Retry`]
//!   strategy ([`retry`]), the writer's marker of a waiting writer;
//! - [`guard`]: the [`LockGuard`], its mode changes, release and drop;
//! - [`hold`]: what guards of one acquisition share: the validity counted on the client's
//!   clock ([`clock`], suspend included), the lost signal;
//! - [`registry`] and [`renew`]: the locks a locker holds, and the watchdog that renews
//!   them in batches;
//! - [`turn`]: one token's state-changing calls one at a time, in the order they were sent;
//! - [`detached`]: backend calls that finish after their caller stopped waiting, and
//!   [`settle`](crate::settle);
//! - [`waiting`]: the records that make a waiting obtain visible to a listing.
//!
//! [`LockBackend`]: crate::LockBackend
//! [`Locker`]: crate::Locker
//! [`Retry`]: crate::Retry
//! [`LockGuard`]: crate::LockGuard

pub(crate) mod clock;
pub(crate) mod detached;
pub(crate) mod guard;
pub(crate) mod hold;
pub(crate) mod locker;
pub(crate) mod registry;
pub(crate) mod renew;
pub(crate) mod retry;
pub(crate) mod turn;
pub mod waiting;
