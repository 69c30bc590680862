//! Wake-ups from etcd's watch: a release, an expired lease, the end of a cooldown or of a
//! writer's marker anywhere wakes this process's waiters of the key.
//!
//! One watch per key per backend, shared by every subscription of the key in the process
//! and ended with the last one: it watches the key's whole range, and each deletion of a
//! live hold (a release, a lease that ran out: waiters wake on expiry too, which no other
//! backend's server tells them), of the cooldown or of the writer's marker wakes the
//! longest-waiting local waiter, who tries at once. A release in this process wakes its
//! waiter directly as well (the decision's wake-up); waking twice only costs an attempt.
//!
//! The watch starts at the revision after its creation; the client layer subscribes
//! before it tries, so a release between its attempt and the watch is never missed. A
//! watch whose stream breaks (its member died) ends: the waiters' fallback poll covers
//! what it would have told them until the next subscription makes a new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use etcd_client::{EventType, WatchOptions};
use lock_core::backend::{ReleaseSubscription, Waiters};
use lock_core::{Key, Operation, Result};

use crate::error::Deadline;
use crate::layout::{Base, Slot};
use crate::EtcdBackend;

/// The running watches, by lock key.
#[derive(Default)]
pub(crate) struct Watches {
    running: Mutex<HashMap<String, Weak<KeyWatch>>>,
}

/// One key's watch task; dropped with the last subscription that holds it.
struct KeyWatch {
    task: tokio::task::AbortHandle,
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EtcdBackend {
    /// A subscription to `key`'s releases: this process's waiters' line, woken by the
    /// key's watch.
    pub(crate) async fn watched(&self, key: &Key) -> Result<ReleaseSubscription> {
        let subscription = self.waiters.subscribe(key.as_str());
        if let Some(watch) = self.live_watch(key) {
            return Ok(subscription.holding(Box::new(watch)));
        }
        let watch = self.start_watch(key).await?;
        Ok(subscription.holding(Box::new(watch)))
    }

    fn live_watch(&self, key: &Key) -> Option<Arc<KeyWatch>> {
        let running = self
            .watches
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        running.get(key.as_str()).and_then(Weak::upgrade)
    }

    async fn start_watch(&self, key: &Key) -> Result<Arc<KeyWatch>> {
        let op = Operation::Subscribe;
        let base = Base::new(&self.prefix, key.as_str());
        let deadline = Deadline::after(self.timeout);
        let mut stream = self
            .members
            .retried(op, "watch", deadline, |c| {
                let options = WatchOptions::new().with_range(base.end());
                let first = base.first();
                async move {
                    let mut stream = c.watch_client().watch(first, Some(options)).await?;
                    // The first message says the watch was created.
                    stream.message().await?;
                    Ok(stream)
                }
            })
            .await?;
        let waiters: Waiters = self.waiters.clone();
        let name = key.as_str().to_owned();
        let task = tokio::spawn(async move {
            while let Ok(Some(message)) = stream.message().await {
                for event in message.events() {
                    let frees = event.event_type() == EventType::Delete
                        && event
                            .kv()
                            .and_then(|kv| kv.key_str().ok())
                            .and_then(|k| base.slot(k))
                            .is_some_and(|slot| {
                                matches!(slot, Slot::Live(_) | Slot::Cooling | Slot::Writer)
                            });
                    if frees {
                        waiters.wake_one(&name);
                    }
                }
            }
        });
        let watch = Arc::new(KeyWatch {
            task: task.abort_handle(),
        });
        let mut running = self
            .watches
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        running.retain(|_, w| w.strong_count() > 0);
        // A watch another subscription started meanwhile serves as well; this one then
        // ends with its own subscriptions.
        running.insert(key.as_str().to_owned(), Arc::downgrade(&watch));
        Ok(watch)
    }
}
