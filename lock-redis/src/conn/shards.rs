//! The WATCH variant on a Redis Cluster: a pool of dedicated connections per primary, and
//! the slot map that picks one.
//!
//! `WATCH` state lives on one server connection, so a transaction must run start to end on
//! one dedicated connection to the primary of its record's slot; a cluster connection,
//! which reconnects and follows `MOVED` on its own, could send `EXEC` on a connection that
//! never saw the `WATCH` and commit blindly. The slot map comes from `CLUSTER SLOTS` (asked
//! through the cluster connection) and is read again after any error that may mean it
//! changed: a slot that moved (`MOVED`, `ASK`, a transaction aborted by one), a failover
//! (`CLUSTERDOWN`, `READONLY`), a broken connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lock_core::{Error, ErrorKind, Operation, Result};
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, Value};

use super::pool::Pool;
use super::primary::Primary;
use super::topology::{at, AddressMap};
use crate::error::map_error;
use crate::keys::slot;

pub(crate) struct Shards {
    conn: ClusterConnection,
    /// A seed's connection info: credentials and TLS for every node.
    template: ConnectionInfo,
    map: AddressMap,
    pool_size: usize,
    backend: &'static str,
    /// `(first slot, last slot, host, port)` of each primary's ranges; empty when unknown.
    slots: Mutex<Vec<(u16, u16, String, u16)>>,
    pools: Mutex<HashMap<(String, u16), Arc<Pool>>>,
}

impl Shards {
    pub(crate) fn new(
        conn: ClusterConnection,
        template: ConnectionInfo,
        map: AddressMap,
        pool_size: usize,
        backend: &'static str,
    ) -> Self {
        Shards {
            conn,
            template,
            map,
            pool_size,
            backend,
            slots: Mutex::default(),
            pools: Mutex::default(),
        }
    }

    /// The cluster connection, for commands routed by slot (a listing's `SCAN`).
    pub(crate) fn cluster(&self) -> &ClusterConnection {
        &self.conn
    }

    /// The pool of the primary that serves `record`'s slot.
    pub(crate) async fn pool_for(&self, record: &str, op: Operation) -> Result<Arc<Pool>> {
        let slot = slot(record);
        if lock(&self.slots).is_empty() {
            self.read_slots(op).await?;
        }
        let node = lock(&self.slots)
            .iter()
            .find(|(first, last, _, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, host, port)| (host.clone(), *port));
        let Some(node) = node else {
            return Err(Error::new(
                ErrorKind::Unavailable,
                self.backend,
                op,
                format!("no primary serves slot {slot} now; the call is safe to retry"),
            ));
        };
        let mut pools = lock(&self.pools);
        let pool = pools.entry(node.clone()).or_insert_with(|| {
            let addr = at(self.template.addr(), node.0.clone(), node.1);
            let info = self.template.clone().set_addr(addr);
            // Opening a client only parses what the template already passed: it cannot fail.
            let client = redis::Client::open(info).expect("a client from a checked template");
            Arc::new(Pool::new(
                Arc::new(Primary::Fixed(client)),
                self.pool_size,
                self.backend,
            ))
        });
        Ok(pool.clone())
    }

    /// `(node, id)` of every pool's idle connections.
    pub(crate) fn idle_ids(&self) -> Vec<(String, i64)> {
        let pools: Vec<Arc<Pool>> = lock(&self.pools).values().cloned().collect();
        pools.iter().flat_map(|p| p.idle_ids()).collect()
    }

    /// Forgets the slot map: the next transaction reads it again.
    pub(crate) fn forget_slots(&self) {
        lock(&self.slots).clear();
    }

    async fn read_slots(&self, op: Operation) -> Result<()> {
        let slots = slot_ranges(&self.conn, self.backend, op)
            .await?
            .into_iter()
            .map(|(first, last, host, port)| {
                let (host, port) = self.map.target(&host, port);
                (first, last, host, port)
            })
            .collect();
        *lock(&self.slots) = slots;
        Ok(())
    }
}

/// `(first slot, last slot, host, port)` of each range a cluster's primaries serve, as
/// `CLUSTER SLOTS` (asked through `conn`) names them; ranges it answers oddly are left out.
pub(crate) async fn slot_ranges(
    conn: &ClusterConnection,
    backend: &'static str,
    op: Operation,
) -> Result<Vec<(u16, u16, String, u16)>> {
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn.clone())
        .await
        .map_err(|e| map_error(backend, op, e))?;
    let mut slots = Vec::new();
    if let Value::Array(ranges) = reply {
        for range in ranges {
            let Value::Array(fields) = range else {
                continue;
            };
            let (Some(first), Some(last), Some(Value::Array(primary))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                continue;
            };
            let (Ok(first), Ok(last)) = (
                redis::from_redis_value_ref::<u16>(first),
                redis::from_redis_value_ref::<u16>(last),
            ) else {
                continue;
            };
            let (Some(host), Some(port)) = (primary.first(), primary.get(1)) else {
                continue;
            };
            let (Ok(host), Ok(port)) = (
                redis::from_redis_value_ref::<String>(host),
                redis::from_redis_value_ref::<u16>(port),
            ) else {
                continue;
            };
            slots.push((first, last, host, port));
        }
    }
    Ok(slots)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
