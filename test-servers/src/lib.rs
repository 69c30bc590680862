//! Servers for the workspace's tests: a Redis or Postgres to share (the configured one, the
//! local default when it answers, else a private one), and private servers (Redis,
//! Postgres, PgBouncer) on free loopback ports in temporary directories, for tests that
//! stop, pause or restart them. Each is stopped by its pid: on drop, or, for servers kept
//! in a `static` (never dropped), by a detached reaper once the test process is gone.
//!
//! A server that cannot be had is a panic that says how to get one: tests never pass
//! silently without their server.

//! Two layers: [`servers`] (what runs a server and stops it) and the helpers tests share
//! on top of them ([`locks`]: taking, waiting, counting calls; [`bench`](mod@bench): what
//! `lock-bench` measures). The servers' modules are re-exported here by name.

pub mod bench;
pub mod locks;
pub mod servers;

pub use servers::{
    cluster, free_port, is_root, logs, mysql, postgres, proxy, reap_when_gone, redis, require,
    sentinel, signal, wait_for_port,
};
