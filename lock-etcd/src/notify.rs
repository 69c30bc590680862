//! Wake-ups from etcd's watch: each decision anywhere that frees room wakes this process's
//! waiters of the key as the rules decided, and so does a hold's lease running out.
//!
//! One watch per key per backend, shared by every subscription of the key in the process
//! and ended with the last one. It watches the key's whole range and, for each revision it
//! sees:
//! - a put of `F` that names whom to wake (a release, a downgrade, an admission that lets
//!   the next reader in: see `layout.rs`) wakes the longest-waiting local waiter, or all of
//!   them, as the decision's [`Wake`](lock_core::backend::rules::Wake) says;
//! - a revision that only deletes a live hold, the cooldown or the writer's marker (a lease
//!   that ran out: nobody decided, and whoever can get in now is not known) wakes them all.
//!
//! A decision in this process wakes its waiters the same way, through the watch: waking
//! them directly as well would wake two for the one the rules let in (every waiter of a
//! process subscribes through [`EtcdBackend::watched`], so a process with waiters of a key
//! has its watch).
//!
//! The watch starts at the revision after its creation; the client layer subscribes
//! before it tries, so a release between its attempt and the watch is never missed. A
//! watch whose stream ends (its member restarted or lost its leader) wakes every local
//! waiter of the key (what it would have said may be lost) and is made again, on any
//! member, from the revision after the last one it saw (from the current one if that was
//! compacted), pausing 100 ms to 2 s between tries: subscriptions made before and after a
//! restart keep being woken.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{EventType, WatchOptions, WatchResponse, WatchStream};
use lock_core::backend::{ReleaseSubscription, Waiters};
use lock_core::{Key, Operation, Result};

use crate::error::{within, Deadline};
use crate::layout::{Base, FenceValue, Slot, Wakes};
use crate::members::Members;
use crate::EtcdBackend;

/// The running watches, by lock key.
#[derive(Default)]
pub(crate) struct Watches {
    running: Mutex<HashMap<String, Weak<KeyWatch>>>,
    /// A gate per key whose watch is being made: subscribers that come meanwhile wait
    /// for that watch rather than make their own.
    starting: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Watches {
    /// The gate of `key`'s watch being made, shared by everyone who asks while it lives.
    fn gate(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut starting = self.starting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gate) = starting.get(key).and_then(Weak::upgrade) {
            return gate;
        }
        starting.retain(|_, g| g.strong_count() > 0);
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        starting.insert(key.to_owned(), Arc::downgrade(&gate));
        gate
    }
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
    ///
    /// One watch per key: each watch wakes the process's waiters of the key, so two would
    /// wake two for a release that lets one in. Subscribers that come while the key's watch
    /// is being made wait for it (by the same deadline as making it).
    pub(crate) async fn watched(&self, key: &Key) -> Result<ReleaseSubscription> {
        let subscription = self.waiters.subscribe(key.as_str());
        if let Some(watch) = self.live_watch(key) {
            return Ok(subscription.holding(Box::new(watch)));
        }
        let deadline = Deadline::after(self.timeout);
        let gate = self.watches.gate(key.as_str());
        let waited = async { Ok(gate.lock().await) };
        let _making = within(Operation::Subscribe, "the key's watch", deadline, waited).await?;
        let watch = match self.live_watch(key) {
            Some(watch) => watch,
            None => self.start_watch(key, deadline).await?,
        };
        Ok(subscription.holding(Box::new(watch)))
    }

    /// The key's watch, if one runs: a task that ended (it cannot, but for a panic) is
    /// never handed to a new subscription.
    fn live_watch(&self, key: &Key) -> Option<Arc<KeyWatch>> {
        let running = self
            .watches
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        running
            .get(key.as_str())
            .and_then(Weak::upgrade)
            .filter(|w| !w.task.is_finished())
    }

