//! Servers for the workspace's tests: a Redis or Postgres to share (the configured one, the
//! local default when it answers, else a private one), and private servers (Redis,
//! Postgres, PgBouncer, MariaDB, etcd) on free loopback ports in temporary directories, for tests that
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
    cluster, etcd, free_port, is_root, logs, mysql, postgres, proxy, reap_when_gone, redis,
    require, sentinel, signal, wait_for_port,
};

/// `url` with its user (and password, if any) replaced by `userinfo`, for tests that log in
/// as a user of their own: `as_user("mysql://root@127.0.0.1:3306/test", "ro")` is
/// `mysql://ro@127.0.0.1:3306/test`.
///
/// ```
/// assert_eq!(
///     test_servers::as_user("mysql://root:pw@127.0.0.1:3306/test", "ro"),
///     "mysql://ro@127.0.0.1:3306/test"
/// );
/// assert_eq!(test_servers::as_user("redis://127.0.0.1:6379/0", "u:x"), "redis://u:x@127.0.0.1:6379/0");
/// ```
pub fn as_user(url: &str, userinfo: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    format!("{scheme}://{userinfo}@{rest}")
}
