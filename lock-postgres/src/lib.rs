#![doc = include_str!("../README.md")]

mod backend;
mod builder;
mod error;
mod notify;
mod sql;

pub use backend::PostgresBackend;
pub use builder::{PostgresBuilder, SCHEMES};
pub use lock_core;
pub use sql::Statements;
pub use sqlx;
