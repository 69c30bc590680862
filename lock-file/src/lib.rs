#![doc = include_str!("../README.md")]

mod backend;
mod clock;
pub mod fence;
mod list;
mod names;
mod record;
mod slots;
mod sweep;

pub use backend::FileBackend;
pub use lock_core;
