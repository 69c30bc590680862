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

use super::primary::SentinelLink;
use crate::error::map_error;
use crate::keys::{slot, LockKeys};

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
    Sentinel(SentinelLink),
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

    /// Runs `call`, an `EVALSHA` of `script` on the record `keys` names; a server that does
    /// not know the script (`NOSCRIPT`: restarted, `SCRIPT FLUSH`, a failover or a new
    /// cluster node) gets it with `SCRIPT LOAD`, and the call is sent again (a script that
    /// was not known was not run, so this never applies a request twice).
    ///
    /// When replicas are asked for, a `WAIT` goes in the same pipeline as the call, so on
    /// the very connection that carried the write (sent on its own, it could go out on a
    /// connection made after a reconnect or a failover, and ack at once); the second value
    /// is how many replicas acked, for the caller to check when the call wrote.
    pub(crate) async fn invoke(
        &self,
        call: &redis::Cmd,
        script: &Script,
        keys: &LockKeys,
        name: &'static str,
        op: Operation,
    ) -> Result<(Vec<String>, Option<u32>)> {
        let acks = self.acks;
        // The cluster's and the sentinels' calls are boxed: their futures are six times the
        // size of the one server's, and every layer above this one (the deadline, the span,
        // the trait's box) would otherwise carry and copy that size on every call.
        match &self.kind {
            LinkKind::Server { conn, .. } => {
                evalsha_then_wait(call, script, acks, &mut conn.clone()).await
            }
            LinkKind::Cluster(c) => Box::pin(cluster_evalsha(call, script, acks, keys, c)).await,
            LinkKind::Sentinel(s) => {
                return Box::pin(async {
                    let mut conn = s.connection(name, op).await?;
                    let reply = evalsha_then_wait(call, script, acks, &mut conn).await;
                    if let Err(e) = &reply {
                        s.failed(e);
                    }
                    reply.map_err(|e| map_error(name, op, e))
                })
                .await
            }
        }
        .map_err(|e| map_error(name, op, e))
    }

    /// Checks the replicas a call that wrote reached, when replicas are asked for.
    pub(crate) fn check_acks(
        &self,
        acked: Option<u32>,
        name: &'static str,
        op: Operation,
    ) -> Result<()> {
        match self.acks {
            Some(acks) => acks.check(acked, name, op),
            None => Ok(()),
        }
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

/// `call`, then a `WAIT` when `acks` asks for one, in one pipeline on `conn`; `call` is
/// sent again after a `SCRIPT LOAD` if the server did not know the script.
async fn evalsha_then_wait(
    call: &redis::Cmd,
    script: &Script,
    acks: Option<Acks>,
    conn: &mut impl ConnectionLike,
) -> redis::RedisResult<(Vec<String>, Option<u32>)> {
    let Some(acks) = acks else {
        return Ok((evalsha(call, script, conn).await?, None));
    };
    for loaded in [false, true] {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.add_command(call.clone()).add_command(acks.command());
        let mut replies: Vec<redis::RedisResult<Value>> = pipe.query_async(conn).await?;
        let waited = replies.pop();
        let reply = replies.pop().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Client, "a pipeline of two gave no reply"))
        })?;
        match reply {
            Err(e) if !loaded && is_noscript(&e) => {
                script.load_async(conn).await?;
            }
            reply => {
                let acked = waited
                    .and_then(|r| r.ok())
                    .and_then(|v| redis::from_redis_value(v).ok());
                return Ok((redis::from_redis_value(reply?)?, acked));
            }
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::Client,
        "the server answered NOSCRIPT right after SCRIPT LOAD",
    )))
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// [`evalsha_then_wait`] on a cluster, to the primary of the record's slot. The cluster
/// client re-sends nothing by itself (its retries are off: after a connection cut under a
/// call it would send again a call the server may have applied, and an obtain or a release
/// is not idempotent). What a node refused *before running it* is sent again here, after a
/// pause in which the client refreshes its map of slots: `MOVED`, `ASK`, `TRYAGAIN`,
/// `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY`, or no connection to the node yet.
/// The call's deadline bounds the loop.
async fn cluster_evalsha(
    call: &redis::Cmd,
    script: &Script,
    acks: Option<Acks>,
    keys: &LockKeys,
    conn: &ClusterConnection,
) -> redis::RedisResult<(Vec<String>, Option<u32>)> {
    const MAX_PAUSE: Duration = Duration::from_millis(100);
    let mut pause = Duration::from_millis(5);
    loop {
        let reply = match acks {
            None => evalsha(call, script, &mut conn.clone())
                .await
                .map(|r| (r, None)),
            Some(acks) => {
                let route = Route::new(slot(&keys.record), SlotAddr::Master);
                cluster_pipeline(call, script, acks, route, conn).await
            }
        };
        match reply {
            Err(e) if never_ran(&e) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            reply => return reply,
        }
    }
}

/// `call` and a `WAIT` in one pipeline to the node `route` names.
async fn cluster_pipeline(
    call: &redis::Cmd,
    script: &Script,
    acks: Acks,
    route: Route,
    conn: &ClusterConnection,
) -> redis::RedisResult<(Vec<String>, Option<u32>)> {
    for loaded in [false, true] {
        let mut pipe = redis::pipe();
        pipe.add_command(call.clone()).add_command(acks.command());
        let target = SingleNodeRoutingInfo::SpecificNode(route);
        match conn.clone().route_pipeline(pipe, 0, 2, target).await {
            Err(e) if !loaded && is_noscript(&e) => {
                script.load_async(&mut conn.clone()).await?;
            }
            Err(e) => return Err(e),
            Ok(mut replies) => {
                let acked = replies.pop().and_then(|v| redis::from_redis_value(v).ok());
                let reply = replies.pop().ok_or_else(|| {
                    redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "a pipeline of two gave no reply",
                    ))
                })?;
                return Ok((redis::from_redis_value(reply)?, acked));
            }
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::Client,
        "the server answered NOSCRIPT right after SCRIPT LOAD",
    )))
}

/// Whether the cluster refused the call before any node ran it, so that sending it again
/// cannot apply it twice. An I/O error never counts: the call may have run.
fn never_ran(e: &redis::RedisError) -> bool {
    use redis::RetryMethod as M;
    match e.kind() {
        redis::ErrorKind::Server(_) => matches!(
            e.retry_method(),
            M::MovedRedirect | M::AskRedirect | M::WaitAndRetry | M::RefreshSlotsAndRetry
        ),
        redis::ErrorKind::ClusterConnectionNotFound => true,
        _ => false,
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
