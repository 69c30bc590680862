#![doc = include_str!("../README.md")]

mod backend;
mod clock;
mod names;
mod record;
mod slots;

pub use backend::FileBackend;
pub use lock_core;
