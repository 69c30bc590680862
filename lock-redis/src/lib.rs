#![doc = include_str!("../README.md")]

mod backend;
mod builder;
mod conn;
mod error;
pub mod fence;
mod keys;
mod list;
mod lua;
mod notify;
mod record;
mod request;
mod scripted;
mod variant;
mod watch;

pub use backend::RedisBackend;
pub use builder::{RedisBuilder, SCHEMES};
pub use lock_core;
pub use redis;
pub use variant::Variant;
