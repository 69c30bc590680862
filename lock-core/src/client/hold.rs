//! One acquisition of a lock, as the client sees it: the state a guard shares with the
//! guards that reentered it.
//!
//! The backend keeps one record per token: one expiry and a count of holds. So do we. A
//! guard and every guard obtained from it by `reenter()` share one [`Hold`]: one validity
//! (what a prolong by any of them, or by the watchdog, renews), one lost signal, one
//! watchdog. The hold ends when its last guard is given back, or when a reentrant obtain
//! found it expired and obtained the key afresh (then every guard of the old hold is
//! detached: lost, and its release must not reach the backend, where it would free the
//! fresh acquisition made with the same token).
//!
//! # The validity follows the shortest lease the backend may hold
//! The validity must never be later than the expiry the backend applied last. Two prolongs
//! of one hold may be in flight at once (the watchdog's and one by hand, over two pooled
//! connections) and the backend may apply them in either order, so an answer sets the
//! validity to the earliest bound (sent-at + ttl) among the prolongs it overlapped, its own
//! included. A prolong that failed or was cancelled may have been applied: the validity
//! becomes no later than its bound. A shorter ttl therefore shortens the validity at once.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod lost;
mod validity;

use crate::client::clock;
use crate::client::detached::{release_holds, GiveBack, Obtain};
use crate::client::turn::{Calls, Turn};
use crate::observe::{Event, HoldEnd, LostCause, Telemetry};
use crate::{Fencing, HolderInfo, Key, LockBackend, Mode, ReleaseOutcome, Result, Token, Ttl};
use lost::{expiry_timer, LostSignal, TimerMark};
use validity::InFlight;
pub(crate) use validity::Ticket;

/// The state one acquisition's guards share.
pub(crate) struct Hold {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) key: Key,
    pub(crate) token: Token,
    pub(crate) holder: Arc<HolderInfo>,
    /// The watchdog's period as a fraction of the ttl, when the watchdog renews this hold.
    pub(crate) watchdog: Option<f64>,
    state: Mutex<State>,
    /// Wakes the expiry timer when the validity moves earlier or the hold ends.
    changed: Notify,
    /// Where the hold waits in the watchdog's queue; only touched under the queue's lock.
    pub(crate) renew_slot: Mutex<Option<(Instant, u64)>>,
    /// Its locker's counters and observer.
    pub(crate) telemetry: Telemetry,
    /// When the grant arrived, if an observer wants to know how long it was held.
    granted_at: Option<Instant>,
    /// The token's calls that change what the backend holds, one at a time.
    pub(crate) calls: Calls,
    /// `lock.hold`, open while the hold lives: a trace shows what ran under the lock.
    span: tracing::Span,
    /// When the hold started, for the span's `held_ms`.
    started: Instant,
}

struct State {
    /// The fencing token of the hold: its grant's, or the last mode change's.
    fencing: Fencing,
    /// How the hold shares its key.
    mode: Mode,
    /// A mode change was sent and its answer not (yet) read: the backend may hold the
    /// token in either mode, so no other mode change may start.
    unsettled: bool,
    /// On the client's clock (`crate::client::clock`): the earliest moment the backend may let the
    /// lock go.
    until: Instant,
    /// The ttl of the last prolong that succeeded (the one the watchdog renews with).
    ttl: Ttl,
    lost: LostSignal,
    /// Guards not yet given back.
    guards: usize,
    /// Every guard was given back, or a fresh acquisition replaced this hold.
    over: bool,
    /// A fresh acquisition with this token replaced this hold.
    detached: bool,
    prolongs: Vec<InFlight>,
    tickets: u64,
    /// An expiry timer task runs for this hold.
    timer: bool,
    /// Its end was reported ([`Event::HoldEnded`]).
    ended: bool,
    /// Its last guard was dropped without a release.
    dropped: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a hold is made from: the granted obtain.
pub(crate) struct Grant {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) key: Key,
    pub(crate) token: Token,
    pub(crate) fencing: Fencing,
    pub(crate) holder: Arc<HolderInfo>,
    pub(crate) mode: Mode,
    /// When the obtain that granted it was sent.
    pub(crate) sent_at: Instant,
    pub(crate) ttl: Ttl,
    /// A bound the validity must not pass (a prolong with the same token still in flight).
    pub(crate) cap: Option<Instant>,
    /// The locker's counters and observer.
    pub(crate) telemetry: Telemetry,
    /// The token's calls: fresh for a fresh token, the replaced hold's for a fresh
    /// acquisition by a reentrant obtain (the same token).
    pub(crate) calls: Calls,
    /// The span the obtain was called in: the hold's span is its child (beside the
    /// obtain's, which ends with the grant).
    pub(crate) parent: tracing::Span,
}

