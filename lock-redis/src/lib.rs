#![doc = include_str!("../README.md")]

mod backend;
mod builder;
mod error;
mod keys;
mod link;
mod lua;
mod notify;
mod pool;
mod primary;
mod record;
mod request;
mod shards;
mod topology;
mod watch;

pub use backend::{RedisBackend, Variant};
pub use builder::{RedisBuilder, SCHEMES};
pub use lock_core;
pub use redis;
