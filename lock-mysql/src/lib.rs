#![doc = include_str!("../README.md")]

mod backend;
mod builder;
mod decide;
mod error;
mod exec;
mod migrate;
mod sql;

pub use backend::MySqlBackend;
pub use builder::{MySqlBuilder, SCHEMES};
pub use lock_core;
pub use sqlx;

/// The backend's name in errors and reports ([`MySqlBackend::NAME`]).
const NAME: &str = "mysql";