impl Hold {
    /// A hold with one guard; reported as started.
    pub(crate) fn new(grant: Grant, watchdog: Option<f64>) -> Arc<Hold> {
        grant.telemetry.emit(Event::HoldStarted {
            backend: grant.backend.name(),
            key: &grant.key,
            mode: grant.mode,
        });
        let span = tracing::debug_span!(
            parent: &grant.parent,
            "lock.hold",
            backend = grant.backend.name(),
            key = %grant.key,
            mode = %grant.mode,
            fencing = grant.fencing.0,
            held_ms = tracing::field::Empty,
            end = tracing::field::Empty,
        );
        Arc::new(Hold {
            span,
            started: clock::now(),
            backend: grant.backend,
            key: grant.key,
            token: grant.token,
            holder: grant.holder,
            watchdog,
            state: Mutex::new(State {
                fencing: grant.fencing,
                mode: grant.mode,
                unsettled: false,
                until: grant
                    .cap
                    .map_or(grant.sent_at + grant.ttl.as_duration(), |cap| {
                        cap.min(grant.sent_at + grant.ttl.as_duration())
                    }),
                ttl: grant.ttl,
                lost: LostSignal::default(),
                guards: 1,
                over: false,
                detached: false,
                prolongs: Vec::new(),
                tickets: 0,
                timer: false,
                ended: false,
                dropped: false,
            }),
            changed: Notify::new(),
            renew_slot: Mutex::new(None),
            granted_at: grant.telemetry.stopwatch(),
            telemetry: grant.telemetry,
            calls: grant.calls,
        })
    }

    /// Reports the hold's end, once: as lost if it was, else as `how`.
    pub(crate) fn end(&self, how: HoldEnd) {
        let (mode, how) = {
            let mut state = lock(&self.state);
            if std::mem::replace(&mut state.ended, true) {
                return;
            }
            let how = if state.lost.claimed {
                HoldEnd::Lost
            } else if state.dropped {
                HoldEnd::Dropped
            } else {
                how
            };
            (state.mode, how)
        };
        let held = clock::now().saturating_duration_since(self.started);
        self.span.record(
            "held_ms",
            u64::try_from(held.as_millis()).unwrap_or(u64::MAX),
        );
        self.span.record("end", how.as_str());
        self.telemetry.emit(Event::HoldEnded {
            backend: self.backend.name(),
            key: &self.key,
            mode,
            held: self.granted_at.map_or(Duration::ZERO, |t| t.elapsed()),
            end: how,
        });
    }

    /// Its last guard was dropped without a release: its end counts as dropped, whatever
    /// the release in the background then answers.
    pub(crate) fn mark_dropped(&self) {
        lock(&self.state).dropped = true;
    }

    /// Counts one more guard (a reentrant one); false when the hold is over.
    pub(crate) fn add_guard(&self) -> bool {
        let mut state = lock(&self.state);
        if state.over {
            return false;
        }
        state.guards += 1;
        true
    }

    /// Counts one guard out; true when it was the last, and the hold is over.
    pub(crate) fn remove_guard(&self) -> bool {
        let last = {
            let mut state = lock(&self.state);
            state.guards = state.guards.saturating_sub(1);
            let last = state.guards == 0 && !state.over;
            if last {
                state.over = true;
            }
            last
        };
        if last {
            self.changed.notify_waiters();
        }
        last
    }

