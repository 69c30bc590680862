#![doc = include_str!("../README.md")]

mod backend;
mod clock;
mod list;
pub mod fence;
mod names;
mod record;
mod slots;
mod sweep;

pub use backend::FileBackend;
pub use lock_core;
