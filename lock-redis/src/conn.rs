//! How commands reach Redis: the three topologies, and the connections each variant uses
//! on them.
//!
//! | topology | Lua variant ([`link`]) | WATCH/MULTI variant |
//! |---|---|---|
//! | one server | one multiplexed connection manager | a [`pool`] of dedicated connections |
//! | Sentinel | the [`primary`] the sentinels name, found again after a failover | a [`pool`] on that primary |
//! | Cluster | a cluster connection that follows `MOVED` and `ASK` | a [`pool`] per primary, picked by the slot map ([`shards`]) |
//!
//! [`topology`] parses a URL into one of the three; everything else here connects.

pub(crate) mod link;
pub(crate) mod pool;
pub(crate) mod primary;
pub(crate) mod shards;
pub(crate) mod topology;

/// Where the WATCH variant's transactions run.
pub(crate) enum Pools {
    /// One pool, to the one primary: the server, or the one the sentinels name.
    Primary(pool::Pool),
    /// A pool per cluster primary, chosen by the record's slot.
    Cluster(Box<shards::Shards>),
}
