//! How a hold's validity follows its prolongs: each prolong (or reentrant obtain, or mode
//! change, which reset the ttl the same way) is a [`Ticket`] from when it is sent to when
//! its answer is taken in; the validity is set to the earliest bound among the calls the
//! answer overlapped (see the module docs of `hold.rs`).

use std::sync::Arc;

use tokio::time::Instant;

use super::{lock, Hold};
use crate::client::clock;
use crate::observe::LostCause;
use crate::{ProlongOutcome, Ttl};

/// A prolong (or reentrant obtain) of this hold that is in flight.
pub(super) struct InFlight {
    id: u64,
    /// Its own bound: sent-at + ttl.
    pub(super) bound: Instant,
    /// The earliest bound among the calls it overlapped, its own included.
    floor: Instant,
}

impl Hold {
    /// Starts a prolong (or a reentrant obtain, which resets the ttl the same way) of this
    /// hold to `ttl`, sent now. The ticket must be finished with its answer; dropped
    /// unfinished, it counts as a failed call.
    pub(crate) fn begin(self: &Arc<Self>, ttl: Ttl) -> Ticket {
        let sent_at = clock::now();
        let bound = sent_at + ttl.as_duration();
        let mut state = lock(&self.state);
        let id = state.tickets;
        state.tickets += 1;
        let mut floor = bound;
        for other in &mut state.prolongs {
            floor = floor.min(other.bound);
            other.floor = other.floor.min(bound);
        }
        state.prolongs.push(InFlight { id, bound, floor });
        Ticket {
            hold: Arc::clone(self),
            id,
            sent_at,
            ttl,
            done: false,
        }
    }

    /// Takes in the answer of the prolong `id` (`None`: it failed, or was cancelled, and
    /// may or may not have been applied).
    fn finish(&self, id: u64, ttl: Ttl, answer: Option<ProlongOutcome>) {
        let moved_earlier = {
            let mut state = lock(&self.state);
            let Some(at) = state.prolongs.iter().position(|p| p.id == id) else {
                return;
            };
            let call = state.prolongs.swap_remove(at);
            if state.over {
                // Given back (or detached) while the prolong was in flight: its answer
                // (`Lost`, once the release freed the record) is nobody's concern, and a
                // released lock's lost signal never fires.
                return;
            }
            let before = state.until;
            match answer {
                Some(ProlongOutcome::Prolonged | ProlongOutcome::ProlongedLate) => {
                    state.until = call.floor;
                    state.ttl = ttl;
                }
                // Lost: the signal fires below; the validity no longer matters.
                Some(ProlongOutcome::Lost) => {}
                None => state.until = state.until.min(call.bound),
            }
            state.until < before
        };
        match answer {
            Some(ProlongOutcome::Lost) => {
                self.mark_lost(LostCause::Taken, "a prolong answered Lost")
            }
            Some(ProlongOutcome::ProlongedLate) => {
                tracing::warn!(key = %self.key, fencing = %self.fencing(), "prolonged late: the lock had expired, nobody took it meanwhile")
            }
            _ => {}
        }
        if moved_earlier {
            self.changed.notify_waiters();
        }
    }
}

/// A prolong of a hold in flight; see [`Hold::begin`].
pub(crate) struct Ticket {
    hold: Arc<Hold>,
    id: u64,
    /// When it was sent.
    pub(crate) sent_at: Instant,
    /// The ttl it asks for.
    pub(crate) ttl: Ttl,
    done: bool,
}

impl Ticket {
    /// The prolong's answer; `None` for a failure.
    pub(crate) fn finish(mut self, answer: Option<ProlongOutcome>) {
        self.done = true;
        self.hold.finish(self.id, self.ttl, answer);
    }

    /// The hold it prolongs.
    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.hold.finish(self.id, self.ttl, None);
        }
    }
}
