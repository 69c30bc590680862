//! The reference model of shared holds: the key as the contract's "Shared holds" section
//! says it stands, and the answer it expects to each request.

use std::collections::BTreeMap;

use lock_core::{BusyReason, Fencing, LockState, ProlongOutcome, ReleaseOutcome};
use tokio::time::Instant;

use super::{Ask, TTL};

/// One owner's hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    /// `None`: exclusive; else the weight of a shared hold.
    pub(super) weight: Option<u32>,
    pub(super) holds: u32,
    /// When its ttl ends: [`TTL`] after the call that granted or last renewed it was sent.
    pub(super) ends: Instant,
}

/// The key as the contract says it stands.
#[derive(Debug, Default)]
pub(super) struct Model {
    pub(super) holds: BTreeMap<usize, Held>,
    /// The capacity the first shared hold fixed, while shared holds exist.
    pub(super) capacity: Option<u32>,
    /// The owner whose writer's marker keeps new shared holds out, and when it ends.
    pub(super) marker: Option<(usize, Instant)>,
    /// A release with a delay left no live hold: every obtain is busy till the end.
    pub(super) cooling: Option<Instant>,
    pub(super) last_fencing: Option<Fencing>,
}

/// What the model expects of an obtain.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Expect {
    Acquired,
    /// A downgrade: acquired with the exclusive hold's fencing token.
    Downgraded,
    Reacquired(u32),
    Busy {
        reason: BusyReason,
        /// The live holds it counts.
        holders: u32,
        /// The hold whose end opens room, and that end; or, with no holder, the end of
        /// what keeps the request out (the marker, the cooldown).
        opener: Option<usize>,
        until: Instant,
    },
    Refused,
}

impl Model {
    fn exclusive_holder(&self) -> Option<usize> {
        self.holds
            .iter()
            .find(|(_, h)| h.weight.is_none())
            .map(|(o, _)| *o)
    }

    fn used(&self) -> u32 {
        self.holds.values().filter_map(|h| h.weight).sum()
    }

    fn marker_of(&self) -> Option<usize> {
        self.marker.map(|(o, _)| o)
    }

    /// `owner` holds `weight` of `capacity` permits once, until `ends`.
    fn share(&mut self, owner: usize, capacity: u32, weight: u32, ends: Instant) {
        self.capacity = Some(capacity);
        self.holds.insert(
            owner,
            Held {
                weight: Some(weight),
                holds: 1,
                ends,
            },
        );
    }

    /// Busy behind `holder`'s hold.
    fn busy_behind(&self, reason: BusyReason, holders: usize, holder: usize) -> Expect {
        Expect::Busy {
            reason,
            holders: holders as u32,
            opener: Some(holder),
            until: self.holds[&holder].ends,
        }
    }

    /// The expected answer to `owner`'s obtain sent at `now`, and the model moved on as if
    /// it came.
    pub(super) fn obtain(&mut self, owner: usize, ask: Ask, now: Instant) -> Expect {
        if let Some(until) = self.cooling {
            return Expect::Busy {
                reason: BusyReason::Cooling,
                holders: 0,
                opener: None,
                until,
            };
        }
        let ends = now + TTL;
        let own = self.holds.get(&owner).copied();
        let others: Vec<usize> = self.holds.keys().copied().filter(|o| *o != owner).collect();
        match ask {
            Ask::Exclusive { queue } => match own {
                Some(Held {
                    weight: None,
                    holds,
                    ..
                }) => {
                    self.holds.insert(
                        owner,
                        Held {
                            weight: None,
                            holds: holds + 1,
                            ends,
                        },
                    );
                    Expect::Reacquired(holds + 1)
                }
                // An upgrade of a share taken more than once.
                Some(Held { holds, .. }) if holds > 1 => Expect::Refused,
                None if self.exclusive_holder().is_some() => {
                    let holder = self.exclusive_holder().unwrap_or(owner);
                    self.busy_behind(BusyReason::Held, 1, holder)
                }
                // Busy behind other shared holds, the caller's own share (if any) kept: the
                // other hold that ends last opens room.
                _ if !others.is_empty() => {
                    let last = others
                        .iter()
                        .copied()
                        .max_by_key(|o| self.holds[o].ends)
                        .unwrap_or(owner);
                    let busy = self.busy_behind(BusyReason::Shared, others.len(), last);
                    if queue && self.marker_of().is_none_or(|m| m == owner) {
                        self.marker = Some((owner, ends));
                    }
                    busy
                }
                // Free, or an upgrade of the only share.
                _ => {
                    if self.marker_of() == Some(owner) {
                        self.marker = None;
                    }
                    self.capacity = None;
                    self.holds.insert(
                        owner,
                        Held {
                            weight: None,
                            holds: 1,
                            ends,
                        },
                    );
                    Expect::Acquired
                }
            },
            Ask::Shared { capacity, weight } => {
                if let Some(Held {
                    weight: None,
                    holds,
                    ..
                }) = own
                {
                    if holds > 1 {
                        return Expect::Refused;
                    }
                    // A downgrade: alone, so it fixes the capacity; a marker stays.
                    self.share(owner, capacity, weight, ends);
                    return Expect::Downgraded;
                }
                if let Some(holder) = self.exclusive_holder() {
                    return self.busy_behind(BusyReason::Held, 1, holder);
                }
                if self.capacity.is_some_and(|c| c != capacity) {
                    return Expect::Refused;
                }
                if let Some(held) = own {
                    if held.weight != Some(weight) {
                        return Expect::Refused;
                    }
                    let holds = held.holds + 1;
                    self.holds.insert(
                        owner,
                        Held {
                            holds,
                            ends,
                            ..held
                        },
                    );
                    return Expect::Reacquired(holds);
                }
                if let Some((_, until)) = self.marker.filter(|(m, _)| *m != owner) {
                    return Expect::Busy {
                        reason: BusyReason::WriterWaiting,
                        holders: self.holds.len() as u32,
                        opener: None,
                        until,
                    };
                }
                if u64::from(self.used()) + u64::from(weight) > u64::from(capacity) {
                    // The hold whose end, with those ending before it, makes room.
                    let mut ending: Vec<(usize, Held)> =
                        self.holds.iter().map(|(o, h)| (*o, *h)).collect();
                    ending.sort_by_key(|(_, h)| h.ends);
                    let mut left = self.used();
                    let opener = ending.iter().find(|(_, h)| {
                        left -= h.weight.unwrap_or(0);
                        left + weight <= capacity
                    });
                    return match opener {
                        Some((o, _)) => self.busy_behind(BusyReason::Full, self.holds.len(), *o),
                        None => Expect::Busy {
                            reason: BusyReason::Full,
                            holders: self.holds.len() as u32,
                            opener: None,
                            until: now,
                        },
                    };
                }
                if self.marker_of() == Some(owner) {
                    self.marker = None;
                }
                self.share(owner, capacity, weight, ends);
                Expect::Acquired
            }
        }
    }

