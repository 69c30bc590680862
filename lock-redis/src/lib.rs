#![doc = include_str!("../README.md")]

mod backend;
mod error;
mod keys;
mod lua;
mod notify;
mod pool;
mod record;
mod request;
mod watch;

pub use backend::{RedisBackend, Variant};
pub use lock_core;
pub use redis;
