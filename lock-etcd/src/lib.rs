#![doc = include_str!("../README.md")]

mod backend;
mod error;
mod layout;
mod list;
mod members;
mod notify;
mod plan;
mod read;
mod renew;
mod storage;
mod url;

pub use backend::{EtcdBackend, EtcdBuilder};
pub use etcd_client;
pub use lock_core;
pub use url::SCHEMES;

/// The backend's name in errors and reports.
const NAME: &str = "etcd";
