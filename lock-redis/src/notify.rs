//! Release notifications: one pub/sub connection per backend, shared by every waiter.
//!
//! Each release that frees a lock `PUBLISH`es on the lock's channel (`P{T}:released:K`);
//! on a Redis Cluster it `SPUBLISH`es (sharded pub/sub, Redis 7), so the message stays on
//! the lock's own shard, and waiters `SSUBSCRIBE` through the cluster connection, which
//! routes each channel to its shard and subscribes again after a reconnect.
//! A waiter subscribes once an attempt found the lock busy, then attempts once more;
//! `subscribe` returns only once the server confirmed the `SUBSCRIBE`, so a release
//! published after that point reaches the waiter.
//! A message wakes *one* waiter of the process, in turn (`lock_core::backend::Waiters`): only one
//! can win the lock; a message `all` (shared holds or a writer's marker were involved, see
//! `rules::Wake`) wakes every waiter of the key. Waiters on one key share one server
//! subscription; a channel nobody
//! waits on any more is unsubscribed with the next subscription change.
//!
//! When the pub/sub connection drops, every waiter is woken (a release may have been missed,
//! so they try again at once) and the next `subscribe` opens a new connection and subscribes
//! the channels still wanted. Waiters also keep a fallback poll, so a lost message only
//! costs latency. A cooldown's end publishes nothing (Redis has no hook for an expiry short
//! of keyspace notifications); a waiter told `Busy` by a cooling lock sleeps until its end.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::backend::{ReleaseSubscription, Waiters};
use lock_core::{Operation, Result};
use redis::aio::PubSubSink;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};

use crate::conn::primary::Primary;
use crate::error::map_error;

pub(crate) struct Notifier {
    source: Source,
    backend: &'static str,
    /// The subscribing side of the connection, if one is open; held across the round trip
    /// of a (un)subscribe so those go out in order (on a cluster, only for the order).
    sink: Arc<tokio::sync::Mutex<Option<PubSubSink>>>,
    /// Who waits on which channel: a message wakes one of them, in turn.
    waiters: Waiters,
    state: Arc<Mutex<Connection>>,
    /// Dropped with the notifier (with its backend): ends the task that reads the pub/sub
    /// connection, and so the connection, which would otherwise live on until a message.
    closed: tokio::sync::watch::Sender<()>,
}

#[derive(Default)]
struct Connection {
    /// The channels subscribed on the server.
    subscribed: HashSet<String>,
    /// Bumped on each new connection, so a reader of an old one cannot clear the new one.
    generation: u64,
    connected: bool,
}

fn lock(m: &Mutex<Connection>) -> std::sync::MutexGuard<'_, Connection> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where subscriptions go.
enum Source {
    /// A pub/sub connection of its own to the (current) primary.
    Plain(Arc<Primary>),
    /// Sharded subscriptions on the cluster connection, whose pushes [`Sharded::sender`]
    /// hands out.
    Sharded(ClusterConnection),
}

/// The half of a sharded notifier that exists before the cluster connection: the waiters,
/// and the push sender that wakes them.
pub(crate) struct Sharded {
    waiters: Waiters,
    state: Arc<Mutex<Connection>>,
}

impl Sharded {
    pub(crate) fn new() -> Self {
        Sharded {
            waiters: Waiters::default(),
            state: Arc::default(),
        }
    }

    /// What the cluster connection calls with every push: a sharded message wakes one
    /// waiter of its channel; a lost connection or a shard that dropped a subscription (its
    /// slot moved) wakes every waiter, since a release may have been missed, and the next
    /// subscription subscribes again.
    pub(crate) fn sender(&self) -> impl Fn(PushInfo) -> std::result::Result<(), ()> + Send + Sync {
        let (waiters, state) = (self.waiters.clone(), Arc::downgrade(&self.state));
        move |push: PushInfo| {
            let Some(state) = state.upgrade() else {
                return Ok(());
            };
            let channel = match push.data.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            };
            match push.kind {
                PushKind::SMessage | PushKind::Message => match push.data.get(1) {
                    Some(Value::BulkString(b)) if b == b"all" => waiters.wake_key(&channel),
                    _ => waiters.wake_one(&channel),
                },
                PushKind::Disconnection => {
                    lock(&state).subscribed.clear();
                    waiters.wake_all();
                }
                PushKind::SUnsubscribe => {
                    lock(&state).subscribed.remove(&channel);
                    if waiters.is_waited(&channel) {
                        waiters.wake_all();
                    }
                }
                _ => {}
            }
            Ok(())
        }
    }

    /// The notifier, once the cluster connection is open.
    pub(crate) fn into_notifier(self, conn: ClusterConnection, backend: &'static str) -> Notifier {
        Notifier {
            source: Source::Sharded(conn),
            backend,
            sink: Arc::default(),
            waiters: self.waiters,
            state: self.state,
            closed: tokio::sync::watch::Sender::new(()),
        }
    }
}

