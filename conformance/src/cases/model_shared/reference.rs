//! The reference model of shared holds: the key as the contract's "Shared holds" section
//! says it stands (one state, a [`World`]), the answer it expects to each request, and the
//! states time can move it to before the next call (a hold that may have ended, or been
//! forgotten past the grace the contract promises, at least its ttl). `worlds` keeps every
//! state the key can be in and lets the answers choose.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_core::backend::Expiry;
use lock_core::{BusyReason, Fencing, LockState, ProlongOutcome, ReleaseOutcome};
use tokio::time::Instant;

use super::{Ask, TIE};
use crate::cases::model::reference::{held_phases, Window};
use crate::cases::model::SLACK;

/// One owner's hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    /// `None`: exclusive; else the share's capacity and weight.
    share: Option<(u32, u32)>,
    holds: u32,
    /// Its fencing token, as the answer that granted it said.
    fencing: Option<Fencing>,
    ttl: Duration,
    /// The call that granted or last renewed it.
    set: Window,
    /// Its ttl has ended (in this world): it stays, within its grace, until its room is
    /// taken.
    expired: bool,
    /// The order of admissions: expired shares are kept oldest admission first.
    admitted: u64,
}

impl Held {
    /// When its ttl ends, as the client can tell (the call that set it was sent then).
    fn ends(&self) -> Instant {
        self.set.sent + self.ttl
    }
}

/// A waiting writer's marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Marker {
    owner: usize,
    ttl: Duration,
    set: Window,
}

/// One state the key can be in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct World {
    holds: BTreeMap<usize, Held>,
    marker: Option<Marker>,
    /// A release with a delay left no live hold: every obtain is busy till then (and the
    /// delay).
    cooling: Option<(Instant, Duration)>,
    admissions: u64,
}

/// What the model expects of an obtain.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Expect {
    Acquired,
    /// A downgrade: acquired with the exclusive hold's fencing token.
    Downgraded(Option<Fencing>),
    Reacquired(u32),
    Busy {
        reason: BusyReason,
        /// The live holds it counts.
        holders: u32,
        /// The hold whose end opens room (and those ending within [`TIE`] of it); none
        /// when what keeps the request out is a marker or a cooldown.
        openers: Vec<usize>,
        /// When room opens, and what it was set for.
        until: Instant,
        ttl: Duration,
    },
    Refused,
}