    /// Whether nothing more is to be done for it: every guard given back, or detached.
    pub(crate) fn is_over(&self) -> bool {
        lock(&self.state).over
    }

    /// Whether a fresh acquisition with the same token replaced it.
    pub(crate) fn is_detached(&self) -> bool {
        lock(&self.state).detached
    }

    /// Ends the hold for every guard of it: a fresh acquisition with the same token now
    /// holds the key, so none of them may release or prolong it any more. Returns the
    /// earliest bound of its prolongs still in flight: sent with the same token, any of them
    /// may yet land on the fresh acquisition, whose validity must not outlast it.
    pub(crate) fn detach(&self, why: &str) -> Option<Instant> {
        let in_flight = {
            let mut state = lock(&self.state);
            state.detached = true;
            state.over = true;
            state.prolongs.iter().map(|p| p.bound).min()
        };
        self.mark_lost(LostCause::Expired, why);
        self.end(HoldEnd::Lost);
        self.changed.notify_waiters();
        in_flight
    }

    /// An obtain with this hold's token and holder (a reentrant obtain, a mode change),
    /// sent in the token's `turn`.
    pub(crate) fn obtain_again(&self, ttl: Ttl, mode: Mode, turn: Turn) -> Obtain {
        Obtain {
            backend: Arc::clone(&self.backend),
            key: self.key.clone(),
            token: self.token,
            ttl,
            holder: Arc::clone(&self.holder),
            mode,
            queue: false,
            change: None,
            turn: Some(turn),
        }
    }

    /// The hold's fencing token.
    pub(crate) fn fencing(&self) -> Fencing {
        lock(&self.state).fencing
    }

    /// How the hold shares its key.
    pub(crate) fn mode(&self) -> Mode {
        lock(&self.state).mode
    }

