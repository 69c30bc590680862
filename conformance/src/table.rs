//! The decision table: every rule of [`lock_core::backend::rules`] as a row (a stored record, a
//! request, the outcome and the record afterwards), one row per line.
//!
//! This crate's tests run it through the [`lock_core::backend::rules`] functions with an exact clock
//! (`tests/table.rs`); the
//! Redis and Postgres tests write each row's record on a real server, send the request
//! through the backend and read the record back, so the Lua script and the SQL function are
//! held to the same table as the Rust rules. A backend that decides in its own code (a
//! script, a stored procedure) can do the same: write [`Before`], call, decode what is
//! stored into a [`Seen`], and [`Case::check`]. A backend that keeps no end times, only
//! whether each has come (etcd's leases), writes a row's past ends as absent and checks
//! with [`Case::check_coarse`] (`lock-etcd/tests/decision_table.rs` does).
//!
//! Times are milliseconds relative to the instant of the request; they are tens of seconds
//! apart so that a runner on a real server can allow a [`Case::check`] `slack` of a second.
//!
//! The rows after the mutex's are shared holds (a semaphore of [`CAPACITY`] permits, a
//! waiting writer's marker, mode changes): a runner writes [`Before::Shared`] as its backend
//! stores shared holds ([`Before::shared_at`]) and decodes them back with
//! [`Seen::shared_from_json`] when it stores them as JSON. A SQL backend's runner writes and
//! reads [`SqlRow`]s ([`Before::sql_row`], [`SqlRow::seen`]).

mod check;
mod rows;
mod sql;
mod stored;
mod vocabulary;

pub use check::Mismatch;
pub use rows::{wakes, CASES, WAKES};
pub use sql::{Digests, SqlRow};
pub use stored::{Row, ShareAt, SharedAt, SharedRow};
pub use vocabulary::*;
