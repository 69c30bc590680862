//! The suite must catch what a backend promises beside its answers: each wrapper below
//! breaks one such promise (whom a release wakes, how many holders a key takes), and the
//! named case must fail on it.

#[macro_use]
mod broken_support;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use lock_conformance::{async_trait, cases, Harness};
use lock_core::backend::layer::{Layer, Layered};
use lock_core::backend::Waiters;
use lock_core::backend::{ObtainRequest, ProlongRequest, ReleaseRequest, ReleaseSubscription};
use lock_core::{
    Error, ErrorKind, Key, LockBackend, LockState, MemoryBackend, ObtainOutcome, Operation,
    ProlongOutcome, ReleaseOutcome, Result,
};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy)]
enum Bug {
    /// The 65th shared hold of a key is refused (etcd's 128 operations per transaction).
    HoldsCapped,
    /// Subscriptions are given, and never fire.
    SubscriptionsNeverFire,
    /// Only the first subscriber of a key is ever woken: a release that should wake all
    /// wakes one.
    WakesOnlyTheFirstSubscriber,
    /// Subscribers of a key stand in one line of the backend's own, each release waking
    /// the first: an observer that subscribed first takes a waiting candidate's turn.
    OwnLine,
    /// Every call on a key wakes its subscribers, a prolong and a busy obtain included.
    WakesOnEveryCall,
    /// A release wakes the key's subscribers; a forced release wakes nobody.
    ForceWakesNobody,
    /// A release wakes one subscriber, and one more (its own notification, coming back).
    WakesTwice,
}

#[derive(Debug)]
struct Broken {
    inner: MemoryBackend,
    bug: Bug,
    /// Subscriptions per key so far.
    subscribed: Mutex<HashMap<Key, usize>>,
    /// Senders of subscriptions that never fire, kept open.
    silent: Mutex<Vec<watch::Sender<u64>>>,
    /// `OwnLine`'s line per key.
    line: Arc<Mutex<HashMap<Key, VecDeque<watch::Sender<u64>>>>>,
    /// `WakesOnEveryCall`'s waiters.
    everyone: Waiters,
}

impl Broken {
    fn silent(&self) -> ReleaseSubscription {
        let (tx, rx) = watch::channel(0);
        self.silent.lock().unwrap().push(tx);
        ReleaseSubscription::new(rx, None)
    }

    fn touched(&self, key: &Key) {
        if let Bug::ForceWakesNobody = self.bug {
            // Only a release that frees the key wakes (below).
            return;
        }
        if let Bug::WakesOnEveryCall = self.bug {
            self.everyone.wake_key(key.as_str());
        }
    }

    fn released(&self, key: &Key) {
        if let Bug::OwnLine = self.bug {
            if let Some(line) = self.line.lock().unwrap().get_mut(key) {
                line.retain(|tx| !tx.is_closed());
                if let Some(first) = line.pop_front() {
                    first.send_modify(|n| *n += 1);
                    line.push_back(first);
                }
            }
        }
    }
}

#[async_trait]
impl Layer for Broken {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn name(&self) -> &'static str {
        "broken"
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        if let (Bug::HoldsCapped, true) = (self.bug, req.mode.is_shared()) {
            if let LockState::Shared { holds, .. } = self.inner.inspect(req.key).await? {
                if holds.len() >= 64 {
                    return Err(Error::new(
                        ErrorKind::Protocol,
                        "broken",
                        Operation::Obtain,
                        "too many operations in txn request",
                    ));
                }
            }
        }
        let key = req.key.clone();
        let outcome = self.inner.obtain(req).await;
        self.touched(&key);
        outcome
    }

    async fn prolongate(&self, req: ProlongRequest<'_>) -> Result<ProlongOutcome> {
        let key = req.key.clone();
        let outcome = self.inner.prolongate(req).await;
        self.touched(&key);
        outcome
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        let key = req.key.clone();
        let outcome = self.inner.release(req).await;
        self.touched(&key);
        if let Ok(ReleaseOutcome::Released | ReleaseOutcome::ReleasedLate) = outcome {
            self.released(&key);
            match self.bug {
                Bug::ForceWakesNobody => self.everyone.wake_key(key.as_str()),
                Bug::WakesTwice => {
                    self.everyone.wake_one(key.as_str());
                    self.everyone.wake_one(key.as_str());
                }
                _ => {}
            }
        }
        outcome
    }

    async fn inspect(&self, key: &Key) -> Result<LockState> {
        let state = self.inner.inspect(key).await;
        self.touched(key);
        state
    }

    async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        let n = {
            let mut subscribed = self.subscribed.lock().unwrap();
            let n = subscribed.entry(key.clone()).or_default();
            *n += 1;
            *n
        };
        Ok(Some(match self.bug {
            Bug::SubscriptionsNeverFire => self.silent(),
            // The first is the probe of the case; the next is the first waiter's.
            Bug::WakesOnlyTheFirstSubscriber if n > 2 => self.silent(),
            Bug::OwnLine => {
                let (tx, rx) = watch::channel(0);
                self.line
                    .lock()
                    .unwrap()
                    .entry(key.clone())
                    .or_default()
                    .push_back(tx);
                ReleaseSubscription::new(rx, None)
            }
            Bug::WakesOnEveryCall | Bug::ForceWakesNobody | Bug::WakesTwice => {
                self.everyone.subscribe(key.as_str())
            }
            _ => match self.inner.subscribe(key).await? {
                Some(sub) => sub,
                None => return Ok(None),
            },
        }))
    }
}

struct BrokenHarness(Bug);

#[async_trait]
impl Harness for BrokenHarness {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(Layered(Broken {
            inner: MemoryBackend::new(),
            bug: self.0,
            subscribed: Mutex::default(),
            silent: Mutex::default(),
            line: Arc::default(),
            everyone: Waiters::default(),
        }))
    }
}

catches_where_memory_passes!(
    a_key_that_refuses_its_65th_reader_is_caught,
    HoldsCapped,
    a_key_takes_a_thousand_readers
);
catches_where_memory_passes!(
    subscriptions_that_never_fire_are_caught,
    SubscriptionsNeverFire,
    a_release_wakes_a_waiter_at_once
);
catches_where_memory_passes!(
    a_release_that_wakes_one_where_the_rules_say_all_is_caught,
    WakesOnlyTheFirstSubscriber,
    the_last_share_beside_a_writer_wakes_every_waiter
);
catches_where_memory_passes!(
    a_downgrade_that_wakes_one_is_caught,
    WakesOnlyTheFirstSubscriber,
    a_downgrade_wakes_every_waiter
);
catches_where_memory_passes!(
    an_observer_that_takes_a_candidate_s_turn_is_caught,
    OwnLine,
    a_resignation_wakes_the_candidate_not_the_observer
);
catches_where_memory_passes!(
    wake_ups_that_free_nothing_are_caught,
    WakesOnEveryCall,
    what_frees_nothing_wakes_nobody
);
catches_where_memory_passes!(
    a_forced_release_that_wakes_nobody_is_caught,
    ForceWakesNobody,
    a_forced_release_wakes_every_waiter
);
catches_where_memory_passes!(
    a_release_that_wakes_two_is_caught,
    WakesTwice,
    a_release_wakes_one_waiter_not_two
);