impl World {
    fn live(&self) -> impl Iterator<Item = (usize, &Held)> + '_ {
        self.holds
            .iter()
            .filter(|(_, h)| !h.expired)
            .map(|(o, h)| (*o, h))
    }

    fn exclusive_holder(&self) -> Option<usize> {
        self.live().find(|(_, h)| h.share.is_none()).map(|(o, _)| o)
    }

    /// The capacity the shares remembered (live, or expired and kept) fix.
    fn capacity(&self) -> Option<u32> {
        self.holds.values().find_map(|h| h.share.map(|(c, _)| c))
    }

    fn used(&self) -> u64 {
        self.live()
            .filter_map(|(_, h)| h.share.map(|(_, w)| u64::from(w)))
            .sum()
    }

    /// Every state this one can be in for a call applied within `at`.
    pub(super) fn futures(&self, expiry: Expiry, at: Window) -> Vec<World> {
        let mut worlds = vec![self.clone()];
        for (&owner, h) in &self.holds {
            let p = held_phases(expiry, h.ttl, h.set, at);
            let (live, ended, forgotten) = (p.live, p.late, p.gone);
            let mut next = Vec::new();
            for w in worlds {
                if ended {
                    if forgotten {
                        let mut gone = w.clone();
                        gone.holds.remove(&owner);
                        next.push(gone);
                    }
                    let mut kept = w.clone();
                    if let Some(k) = kept.holds.get_mut(&owner) {
                        k.expired = true;
                    }
                    next.push(kept);
                }
                if (live && !h.expired) || !ended {
                    next.push(w);
                }
            }
            worlds = next;
        }
        if let Some(m) = self.marker {
            let p = held_phases(expiry, m.ttl, m.set, at);
            let (live, ended) = (p.live, p.late);
            if ended {
                let mut next = Vec::new();
                for w in worlds {
                    let mut gone = w.clone();
                    gone.marker = None;
                    next.push(gone);
                    if live {
                        next.push(w);
                    }
                }
                worlds = next;
            }
        }
        worlds
    }

    /// The longest any short hold or marker of this world may still live.
    pub(super) fn last_end(&self, expiry: Expiry, short: Duration) -> Option<Instant> {
        let holds = self
            .live()
            .filter(|(_, h)| h.ttl <= short)
            .map(|(_, h)| (h.ttl, h.set));
        let marker = self
            .marker
            .filter(|m| m.ttl <= short)
            .map(|m| (m.ttl, m.set));
        holds
            .chain(marker)
            .map(|(ttl, set)| set.answered + expiry.longest(ttl) + SLACK)
            .max()
    }

    /// Busy behind `holder`'s live hold (and the live holds ending with it).
    fn busy_behind(&self, reason: BusyReason, holders: usize, holder: usize) -> Expect {
        let opener = self.holds[&holder];
        let openers = self
            .live()
            .filter(|(o, h)| {
                *o == holder || {
                    let apart = h.ends().max(opener.ends()) - h.ends().min(opener.ends());
                    apart
                        <= TIE
                            + (h.set.answered - h.set.sent)
                            + (opener.set.answered - opener.set.sent)
                }
            })
            .map(|(o, _)| o)
            .collect();
        Expect::Busy {
            reason,
            holders: holders as u32,
            openers,
            until: opener.ends(),
            ttl: opener.ttl,
        }
    }

    fn admit(&mut self, owner: usize, share: Option<(u32, u32)>, ttl: Duration, at: Window) {
        self.admissions += 1;
        self.holds.insert(
            owner,
            Held {
                share,
                holds: 1,
                fencing: None,
                ttl,
                set: at,
                expired: false,
                admitted: self.admissions,
            },
        );
    }

    /// The answer to `owner`'s obtain applied within `at`, and this world moved on as if it
    /// came.
    pub(super) fn obtain(&mut self, owner: usize, ask: Ask, ttl: Duration, at: Window) -> Expect {
        if let Some((until, delay)) = self.cooling {
            return Expect::Busy {
                reason: BusyReason::Cooling,
                holders: 0,
                openers: Vec::new(),
                until,
                ttl: delay,
            };
        }
        // An expired hold asked again is a fresh request (the contract's corner cases).
        let own = self.holds.get(&owner).copied().filter(|h| !h.expired);
        let others: Vec<usize> = self
            .live()
            .map(|(o, _)| o)
            .filter(|o| *o != owner)
            .collect();
        match ask {
            Ask::Exclusive { queue } => match own {
                Some(mut h) if h.share.is_none() => {
                    h.holds += 1;
                    h.ttl = ttl;
                    h.set = at;
                    self.holds.insert(owner, h);
                    Expect::Reacquired(h.holds)
                }
                // An upgrade of a share taken more than once.
                Some(h) if h.holds > 1 => Expect::Refused,
                _ if self.exclusive_holder().is_some() => {
                    let holder = self.exclusive_holder().unwrap_or(owner);
                    self.busy_behind(BusyReason::Held, 1, holder)
                }
                // Busy behind other shared holds, the caller's own share (if any) kept: the
                // other hold that ends last opens room.
                _ if !others.is_empty() => {
                    let last = others
                        .iter()
                        .copied()
                        .max_by_key(|o| self.holds[o].ends())
                        .unwrap_or(owner);
                    let busy = self.busy_behind(BusyReason::Shared, others.len(), last);
                    if queue && self.marker.is_none_or(|m| m.owner == owner) {
                        self.marker = Some(Marker {
                            owner,
                            ttl,
                            set: at,
                        });
                    }
                    busy
                }
                // Free of other live holds, or an upgrade of the only share: an exclusive
                // admission drops every expired hold.
                _ => {
                    if self.marker.is_some_and(|m| m.owner == owner) {
                        self.marker = None;
                    }
                    self.holds.clear();
                    self.admit(owner, None, ttl, at);
                    Expect::Acquired
                }
            },
            Ask::Shared { capacity, weight } => {
                if let Some(h) = own.filter(|h| h.share.is_none()) {
                    if h.holds > 1 {
                        return Expect::Refused;
                    }
                    // A downgrade: alone, so it fixes the capacity; a marker stays.
                    self.holds.insert(
                        owner,
                        Held {
                            share: Some((capacity, weight)),
                            ttl,
                            set: at,
                            ..h
                        },
                    );
                    return Expect::Downgraded(h.fencing);
                }
                if let Some(holder) = self.exclusive_holder() {
                    return self.busy_behind(BusyReason::Held, 1, holder);
                }
                if self.capacity().is_some_and(|c| c != capacity) {
                    return Expect::Refused;
                }
                if let Some(mut h) = own {
                    if h.share != Some((capacity, weight)) {
                        return Expect::Refused;
                    }
                    h.holds += 1;
                    h.ttl = ttl;
                    h.set = at;
                    self.holds.insert(owner, h);
                    return Expect::Reacquired(h.holds);
                }
                if let Some(m) = self.marker.filter(|m| m.owner != owner) {
                    return Expect::Busy {
                        reason: BusyReason::WriterWaiting,
                        holders: others.len() as u32,
                        openers: Vec::new(),
                        until: m.set.sent + m.ttl,
                        ttl: m.ttl,
                    };
                }
                if self.used() + u64::from(weight) > u64::from(capacity) {
                    // The hold whose end, with those ending before it, makes room.
                    let mut ending: Vec<(usize, &Held)> = self.live().collect();
                    ending.sort_by_key(|(_, h)| h.ends());
                    let mut left = self.used();
                    let opener = ending.iter().find(|(_, h)| {
                        left -= h.share.map_or(0, |(_, w)| u64::from(w));
                        left + u64::from(weight) <= u64::from(capacity)
                    });
                    return match opener {
                        Some((o, _)) => self.busy_behind(BusyReason::Full, others.len(), *o),
                        None => Expect::Refused,
                    };
                }
                if self.marker.is_some_and(|m| m.owner == owner) {
                    self.marker = None;
                }
                // The live shares stay; the expired ones (the asker's own and an expired
                // exclusive hold aside) stay, oldest admission first, while they fit beside
                // the live ones and the new one.
                let mut used = self.used() + u64::from(weight);
                let mut expired: Vec<(usize, Held)> = self
                    .holds
                    .iter()
                    .filter(|(o, h)| h.expired && **o != owner)
                    .map(|(o, h)| (*o, *h))
                    .collect();
                expired.sort_by_key(|(_, h)| h.admitted);
                for (o, h) in expired {
                    let fits = h.share.is_some_and(|(_, w)| {
                        let fits = used + u64::from(w) <= u64::from(capacity);
                        if fits {
                            used += u64::from(w);
                        }
                        fits
                    });
                    if !fits {
                        self.holds.remove(&o);
                    }
                }
                self.admit(owner, Some((capacity, weight)), ttl, at);
                Expect::Acquired
            }
        }
    }

    /// Notes the fencing token the answer to `owner`'s admission carried.
    pub(super) fn granted(&mut self, owner: usize, fencing: Fencing) {
        if let Some(h) = self.holds.get_mut(&owner) {
            h.fencing = Some(fencing);
        }
    }

    pub(super) fn prolong(&mut self, owner: usize, ttl: Duration, at: Window) -> ProlongOutcome {
        match self.holds.get_mut(&owner) {
            Some(h) => {
                let late = h.expired;
                h.expired = false;
                h.ttl = ttl;
                h.set = at;
                match late {
                    false => ProlongOutcome::Prolonged,
                    true => ProlongOutcome::ProlongedLate,
                }
            }
            None => ProlongOutcome::Lost,
        }
    }

    pub(super) fn release(
        &mut self,
        owner: usize,
        delay: Option<Duration>,
        at: Window,
    ) -> ReleaseOutcome {
        let Some(held) = self.holds.get(&owner).copied() else {
            // A writer that gives up takes its marker away (not while cooling: nothing
            // changes then).
            if self.marker.is_some_and(|m| m.owner == owner) && self.cooling.is_none() {
                self.marker = None;
            }
            return ReleaseOutcome::Lost;
        };
        if held.holds > 1 && !held.expired {
            let holds = held.holds - 1;
            self.holds.insert(owner, Held { holds, ..held });
            return ReleaseOutcome::Decremented { holds };
        }
        self.holds.remove(&owner);
        // A holder that queued for an upgrade gives it up with its hold.
        if self.marker.is_some_and(|m| m.owner == owner) {
            self.marker = None;
        }
        // Only the release that leaves no live hold starts the cooldown; it keeps no hold.
        let none_live = self.live().next().is_none();
        if let (Some(delay), true) = (delay, none_live) {
            self.holds.clear();
            self.cooling = Some((at.sent + delay, delay));
        }
        match held.expired {
            false => ReleaseOutcome::Released,
            true => ReleaseOutcome::ReleasedLate,
        }
    }

    /// Checks an inspect against this world, and the invariant.
    pub(super) fn check_state(&self, state: &LockState) -> Result<(), String> {
        if self.cooling.is_some() {
            return match state {
                LockState::Cooling { .. } => Ok(()),
                _ => Err(format!("the model is cooling down: {self:?}")),
            };
        }
        let live: Vec<&Held> = self.live().map(|(_, h)| h).collect();
        match (state, self.exclusive_holder()) {
            // Expired holds kept within their grace read as free.
            (LockState::Free, None) if live.is_empty() => Ok(()),
            (LockState::Held { holds, .. }, Some(o)) if live.len() == 1 => {
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
            ) if !live.is_empty() => {
                let used: u64 = holds.iter().map(|h| u64::from(h.weight)).sum();
                if used > u64::from(*capacity) {
                    return Err(format!("{used} permits held of {capacity}"));
                }
                let mut seen: Vec<(u32, u32)> = holds.iter().map(|h| (h.weight, h.holds)).collect();
                let mut want: Vec<(u32, u32)> = live
                    .iter()
                    .map(|h| (h.share.map_or(0, |(_, w)| w), h.holds))
                    .collect();
                seen.sort_unstable();
                want.sort_unstable();
                if Some(*capacity) != self.capacity() || seen != want {
                    return Err(format!(
                        "capacity {capacity} with (weight, holds) {seen:?}; the model has \
                         {:?} with {want:?}",
                        self.capacity()
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
