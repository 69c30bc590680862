//! The Lua variant's way to its server, for each topology, and the optional wait for
//! replicas after a write.

use std::time::Duration;

use lock_core::{Error, ErrorKind, Operation, Result};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Script, Value};

use crate::error::map_error;
use crate::keys::{slot, LockKeys};
use crate::primary::Shared;

/// How commands reach the server that owns a lock.
pub(crate) struct Link {
    pub(crate) kind: LinkKind,
    pub(crate) acks: Option<Acks>,
}

/// The connection of each topology.
pub(crate) enum LinkKind {
    /// One server (`node` is its `host:port`), through a connection manager that
    /// reconnects in the background.
    Server {
        conn: ConnectionManager,
        node: String,
    },
    /// A cluster connection: routes each call to its slot's primary and follows `MOVED`
    /// and `ASK`.
    Cluster(ClusterConnection),
    /// The primary the sentinels name, found again after a failover.
    Sentinel(Shared),
}

/// Wait for replicas after each write: `WAIT replicas timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acks {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl Link {
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.kind, LinkKind::Cluster(_))
    }

    /// Runs `call`, an `EVALSHA` of `script`; a server that does not know the script
    /// (`NOSCRIPT`: restarted, `SCRIPT FLUSH`, a failover or a new cluster node) gets it
    /// with `SCRIPT LOAD`, and the call is sent again (a script that was not known was not
    /// run, so this never applies a request twice).
    pub(crate) async fn invoke(
        &self,
        call: &redis::Cmd,
        script: &Script,
        name: &'static str,
        op: Operation,
    ) -> Result<Vec<String>> {
        match &self.kind {
            LinkKind::Server { conn, .. } => evalsha(call, script, &mut conn.clone()).await,
            LinkKind::Cluster(c) => evalsha(call, script, &mut c.clone()).await,
            LinkKind::Sentinel(s) => {
                let mut conn = s.connection(name, op).await?;
                let reply = evalsha(call, script, &mut conn).await;
                if let Err(e) = &reply {
                    s.failed(e);
                }
                reply
            }
        }
        .map_err(|e| map_error(name, op, e))
    }

    /// Runs `pipe` on the connection of a single server or of the sentinels' primary, with
    /// a `WAIT` for the replicas asked for (if any) at its end, on the connection that
    /// wrote: each command's reply, in order, the `WAIT`'s checked and left out. Not on a
    /// cluster, where one pipeline cannot reach every key (callers check `is_cluster`).
    pub(crate) async fn pipeline(
        &self,
        pipe: &mut redis::Pipeline,
        name: &'static str,
        op: Operation,
    ) -> Result<Vec<redis::RedisResult<Value>>> {
        if let Some(acks) = self.acks {
            pipe.add_command(acks.command());
        }
        let reply = match &self.kind {
            LinkKind::Server { conn, .. } => pipe.query_async(&mut conn.clone()).await,
            LinkKind::Cluster(_) => {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    name,
                    op,
                    "a pipeline cannot reach every node of a cluster",
                ))
            }
            LinkKind::Sentinel(s) => {
                let mut conn = s.connection(name, op).await?;
                let reply = pipe.query_async(&mut conn).await;
                if let Err(e) = &reply {
                    s.failed(e);
                }
                reply
            }
        };
        let mut replies: Vec<redis::RedisResult<Value>> =
            reply.map_err(|e| map_error(name, op, e))?;
        if let Some(acks) = self.acks {
            let acked = replies
                .pop()
                .and_then(|r| r.ok())
                .and_then(|v| redis::from_redis_value(v).ok());
            acks.check(acked, name, op)?;
        }
        Ok(replies)
    }

    /// After a write of `keys`' record: waits for the replicas asked for (if any) on the
    /// connection that wrote it.
    pub(crate) async fn await_replicas(
        &self,
        keys: &LockKeys,
        name: &'static str,
        op: Operation,
    ) -> Result<()> {
        let Some(acks) = self.acks else {
            return Ok(());
        };
        match &self.kind {
            LinkKind::Server { conn, .. } => acks.await_on(&mut conn.clone(), name, op).await,
            LinkKind::Sentinel(s) => {
                let mut conn = s.connection(name, op).await?;
                acks.await_on(&mut conn, name, op).await
            }
            LinkKind::Cluster(c) => {
                // To the slot's primary: the connection the script's write went through.
                let route = Route::new(slot(&keys.record), SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let reply = c
                    .clone()
                    .route_command(acks.command(), routing)
                    .await
                    .map_err(|e| map_error(name, op, e))?;
                acks.check(redis::from_redis_value(reply).ok(), name, op)
            }
        }
    }

    /// `(node, id)` of each command connection: `CLIENT ID` on every node it reaches.
    pub(crate) async fn client_ids(&self, name: &'static str) -> Result<Vec<(String, i64)>> {
        let op = Operation::Inspect;
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("ID");
        let fail = |e| map_error(name, op, e);
        match &self.kind {
            LinkKind::Server { conn, node } => {
                let id = cmd.query_async(&mut conn.clone()).await.map_err(fail)?;
                Ok(vec![(node.clone(), id)])
            }
            LinkKind::Sentinel(s) => {
                let mut conn = s.connection(name, op).await?;
                let id = cmd.query_async(&mut conn).await.map_err(fail)?;
                let node = s.primary.client(name, op).await?;
                Ok(vec![(node.get_connection_info().addr().to_string(), id)])
            }
            LinkKind::Cluster(c) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None));
                let reply = c.clone().route_command(cmd, routing).await.map_err(fail)?;
                let pairs: Vec<(String, i64)> = match reply {
                    Value::Map(pairs) => pairs
                        .into_iter()
                        .filter_map(|(k, v)| {
                            Some((
                                redis::from_redis_value(k).ok()?,
                                redis::from_redis_value(v).ok()?,
                            ))
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                Ok(pairs)
            }
        }
    }

    /// After a call that hit its deadline.
    pub(crate) fn timed_out(&self) {
        if let LinkKind::Sentinel(s) = &self.kind {
            s.forget();
        }
    }
}

/// `call` on `conn`, loading `script` first if the server does not know it.
async fn evalsha(
    call: &redis::Cmd,
    script: &Script,
    conn: &mut impl ConnectionLike,
) -> redis::RedisResult<Vec<String>> {
    match call.query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            call.query_async(conn).await
        }
        reply => reply,
    }
}

impl Acks {
    fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("WAIT");
        let ms = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        cmd.arg(self.replicas).arg(ms);
        cmd
    }

    /// `WAIT` on `conn`, which carried the write.
    pub(crate) async fn await_on(
        &self,
        conn: &mut impl ConnectionLike,
        name: &'static str,
        op: Operation,
    ) -> Result<()> {
        let acked: u32 = self
            .command()
            .query_async(conn)
            .await
            .map_err(|e| map_error(name, op, e))?;
        self.check(Some(acked), name, op)
    }

    fn check(&self, acked: Option<u32>, name: &'static str, op: Operation) -> Result<()> {
        match acked {
            Some(n) if n >= self.replicas => Ok(()),
            _ => Err(Error::new(
                ErrorKind::Unavailable,
                name,
                op,
                format!(
                    "the write reached {} of the {} replicas asked for within {:?} \
                     (with_replica_acks / wait=); it is applied on the primary but a failover \
                     now could lose it; the call is safe to retry",
                    acked.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                    self.replicas,
                    self.timeout
                ),
            )),
        }
    }
}