impl Notifier {
    pub(crate) fn new(primary: Arc<Primary>, backend: &'static str) -> Self {
        Notifier {
            source: Source::Plain(primary),
            backend,
            sink: Arc::default(),
            waiters: Waiters::default(),
            state: Arc::default(),
            closed: tokio::sync::watch::Sender::new(()),
        }
    }

    /// Subscribes a waiter to `channel`, within `deadline`: a connection that does not
    /// answer by then is dropped (the next subscription opens a new one).
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        deadline: std::time::Duration,
    ) -> Result<ReleaseSubscription> {
        let mut sink = self.sink.lock().await;
        let subscribed = async {
            match &self.source {
                Source::Plain(primary) => self.subscribe_on(primary, &mut sink, channel).await,
                Source::Sharded(conn) => self.subscribe_sharded(conn.clone(), channel).await,
            }
        };
        match tokio::time::timeout(deadline, subscribed).await {
            Ok(result) => result,
            Err(_) => {
                *sink = None;
                let mut st = lock(&self.state);
                st.connected = false;
                // A cluster connection may have sent it: subscribe again next time.
                st.subscribed.remove(channel);
                drop(st);
                if let Source::Plain(primary) = &self.source {
                    primary.forget();
                }
                Err(lock_core::Error::new(
                    lock_core::ErrorKind::Unavailable,
                    self.backend,
                    Operation::Subscribe,
                    format!(
                        "no answer within the deadline of {deadline:?} (RedisBuilder::timeout / timeout=); \
                         waiters poll instead"
                    ),
                ))
            }
        }
    }

    async fn subscribe_on(
        &self,
        primary: &Arc<Primary>,
        sink: &mut Option<PubSubSink>,
        channel: &str,
    ) -> Result<ReleaseSubscription> {
        let op = Operation::Subscribe;
        // In line before the SUBSCRIBE goes out: a message after its confirmation finds it.
        let subscription = self.waiters.subscribe(channel);
        let (stale, fresh) = {
            let mut st = lock(&self.state);
            if !st.connected {
                *sink = None;
            }
            let fresh = !st.subscribed.contains(channel) || sink.is_none();
            (self.take_stale(&mut st), fresh)
        };
        if sink.is_none() {
            *sink = Some(connect(&self.pipe(primary)).await?);
            // A new connection subscribes to everything still wanted, this channel included.
            let all = self.waiters.keys();
            if let Some(s) = sink.as_mut() {
                if let Err(e) = s.subscribe(&all).await {
                    *sink = None;
                    return Err(map_error(self.backend, op, e));
                }
            }
            lock(&self.state).subscribed = all.into_iter().collect();
        } else if let Some(s) = sink.as_mut() {
            let result = async {
                if !stale.is_empty() {
                    s.unsubscribe(&stale).await?;
                }
                if fresh {
                    s.subscribe(channel).await?;
                }
                Ok(())
            }
            .await;
            if let Err(e) = result {
                *sink = None;
                lock(&self.state).connected = false;
                return Err(map_error(self.backend, op, e));
            }
            lock(&self.state).subscribed.insert(channel.to_owned());
        }
        Ok(subscription)
    }

    /// The subscribed channels nobody waits on any more, taken out of the subscribed set:
    /// the caller unsubscribes them with its next subscription change.
    fn take_stale(&self, st: &mut Connection) -> Vec<String> {
        let stale: Vec<String> = st
            .subscribed
            .iter()
            .filter(|c| !self.waiters.is_waited(c))
            .cloned()
            .collect();
        for c in &stale {
            st.subscribed.remove(c);
        }
        stale
    }

    /// Subscribes on a cluster: one channel at a time (each to its own shard).
    async fn subscribe_sharded(
        &self,
        mut conn: ClusterConnection,
        channel: &str,
    ) -> Result<ReleaseSubscription> {
        let op = Operation::Subscribe;
        let subscription = self.waiters.subscribe(channel);
        let (stale, fresh) = {
            let mut st = lock(&self.state);
            let stale = self.take_stale(&mut st);
            (stale, !st.subscribed.contains(channel))
        };
        for c in &stale {
            conn.sunsubscribe(c)
                .await
                .map_err(|e| map_error(self.backend, op, e))?;
        }
        if fresh {
            conn.ssubscribe(channel)
                .await
                .map_err(|e| map_error(self.backend, op, e))?;
            lock(&self.state).subscribed.insert(channel.to_owned());
        }
        Ok(subscription)
    }

    /// What the task reading a pub/sub connection needs to open the next one.
    fn pipe(&self, primary: &Arc<Primary>) -> Pipe {
        Pipe {
            primary: Arc::clone(primary),
            backend: self.backend,
            waiters: self.waiters.clone(),
            state: Arc::downgrade(&self.state),
            sink: Arc::downgrade(&self.sink),
            closed: self.closed.subscribe(),
        }
    }
}

