#![doc = include_str!("../README.md")]

mod backend;
mod builder;
mod error;
mod exec;
pub mod fence;
mod migrate;
mod notify;
mod read;
mod reply;
mod routine;
mod sql;
mod storage;

pub use backend::PostgresBackend;
pub use builder::{PostgresBuilder, SCHEMES};
pub use lock_core;
pub use sql::Statements;
pub use sqlx;

/// The backend's name in errors and reports ([`PostgresBackend::NAME`]).
const NAME: &str = "postgres";
