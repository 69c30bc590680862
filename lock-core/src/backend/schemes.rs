//! The URL schemes of this workspace's backends, written once.
//!
//! Each backend crate takes its list from here, and `lock-config` knows every scheme even
//! of a backend its build left out, so that such a URL names the cargo feature to enable
//! rather than being an "unknown scheme".

/// The in-memory backend: `memory:`.
pub const MEMORY: &[&str] = &["memory"];

/// The file backend: `file:///dir`, `file://dir`, `file:dir`.
pub const FILE: &[&str] = &["file"];

/// Redis: one server, the WATCH variant, a Cluster, a Sentinel set; each with TLS.
pub const REDIS: &[&str] = &[
    "redis",
    "rediss",
    "redis+watch",
    "rediss+watch",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
];

/// Postgres.
pub const POSTGRES: &[&str] = &["postgres", "postgresql"];

/// MySQL and MariaDB.
pub const MYSQL: &[&str] = &["mysql", "mariadb"];

/// etcd: `etcd://host:port[,host:port…]/prefix`, and with TLS `etcds://`.
pub const ETCD: &[&str] = &["etcd", "etcds"];
