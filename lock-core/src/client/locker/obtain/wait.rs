//! An obtain that waits: attempts until the lock is obtained, the wait runs out, the retry
//! strategy gives up or (with `dont_queue`) the holder will clearly outlast the wait; a
//! release notification where the backend has one; a record of the wait for listings.

use std::time::Duration;

use tokio::time::Instant;

use super::{record_end, Marker, Plan};
use crate::client::clock;
use crate::client::waiting::Announced;
use crate::observe::{ObtainEnd, ObtainWatch};
use crate::{Attempt, Busy, Error, LockGuard, Result};

impl Plan<'_> {
    /// Attempts until done; an exclusive wait that ends without the lock takes its writer's
    /// marker away (a release by its token), so readers need not wait for the marker's end.
    ///
    /// # Cancel safety
    /// Dropped mid-wait, it sends that release from a task of its own (when a runtime is
    /// there), after the attempt still in flight, if any, landed (a marker it leaves is
    /// taken away too). [`crate::settle`] waits for that task.
    pub(super) async fn wait_loop(&self) -> Result<Attempt<LockGuard>> {
        let queue = !self.mode.is_shared()
            && !self.wait.is_zero()
            && self.locker.backend.capabilities().shared;
        let started = clock::now();
        let mut marker = self.marker(queue);
        let mut watch = self.watch();
        let mut timed_out = false;
        let result = self
            .wait_attempts(queue, &mut marker, &mut watch, &mut timed_out)
            .await;
        match result {
            Ok(Attempt::Obtained(_)) => marker.disarm(),
            _ => marker.take_away().await,
        }
        let end = ObtainEnd::of(&result, timed_out);
        record_end(started, end);
        watch.end(end);
        result
    }

    /// `watch` counts the attempts; `timed_out` is set when the wait ran out on a busy
    /// lock.
    async fn wait_attempts(
        &self,
        queue: bool,
        marker: &mut Marker<'_>,
        watch: &mut ObtainWatch<'_>,
        timed_out: &mut bool,
    ) -> Result<Attempt<LockGuard>> {
        let deadline = deadline_after(self.wait);
        let backend = &self.locker.backend;
        // Subscribed only once the lock turned out busy: an obtain of a free lock costs one
        // attempt, nothing more.
        let mut subscription = None;
        let mut may_subscribe = self.retry.is_notified() && !self.wait.is_zero();
        let mut retries = 0;
        // This wait's record for listings, from its first pause on; given back when the
        // wait ends, however it ends (see `waiting`).
        let mut announced: Option<Announced> = None;
        loop {
            let answer = marker.around(self.attempt(queue)).await;
            watch.attempts += 1;
            let busy = match answer {
                Ok(Attempt::Busy(busy)) => Ok(busy),
                Err(e) if e.is_retry_safe() => Err(e),
                done => return done,
            };
            let left = deadline.saturating_duration_since(clock::now());
            let give_up = |last: std::result::Result<Busy, Error>| match last {
                Ok(busy) => Ok(Attempt::Busy(busy)),
                Err(e) => Err(e),
            };
            if left.is_zero() {
                *timed_out = !self.wait.is_zero();
                return give_up(busy);
            }
            if let Ok(b) = &busy {
                if self.dont_queue && b.remaining > left {
                    return give_up(busy);
                }
            }
            announced.get_or_insert_with(|| Announced::start(backend, &self.key, &self.holder));
            if std::mem::take(&mut may_subscribe) {
                subscription = backend.subscribe(&self.key).await.unwrap_or_else(|e| {
                    tracing::debug!("no release notification, polling: {e}");
                    self.locker.telemetry.call_failed(&self.key, &e);
                    None
                });
                if subscription.is_some() {
                    // Once more at once: a release published between the attempt above and
                    // the subscription reached nobody.
                    continue;
                }
            }
            let Some(mut delay) = self.retry.delay(retries) else {
                return give_up(busy);
            };
            retries += 1;
            match &busy {
                // No point sleeping past the moment the holder's ttl or the cooldown ends.
                Ok(b) => delay = delay.min(b.remaining + Duration::from_millis(1)),
                Err(e) => tracing::warn!("obtain failed, retrying within the wait: {e}"),
            }
            let delay = delay.min(left);
            match subscription.as_mut() {
                Some(sub) => {
                    sub.released_within(delay).await;
                }
                None => tokio::time::sleep(delay).await,
            }
        }
    }
}

/// `wait` from now, or as good as never for a wait too long to add to an instant
/// (`Duration::MAX` means "wait until obtained").
fn deadline_after(wait: Duration) -> Instant {
    // Thirty years: what tokio itself treats as "never".
    const NEVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    let now = clock::now();
    now.checked_add(wait.min(NEVER))
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}