    /// Starts a change of the hold's mode to `to`, or says why it cannot start: another
    /// guard shares the hold (reentrant holds), the hold is over or lost, it is in `to`
    /// already, or an earlier change's answer never came. A change to a shared mode counts
    /// from now on, before the backend answers: it may apply it at any moment, and a guard
    /// must never claim more than the backend grants. Until [`Hold::settle`], no other
    /// change starts.
    pub(crate) fn begin_mode_change(&self, to: Mode) -> std::result::Result<(), &'static str> {
        let mut state = lock(&self.state);
        let why = if state.over || state.detached {
            "this guard's hold has ended"
        } else if state.lost.claimed || state.until <= clock::now() {
            "this guard's lock is lost; obtain it anew"
        } else if state.guards > 1 {
            "this guard has reentrant guards; release them before changing its mode"
        } else if state.unsettled {
            "an earlier mode change of this guard never got its answer, so the backend may \
             hold it in either mode; release it and obtain it anew"
        } else if state.mode.is_shared() == to.is_shared() {
            "this guard already holds its key in that mode"
        } else {
            state.unsettled = true;
            if to.is_shared() {
                state.mode = to;
            }
            return Ok(());
        };
        Err(why)
    }

    /// Whether a mode change was sent and its answer never read: the backend may hold the
    /// token in either mode.
    pub(crate) fn is_unsettled(&self) -> bool {
        lock(&self.state).unsettled
    }

    /// Ends a mode change with the backend's answer: the hold's mode and fencing token now.
    pub(crate) fn settle(&self, mode: Mode, fencing: Fencing) {
        let mut state = lock(&self.state);
        state.unsettled = false;
        state.mode = mode;
        state.fencing = fencing;
    }

    pub(crate) fn until(&self) -> Instant {
        lock(&self.state).until
    }

    pub(crate) fn ttl(&self) -> Ttl {
        lock(&self.state).ttl
    }

    /// Whether the lost signal fired (not counting a validity that ran out unseen).
    pub(crate) fn is_marked_lost(&self) -> bool {
        lock(&self.state).lost.claimed
    }

    /// Whether the lock is lost, its validity having run out counting as lost (unless the
    /// hold is over: a released lock is not lost).
    pub(crate) fn is_lost(&self) -> bool {
        let expired = {
            let state = lock(&self.state);
            if state.lost.claimed {
                return true;
            }
            !state.over && state.until <= clock::now()
        };
        if expired {
            self.mark_lost(
                LostCause::Expired,
                "its validity ran out before it was prolonged",
            );
        }
        expired
    }

    /// Fires the lost signal; the first time, logs `why` and reports the loss *before* the
    /// signal fires: a task woken by `lost()` finds the loss in `stats()` and the observer.
    pub(crate) fn mark_lost(&self, cause: LostCause, why: &str) {
        let (first, fencing) = {
            let mut state = lock(&self.state);
            (state.lost.claim(), state.fencing)
        };
        if first {
            tracing::warn!(key = %self.key, %fencing, backend = self.backend.name(), %cause, "lock lost: {why}");
            self.telemetry.emit(Event::Lost {
                backend: self.backend.name(),
                key: &self.key,
                cause,
            });
        }
        lock(&self.state).lost.fire();
    }

    /// The lost signal, with the timer that fires it when the validity runs out (started
    /// here when none runs and a runtime is there to run it).
    pub(crate) fn lost_token(self: &Arc<Self>) -> CancellationToken {
        let token = lock(&self.state).lost.token();
        self.arm_timer();
        token
    }

    /// Starts the expiry timer if someone listens to the lost signal and none runs (it
    /// may have ended with the runtime that ran it).
    pub(crate) fn arm_timer(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut state = lock(&self.state);
            if state.timer || state.over || state.lost.claimed || state.lost.token.is_none() {
                return;
            }
            state.timer = true;
        }
        runtime.spawn(expiry_timer(TimerMark(Arc::clone(self))));
    }

    /// Gives back one hold of the lock on the backend, in the token's turn: after every
    /// call of the token sent before it (a cancelled reentrant obtain or mode change still
    /// running) ended, so it frees the key whichever mode those left it in. `last`: no other
    /// guard of this hold remains, so holds the backend still counts for the token (a
    /// reentrant grant whose reply was lost) are given back too. A hold that a fresh
    /// acquisition with the same token replaced meanwhile sends nothing and answers `Lost`.
    pub(crate) async fn release(
        &self,
        delay_after: Option<Ttl>,
        last: bool,
    ) -> Result<ReleaseOutcome> {
        /// A last release that never ended (its runtime gone) ends the hold as failed.
        struct Releasing<'a>(&'a Hold, bool);
        impl Drop for Releasing<'_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.end(HoldEnd::Failed);
                }
            }
        }
        let mut releasing = Releasing(self, last);
        let _turn = self.calls.turn().await;
        if self.is_detached() {
            releasing.1 = false;
            return Ok(ReleaseOutcome::Lost);
        }
        let what = if last {
            GiveBack::AllHolds
        } else {
            GiveBack::OneHold
        };
        let outcome =
            match release_holds(&*self.backend, &self.key, &self.token, delay_after, what).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    self.telemetry.call_failed(&self.key, &e);
                    return Err(e);
                }
            };
        let end = match outcome {
            ReleaseOutcome::Lost => {
                self.mark_lost(LostCause::Taken, "the release answered Lost");
                HoldEnd::Lost
            }
            ReleaseOutcome::ReleasedLate => {
                tracing::warn!(key = %self.key, fencing = %self.fencing(), "released late: the lock had expired before the release");
                HoldEnd::Late
            }
            ReleaseOutcome::Released | ReleaseOutcome::Decremented { .. } => HoldEnd::Released,
        };
        if last {
            self.end(end);
            // Ended: its drop has nothing more to do.
            releasing.1 = false;
        }
        Ok(outcome)
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("backend", &self.backend.name())
            .field("key", &self.key)
            .field("token", &self.token)
            .field("fencing", &self.fencing())
            .field("mode", &self.mode())
            .field("lost", &lock(&self.state).lost.claimed)
            .finish()
    }
}