    async fn start_watch(&self, key: &Key, deadline: Deadline) -> Result<Arc<KeyWatch>> {
        let base = Base::new(&self.prefix, key.as_str());
        let (stream, created) = open(&self.members, &base, None, deadline).await?;
        let watching = Watching {
            members: Arc::clone(&self.members),
            waiters: self.waiters.clone(),
            name: key.as_str().to_owned(),
            base,
            timeout: self.timeout,
        };
        let task = tokio::spawn(watching.run(stream, created + 1));
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

/// A watch of the lock's range from `start` (the current revision when `None`), made on
/// the first member that answers by `deadline`; with the revision it was made at.
async fn open(
    members: &Members,
    base: &Base,
    start: Option<i64>,
    deadline: Deadline,
) -> Result<(WatchStream, i64)> {
    members
        .retried(Operation::Subscribe, "watch", deadline, |c| {
            let mut options = WatchOptions::new().with_range(base.end());
            if let Some(start) = start {
                options = options.with_start_revision(start);
            }
            let first = base.first();
            async move {
                let mut stream = c.watch_client().watch(first, Some(options)).await?;
                // The first message says the watch was created (or, from a compacted
                // revision, that it was cancelled at once).
                let created = stream.message().await?;
                let revision = created
                    .as_ref()
                    .and_then(WatchResponse::header)
                    .map_or(0, |h| h.revision());
                if created.is_none_or(|m| m.canceled()) {
                    return Err(etcd_client::Error::WatchError(
                        "the watch was cancelled as it was made (its start revision was compacted)"
                            .to_owned(),
                    ));
                }
                Ok((stream, revision))
            }
        })
        .await
}

/// What a key's watch task needs.
struct Watching {
    members: Arc<Members>,
    waiters: Waiters,
    name: String,
    base: Base,
    timeout: Duration,
}

impl Watching {
    /// Wakes the key's waiters as each revision says, for ever: a stream that ends is made
    /// again from `next`, the revision after the last one seen.
    async fn run(self, mut stream: WatchStream, mut next: i64) {
        const FIRST_PAUSE: Duration = Duration::from_millis(100);
        loop {
            while let Ok(Some(message)) = stream.message().await {
                if message.canceled() {
                    break;
                }
                next = next.max(self.wake(&message));
            }
            // Whatever the ended stream would still have said may be lost.
            self.waiters.wake_key(&self.name);
            tracing::debug!(key = %self.name, "the etcd watch ended: making it again");
            let mut pause = FIRST_PAUSE;
            let mut from = Some(next);
            stream = loop {
                tokio::time::sleep(pause).await;
                match open(
                    &self.members,
                    &self.base,
                    from,
                    Deadline::after(self.timeout),
                )
                .await
                {
                    Ok((stream, _)) => break stream,
                    Err(e) => {
                        // From a compacted revision, never again: from now on (the waiters
                        // were all woken above).
                        if e.to_string().contains("compacted") {
                            from = None;
                        }
                        tracing::debug!(key = %self.name, "the etcd watch could not be made again yet: {e}");
                        pause = (pause * 2).min(Duration::from_secs(2));
                    }
                }
            };
        }
    }

    /// Wakes whom each revision of `message` frees room for; the revision after its last.
    fn wake(&self, message: &WatchResponse) -> i64 {
        let mut revisions: Vec<Revision> = Vec::new();
        let mut last = 0;
        for event in message.events() {
            let Some(kv) = event.kv() else { continue };
            let at = kv.mod_revision();
            last = last.max(at);
            let Some(slot) = kv.key_str().ok().and_then(|k| self.base.slot(k)) else {
                continue;
            };
            let i = match revisions.iter().position(|r| r.at == at) {
                Some(i) => i,
                None => {
                    revisions.push(Revision {
                        at,
                        ..Revision::default()
                    });
                    revisions.len() - 1
                }
            };
            let revision = &mut revisions[i];
            match event.event_type() {
                EventType::Put => {
                    revision.wrote = true;
                    if slot == Slot::Fence {
                        revision.announced = serde_json::from_slice::<FenceValue>(kv.value())
                            .ok()
                            .and_then(|f| f.wake);
                    }
                }
                EventType::Delete => {
                    revision.freed |= matches!(slot, Slot::Live(_) | Slot::Cooling | Slot::Writer);
                }
            }
        }
        for revision in revisions {
            match (revision.announced, revision.freed, revision.wrote) {
                (Some(Wakes::One), ..) => self.waiters.wake_one(&self.name),
                // A lease that ran out: nobody decided whom it lets in.
                (Some(Wakes::All), ..) | (None, true, false) => self.waiters.wake_key(&self.name),
                _ => {}
            }
        }
        last + 1
    }
}

/// What one revision of a lock's range did, as its watch saw it.
#[derive(Default)]
struct Revision {
    at: i64,
    /// Whom the put of `F` at this revision said to wake.
    announced: Option<Wakes>,
    /// A live hold, the cooldown or the writer's marker went.
    freed: bool,
    /// Something was written (a decision's transaction, not a lease's end).
    wrote: bool,
}
