//! Release notifications: one pub/sub connection per backend, shared by every waiter.
//!
//! Each release that frees a lock `PUBLISH`es on the lock's channel (`P{T}:released:K`).
//! A waiter subscribes before its obtain attempt; `subscribe` returns only once the server
//! confirmed the `SUBSCRIBE`, so a release published after that point reaches the waiter.
//! Waiters on one key share one server subscription (counted); the last one to leave marks
//! the channel for `UNSUBSCRIBE`, sent with the next subscription change.
//!
//! When the pub/sub connection drops, every waiter is woken (a release may have been missed,
//! so they try again at once) and the next `subscribe` opens a new connection and subscribes
//! the channels still wanted. Waiters also keep a fallback poll, so a lost message only
//! costs latency. A cooldown's end publishes nothing (Redis has no hook for an expiry short
//! of keyspace notifications); a waiter told `Busy` by a cooling lock sleeps until its end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use lock_core::{Operation, ReleaseSubscription, Result};
use redis::aio::PubSubSink;
use tokio::sync::watch;

use crate::error::map_error;

pub(crate) struct Notifier {
    client: redis::Client,
    backend: &'static str,
    /// The subscribing side of the connection, if one is open; held across the round trip
    /// of a (un)subscribe so those go out in order.
    sink: tokio::sync::Mutex<Option<PubSubSink>>,
    channels: Arc<Mutex<Channels>>,
}

#[derive(Default)]
struct Channels {
    wanted: HashMap<String, Wanted>,
    /// Channels nobody waits on any more, still subscribed on the server.
    stale: Vec<String>,
    /// Bumped on each new connection, so a reader of an old one cannot clear the new one.
    generation: u64,
    connected: bool,
}

struct Wanted {
    tx: watch::Sender<u64>,
    waiters: usize,
}

/// Drops a waiter's interest in a channel.
struct Registration {
    channel: String,
    channels: Arc<Mutex<Channels>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut ch = lock(&self.channels);
        if let Some(w) = ch.wanted.get_mut(&self.channel) {
            w.waiters -= 1;
            if w.waiters == 0 {
                ch.wanted.remove(&self.channel);
                ch.stale.push(std::mem::take(&mut self.channel));
            }
        }
    }
}

fn lock(m: &Mutex<Channels>) -> std::sync::MutexGuard<'_, Channels> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Notifier {
    pub(crate) fn new(client: redis::Client, backend: &'static str) -> Self {
        Notifier {
            client,
            backend,
            sink: tokio::sync::Mutex::new(None),
            channels: Arc::default(),
        }
    }

    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    pub(crate) async fn subscribe(&self, channel: &str) -> Result<ReleaseSubscription> {
        let op = Operation::Subscribe;
        let mut sink = self.sink.lock().await;
        let (rx, stale, fresh) = {
            let mut ch = lock(&self.channels);
            if !ch.connected {
                *sink = None;
            }
            let fresh = !ch.wanted.contains_key(channel) || sink.is_none();
            let w = ch
                .wanted
                .entry(channel.to_owned())
                .or_insert_with(|| Wanted {
                    tx: watch::channel(0).0,
                    waiters: 0,
                });
            w.waiters += 1;
            let rx = w.tx.subscribe();
            ch.stale.retain(|c| c != channel);
            (rx, std::mem::take(&mut ch.stale), fresh)
        };
        let registration = Registration {
            channel: channel.to_owned(),
            channels: self.channels.clone(),
        };
        if sink.is_none() {
            *sink = Some(self.connect().await?);
            // A new connection subscribes to everything still wanted, this channel included.
            let all: Vec<String> = lock(&self.channels).wanted.keys().cloned().collect();
            if let Some(s) = sink.as_mut() {
                if let Err(e) = s.subscribe(&all).await {
                    *sink = None;
                    return Err(map_error(self.backend, op, e));
                }
            }
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
                lock(&self.channels).connected = false;
                return Err(map_error(self.backend, op, e));
            }
        }
        Ok(ReleaseSubscription::new(rx, Some(Box::new(registration))))
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
            let mut ch = lock(&self.channels);
            ch.generation += 1;
            ch.connected = true;
            ch.stale.clear();
            ch.generation
        };
        let channels = Arc::downgrade(&self.channels);
        tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let Some(channels) = channels.upgrade() else {
                    return;
                };
                let ch = lock(&channels);
                if let Some(w) = ch.wanted.get(msg.get_channel_name()) {
                    w.tx.send_modify(|n| *n += 1);
                }
            }
            // The connection is gone: messages may have been missed, so wake everyone.
            if let Some(channels) = channels.upgrade() {
                let mut ch = lock(&channels);
                if ch.generation == generation {
                    ch.connected = false;
                    for w in ch.wanted.values() {
                        w.tx.send_modify(|n| *n += 1);
                    }
                }
            }
        });
        Ok(sink)
    }
}
