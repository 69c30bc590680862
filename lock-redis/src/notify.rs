//! Release notifications: one pub/sub connection per backend, shared by every waiter.
//!
//! Each release that frees a lock `PUBLISH`es on the lock's channel (`P{T}:released:K`).
//! A waiter subscribes before its obtain attempt; `subscribe` returns only once the server
//! confirmed the `SUBSCRIBE`, so a release published after that point reaches the waiter.
//! A message wakes *one* waiter of the process, in turn (`lock_core::Waiters`): only one
//! can win the lock. Waiters on one key share one server subscription; a channel nobody
//! waits on any more is unsubscribed with the next subscription change.
//!
//! When the pub/sub connection drops, every waiter is woken (a release may have been missed,
//! so they try again at once) and the next `subscribe` opens a new connection and subscribes
//! the channels still wanted. Waiters also keep a fallback poll, so a lost message only
//! costs latency. A cooldown's end publishes nothing (Redis has no hook for an expiry short
//! of keyspace notifications); a waiter told `Busy` by a cooling lock sleeps until its end.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use lock_core::{Operation, ReleaseSubscription, Result, Waiters};
use redis::aio::PubSubSink;

use crate::error::map_error;

pub(crate) struct Notifier {
    client: redis::Client,
    backend: &'static str,
    /// The subscribing side of the connection, if one is open; held across the round trip
    /// of a (un)subscribe so those go out in order.
    sink: tokio::sync::Mutex<Option<PubSubSink>>,
    /// Who waits on which channel: a message wakes one of them, in turn.
    waiters: Waiters,
    state: Arc<Mutex<Connection>>,
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

impl Notifier {
    pub(crate) fn new(client: redis::Client, backend: &'static str) -> Self {
        Notifier {
            client,
            backend,
            sink: tokio::sync::Mutex::new(None),
            waiters: Waiters::default(),
            state: Arc::default(),
        }
    }

    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// Subscribes a waiter to `channel`, within `deadline`: a connection that does not
    /// answer by then is dropped (the next subscription opens a new one).
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        deadline: std::time::Duration,
    ) -> Result<ReleaseSubscription> {
        let mut sink = self.sink.lock().await;
        match tokio::time::timeout(deadline, self.subscribe_on(&mut sink, channel)).await {
            Ok(result) => result,
            Err(_) => {
                *sink = None;
                lock(&self.state).connected = false;
                Err(lock_core::Error::new(
                    lock_core::ErrorKind::Unavailable,
                    self.backend,
                    Operation::Subscribe,
                    format!(
                        "no answer within the deadline of {deadline:?} (with_timeout / timeout=); \
                         waiters poll instead"
                    ),
                ))
            }
        }
    }

    async fn subscribe_on(
        &self,
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
            let stale: Vec<String> = st
                .subscribed
                .iter()
                .filter(|c| !self.waiters.is_waited(c))
                .cloned()
                .collect();
            for c in &stale {
                st.subscribed.remove(c);
            }
            (stale, fresh)
        };
        if sink.is_none() {
            *sink = Some(self.connect().await?);
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

    /// Opens the pub/sub connection and starts the task that hands its messages out.
    async fn connect(&self) -> Result<PubSubSink> {
        let pubsub = self
            .client
            .get_async_pubsub()
            .await
            .map_err(|e| map_error(self.backend, Operation::Subscribe, e))?;
        let (sink, mut stream) = pubsub.split();
        let generation = {
            let mut st = lock(&self.state);
            st.generation += 1;
            st.connected = true;
            st.subscribed.clear();
            st.generation
        };
        let (waiters, state) = (self.waiters.clone(), Arc::downgrade(&self.state));
        tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                // The backend is gone: nobody to wake.
                if state.strong_count() == 0 {
                    return;
                }
                waiters.wake_one(msg.get_channel_name());
            }
            // The connection is gone: messages may have been missed, so wake everyone.
            if let Some(state) = state.upgrade() {
                let mut st = lock(&state);
                if st.generation == generation {
                    st.connected = false;
                    waiters.wake_all();
                }
            }
        });
        Ok(sink)
    }
}
