#![doc = include_str!("../README.md")]

mod backend;
mod error;
mod notify;
mod sql;

pub use backend::PostgresBackend;
pub use lock_core;
pub use sqlx;
