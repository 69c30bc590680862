//! Leader election over any backend: [`Locker::elect`] campaigns, a [`Leadership`] is the
//! lock held with the watchdog, and [`Locker::observe`] follows who leads.
//!
//! # What a leader is
//! The leader of a key is the holder of its lock: at most one at any instant, as far as the
//! backend's clock can tell, because that is the lock's exclusion. A leadership's **term**
//! is the lock's fencing token: a successor's term is always higher, so a resource that
//! checks terms (see the fencing docs) refuses a deposed leader's late writes. The leader's
//! identity is its [`HolderInfo`] (host, process, and the metadata given to
//! [`Campaign::identity`]), which [`Locker::observe`] shows to every process.
//!
//! # When leadership ends
//! A leadership is kept by the watchdog and ends when the leader resigns
//! ([`Leadership::resign`]), when its process dies (its lock expires after the ttl: there
//! may be no leader for up to a ttl, never two), or when it is lost ([`Leadership::lost`]:
//! a renewal answered `Lost`, or the validity ran out before one could renew it, as in a
//! partition). A leader that lost its leadership does **not** campaign again by itself:
//! what it was doing may need undoing first, so the caller decides, typically with a loop
//! around [`Campaign::lead`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Attempt, LockBuilder, Locker};
use crate::backend::ReleaseSubscription;
use crate::{
    Fencing, HolderInfo, Key, LockBackend, LockGuard, LockState, ReleaseOutcome, Result, Retry,
};

/// A campaign for the leadership of one key: from [`Locker::elect`].
#[must_use = "a campaign does nothing until lead() is awaited"]
pub struct Campaign<'a> {
    lock: LockBuilder<'a>,
}

impl<'a> Campaign<'a> {
    pub(super) fn new(locker: &'a Locker, key: &str) -> Self {
        Campaign {
            lock: locker.lock(key).wait(Duration::MAX),
        }
    }

    /// The leadership's lease: how long a leader that stops renewing (its process died, or
    /// it is cut off) stays leader at most. The watchdog renews it every third of it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.lock = self.lock.ttl(ttl);
        self
    }

    /// How long [`Campaign::lead`] waits to be elected; by default, until elected.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.lock = self.lock.wait(wait);
        self
    }

    /// The retry strategy while another leads.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.lock = self.lock.retry(retry);
        self
    }

    /// What identifies this candidate to observers (for example its address): the
    /// metadata of its [`HolderInfo`].
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.lock = self.lock.metadata(identity);
        self
    }

    /// Waits until this candidate leads, or the wait runs out ([`Attempt::Busy`], with the
    /// current leader).
    ///
    /// # Errors
    /// As for [`LockBuilder::obtain`].
    ///
    /// # Cancel safety
    /// Cancel safe: a candidate cancelled while it campaigns leaves nothing behind (a grant
    /// that arrives after the drop is given back).
    pub async fn lead(self) -> Result<Attempt<Leadership>> {
        Ok(match self.lock.watchdog().obtain().await? {
            Attempt::Obtained(guard) => Attempt::Obtained(Leadership { guard }),
            Attempt::Busy(busy) => Attempt::Busy(busy),
        })
    }
}

/// The leadership of a key, held: the lock with its watchdog.
///
/// Dropping it resigns in the background (the guard's release); prefer
/// [`Leadership::resign`], which says when it is done.
#[must_use = "dropping a Leadership resigns in the background; call resign()"]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The term: the lock's fencing token. A successor's term is higher.
    pub fn term(&self) -> Fencing {
        self.guard.fencing()
    }

    /// The key led.
    pub fn key(&self) -> &Key {
        self.guard.key()
    }

    /// How long this leadership is sure to last without another renewal: the lock's
    /// validity, counted from when its last successful call was sent (see
    /// [`LockGuard::remaining`]). A leadership can be lost before it runs out (a renewal
    /// answered `Lost`): check [`Leadership::is_lost`] too.
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// Whether the leadership is lost: stop acting as leader.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when the leadership is lost (see [`LockGuard::lost`]).
    ///
    /// # Cancel safety
    /// Cancel safe: the future only waits.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// The lost signal as a token, to hand to the tasks that act as leader.
    pub fn lost_token(&self) -> CancellationToken {
        self.guard.lost_token()
    }

    /// Runs `work` with the term while this leadership lasts: its output, or `None` when
    /// the leadership was lost first (then `work`'s future is dropped at once, at its next
    /// await point). `work` never starts on a leadership already lost.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let locker = Locker::new(Arc::new(MemoryBackend::new()));
    /// let leader = locker.elect("scheduler").lead().await?.obtained().expect("elected");
    /// let done = leader
    ///     .while_leading(|term| async move { format!("ran the schedule in term {term}") })
    ///     .await;
    /// assert!(done.is_some());
    /// leader.resign().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future drops `work`'s; the leadership stays.
    pub async fn while_leading<F, Fut, T>(&self, work: F) -> Option<T>
    where
        F: FnOnce(Fencing) -> Fut,
        Fut: Future<Output = T>,
    {
        if self.is_lost() {
            return None;
        }
        let lost = self.guard.lost();
        let work = work(self.term());
        tokio::select! {
            biased;
            () = lost => None,
            value = work => Some(value),
        }
    }

    /// Steps down: releases the lock, so that another candidate is elected at once.
    ///
    /// # Errors
    /// The release's error; the leadership then ends when its lease does.
    ///
    /// # Cancel safety
    /// As for [`LockGuard::release`].
    pub async fn resign(self) -> Result<ReleaseOutcome> {
        self.guard.release().await
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("key", self.key())
            .field("term", &self.term())
            .finish_non_exhaustive()
    }
}

