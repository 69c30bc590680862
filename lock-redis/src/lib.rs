#![doc = include_str!("../README.md")]

mod backend;
mod keys;

pub use backend::RedisBackend;
pub use lock_core;
pub use redis;