    pub(super) fn prolong(&mut self, owner: usize, now: Instant) -> ProlongOutcome {
        match self.holds.get_mut(&owner) {
            Some(held) => {
                held.ends = now + TTL;
                ProlongOutcome::Prolonged
            }
            None => ProlongOutcome::Lost,
        }
    }

    pub(super) fn release(&mut self, owner: usize, delay: bool, now: Instant) -> ReleaseOutcome {
        let Some(held) = self.holds.get(&owner).copied() else {
            // A writer that gives up takes its marker away (not while cooling: nothing
            // changes then).
            if self.marker_of() == Some(owner) && self.cooling.is_none() {
                self.marker = None;
            }
            return ReleaseOutcome::Lost;
        };
        if held.holds > 1 {
            let holds = held.holds - 1;
            self.holds.insert(owner, Held { holds, ..held });
            return ReleaseOutcome::Decremented { holds };
        }
        self.holds.remove(&owner);
        // A holder that queued for an upgrade gives it up with its hold.
        if self.marker_of() == Some(owner) {
            self.marker = None;
        }
        if self.holds.is_empty() {
            self.capacity = None;
            // Only the release that leaves no live hold starts the cooldown.
            if delay {
                self.cooling = Some(now + TTL);
            }
        }
        ReleaseOutcome::Released
    }

    /// Checks an inspect against the model, and the invariant.
    pub(super) fn check_state(&self, state: &LockState) -> Result<(), String> {
        if self.cooling.is_some() {
            return match state {
                LockState::Cooling { .. } => Ok(()),
                _ => Err(format!("the model is cooling down: {self:?}")),
            };
        }
        match (state, self.exclusive_holder()) {
            (LockState::Free, None) if self.holds.is_empty() => Ok(()),
            (LockState::Held { holds, .. }, Some(o)) if self.holds.len() == 1 => {
                let want = self.holds[&o].holds;
                match *holds == want {
                    true => Ok(()),
                    false => Err(format!("{holds} holds, the model has {want}")),
                }
            }
            (
                LockState::Shared {
                    capacity,
                    holds,
                    writer_waiting,
                },
                None,
            ) if !self.holds.is_empty() => {
                let used: u64 = holds.iter().map(|h| u64::from(h.weight)).sum();
                if used > u64::from(*capacity) {
                    return Err(format!("{used} permits held of {capacity}"));
                }
                let mut seen: Vec<(u32, u32)> = holds.iter().map(|h| (h.weight, h.holds)).collect();
                let mut want: Vec<(u32, u32)> = self
                    .holds
                    .values()
                    .map(|h| (h.weight.unwrap_or(0), h.holds))
                    .collect();
                seen.sort_unstable();
                want.sort_unstable();
                if Some(*capacity) != self.capacity || seen != want {
                    return Err(format!(
                        "capacity {capacity} with (weight, holds) {seen:?}; the model has \
                         {:?} with {want:?}",
                        self.capacity
                    ));
                }
                match writer_waiting.is_some() == self.marker.is_some() {
                    true => Ok(()),
                    false => Err(format!(
                        "writer waiting: {writer_waiting:?}, the model's marker: {:?}",
                        self.marker
                    )),
                }
            }
            _ => Err(format!("the model has {self:?}")),
        }
    }
}