/// Who leads a key, as [`Observation::changed`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's identity: its host, process and [`Campaign::identity`].
    pub holder: HolderInfo,
    /// Its term (the lock's fencing token).
    pub term: Fencing,
}

/// Follows who leads a key: from [`Locker::observe`]. Any process can observe, candidate
/// or not; it only reads.
pub struct Observation {
    backend: Arc<dyn LockBackend>,
    key: Key,
    every: Duration,
    subscription: Option<ReleaseSubscription>,
    subscribed: bool,
    last: Option<Option<Leader>>,
}

impl Observation {
    /// How often the key is read again when nothing else says it changed (default
    /// [`Observation::DEFAULT_EVERY`]): a new leader after a time without one is seen
    /// within this, a release on a backend with release notifications at once, and a
    /// leader whose lease ran out when its remaining time ends.
    pub const DEFAULT_EVERY: Duration = Duration::from_secs(1);

    pub(super) fn new(backend: Arc<dyn LockBackend>, key: Key) -> Self {
        Observation {
            backend,
            key,
            every: Self::DEFAULT_EVERY,
            subscription: None,
            subscribed: false,
            last: None,
        }
    }

    /// Reads the key again at least this often (see [`Observation::DEFAULT_EVERY`]).
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(1));
        self
    }

    /// The current leader on the first call (`None`: nobody leads), then waits for the
    /// next change and returns it: another leader, a new term of the same process, or no
    /// leader. A change that comes and goes between two reads may be missed; the terms
    /// seen only grow.
    ///
    /// # Errors
    /// The backend's error on a read; the next call reads again. A failed subscription to
    /// releases is no error: the observer polls (every [`Observation::every`]) and
    /// subscribes again at its next pass.
    ///
    /// # Cancel safety
    /// Cancel safe: a change that happens while nobody waits is returned by the next call.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        loop {
            self.subscribe().await;
            let (now, remaining) = self.read().await?;
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now.clone());
                return Ok(now);
            }
            let pause = remaining
                .map_or(self.every, |r| r.min(self.every))
                .max(Duration::from_millis(1));
            match &mut self.subscription {
                Some(sub) => {
                    sub.released_within(pause).await;
                }
                None => tokio::time::sleep(pause).await,
            }
        }
    }

    /// Subscribes to the key's releases as a watcher, if not yet: an observer woken in
    /// place of a waiting candidate would leave that candidate to its poll. A backend without
    /// notifications is asked once; one whose subscribe failed (or was cancelled) is asked
    /// again at the next pass, and the observer polls meanwhile.
    async fn subscribe(&mut self) {
        if self.subscribed {
            return;
        }
        match self.backend.subscribe(&self.key).await {
            Ok(subscription) => {
                self.subscription = subscription.map(|mut s| {
                    s.watch_only();
                    s
                });
                self.subscribed = true;
            }
            Err(e) => tracing::debug!(key = %self.key, "observing by polling for now: {e}"),
        }
    }

    /// The leader now, and how long its lease has left.
    async fn read(&self) -> Result<(Option<Leader>, Option<Duration>)> {
        Ok(match self.backend.inspect(&self.key).await? {
            LockState::Held {
                holder,
                fencing,
                remaining,
                ..
            } => (
                Some(Leader {
                    holder,
                    term: fencing,
                }),
                Some(remaining),
            ),
            _ => (None, None),
        })
    }
}

impl fmt::Debug for Observation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observation")
            .field("key", &self.key)
            .field("every", &self.every)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}
