#![doc = include_str!("../README.md")]

mod backend;
mod builder;
mod error;
mod exec;
pub mod fence;
mod migrate;
mod read;
mod routine;
mod sql;
mod storage;

pub use backend::MySqlBackend;
pub use builder::{MySqlBuilder, SCHEMES};
pub use lock_core;
pub use sqlx;

/// The backend's name in errors and reports ([`MySqlBackend::NAME`]).
const NAME: &str = "mysql";