/// A notifier's pub/sub side, as the task reading its connection holds it: weakly, so that
/// the backend's drop ends the task.
#[derive(Clone)]
struct Pipe {
    primary: Arc<Primary>,
    backend: &'static str,
    waiters: Waiters,
    state: std::sync::Weak<Mutex<Connection>>,
    sink: std::sync::Weak<tokio::sync::Mutex<Option<PubSubSink>>>,
    closed: tokio::sync::watch::Receiver<()>,
}

/// How long opening a pub/sub connection and subscribing again may take after the last one
/// dropped, before the next try.
const RECONNECT_WITHIN: Duration = Duration::from_secs(2);

/// Opens the pub/sub connection and starts the task that hands its messages out. (A boxed
/// future of a named type: the task may open the next connection, so the future would
/// otherwise contain itself.)
fn connect(pipe: &Pipe) -> futures_util::future::BoxFuture<'_, Result<PubSubSink>> {
    Box::pin(async move {
        let op = Operation::Subscribe;
        let client = pipe.primary.client(pipe.backend, op).await?;
        let pubsub = client.get_async_pubsub().await.map_err(|e| {
            pipe.primary.failed(&e);
            map_error(pipe.backend, op, e)
        })?;
        let (sink, mut stream) = pubsub.split();
        let Some(state) = pipe.state.upgrade() else {
            return Ok(sink);
        };
        let generation = {
            let mut st = lock(&state);
            st.generation += 1;
            st.connected = true;
            st.subscribed.clear();
            st.generation
        };
        let mut pipe = pipe.clone();
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    msg = stream.next() => msg,
                    // The backend is gone: nobody to wake; the connection closes with this task.
                    _ = pipe.closed.changed() => return,
                };
                let Some(msg) = msg else { break };
                // "all": shared holds or a writer's marker were involved (`rules::Wake`).
                match msg.get_payload_bytes() {
                    b"all" => pipe.waiters.wake_key(msg.get_channel_name()),
                    _ => pipe.waiters.wake_one(msg.get_channel_name()),
                }
            }
            // The connection is gone: messages may have been missed, so wake everyone. (Behind
            // Sentinel the next connection asks for the primary again: it may have moved.)
            let Some(state) = pipe.state.upgrade() else {
                return;
            };
            {
                let mut st = lock(&state);
                if st.generation != generation {
                    return;
                }
                st.connected = false;
                pipe.waiters.wake_all();
            }
            drop(state);
            resubscribe(pipe).await;
        });
        Ok(sink)
    })
}

/// After the connection dropped: while anyone waits, opens a new one and subscribes again to
/// every channel waited on, so that the waiters already waiting hear the next release (else
/// they would hear nothing until a new waiter subscribed, and wait for their fallback
/// poll). Tries again with a growing pause (50 ms to 1 s); stops when a subscription made
/// the connection first, when nobody waits, or when the backend is gone.
async fn resubscribe(mut pipe: Pipe) {
    let mut pause = Duration::from_millis(50);
    loop {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = pipe.closed.changed() => return,
        }
        pause = (pause * 2).min(Duration::from_secs(1));
        let (Some(sink), Some(state)) = (pipe.sink.upgrade(), pipe.state.upgrade()) else {
            return;
        };
        let mut sink = sink.lock().await;
        if lock(&state).connected {
            return;
        }
        let all = pipe.waiters.keys();
        if all.is_empty() {
            return;
        }
        let opened = tokio::time::timeout(RECONNECT_WITHIN, async {
            let mut fresh = connect(&pipe).await?;
            fresh
                .subscribe(&all)
                .await
                .map_err(|e| map_error(pipe.backend, Operation::Subscribe, e))?;
            Ok::<_, lock_core::Error>(fresh)
        })
        .await;
        match opened {
            Ok(Ok(fresh)) => {
                lock(&state).subscribed = all.into_iter().collect();
                *sink = Some(fresh);
                // A release between the drop and now reached nobody.
                pipe.waiters.wake_all();
                return;
            }
            Ok(Err(e)) => {
                lock(&state).connected = false;
                tracing::debug!("pub/sub connection not back yet, waiters poll meanwhile: {e}");
            }
            Err(_) => {
                lock(&state).connected = false;
                tracing::debug!("pub/sub connection not back within {RECONNECT_WITHIN:?}");
            }
        }
    }
}
