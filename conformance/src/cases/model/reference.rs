//! The reference model of the mutex: the key as the contract says it stands after each
//! step, with the window in which the backend applied it, and the answers it allows next.

use std::time::Duration;

use lock_core::backend::Expiry;
use lock_core::{
    Busy, Fencing, HolderInfo, LockState, ObtainOutcome, ProlongOutcome, ReleaseOutcome,
};
use tokio::time::Instant;

use super::{Op, SLACK};

/// When the backend applied an operation: somewhere between sending and answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) sent: Instant,
    pub(crate) answered: Instant,
}

#[derive(Debug, Clone)]
pub(super) enum KeyModel {
    Free,
    Held {
        owner: usize,
        fencing: Fencing,
        holds: u32,
        ttl: Duration,
        set: Window,
    },
    Cooling {
        delay: Duration,
        set: Window,
    },
}

/// What a held record can be, as seen by an operation applied within `at`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Phases {
    pub(crate) live: bool,
    pub(crate) late: bool,
    pub(crate) gone: bool,
}

pub(super) struct Model {
    pub(super) keys: Vec<KeyModel>,
    pub(super) last_fencing: Vec<Option<Fencing>>,
    pub(super) holders: Vec<HolderInfo>,
    /// How the backend's server ends holds and cooldowns (its capabilities): never before
    /// the time asked, at the latest [`Expiry::longest`] after it was set.
    pub(super) expiry: Expiry,
}

/// What a held record can be, as seen by an operation applied within `at`.
pub(crate) fn held_phases(expiry: Expiry, ttl: Duration, set: Window, at: Window) -> Phases {
    let earliest_expiry = set.sent + ttl;
    let latest_expiry = set.answered + expiry.longest(ttl);
    // The grace period is at least the ttl; past it the record may or may not remain.
    Phases {
        live: at.sent < latest_expiry + SLACK,
        late: at.answered + SLACK > earliest_expiry,
        gone: at.answered + SLACK > earliest_expiry + ttl,
    }
}

/// (may still cool down, may be over)
fn cooling_phases(expiry: Expiry, delay: Duration, set: Window, at: Window) -> (bool, bool) {
    (
        at.sent < set.answered + expiry.longest(delay) + SLACK,
        at.answered + SLACK > set.sent + delay,
    )
}

impl Model {
    fn expect_new_fencing(&mut self, key: usize, fencing: Fencing) -> Result<(), String> {
        if let Some(last) = self.last_fencing[key] {
            if fencing <= last {
                return Err(format!(
                    "fencing {fencing} does not exceed the previous {last}"
                ));
            }
        }
        self.last_fencing[key] = Some(fencing);
        Ok(())
    }

    fn check_busy(&self, key: usize, owner: usize, busy: &Busy, at: Window) -> Result<(), String> {
        match (&self.keys[key], &busy.holder) {
            (
                KeyModel::Held {
                    owner: h, ttl, set, ..
                },
                Some(holder),
            ) => {
                if !held_phases(self.expiry, *ttl, *set, at).live {
                    return Err("Busy, but the holder's lock had certainly expired".into());
                }
                if *h == owner {
                    return Err(
                        "Busy for the token that holds the lock (expected Reacquired)".into(),
                    );
                }
                if *holder != self.holders[*h] {
                    return Err(format!("Busy names holder {holder:?}, expected owner {h}"));
                }
                if busy.remaining > self.expiry.longest(*ttl) {
                    return Err(format!(
                        "Busy remaining {:?} exceeds the ttl {ttl:?}",
                        busy.remaining
                    ));
                }
                Ok(())
            }
            (KeyModel::Cooling { delay, set }, None) => {
                if !cooling_phases(self.expiry, *delay, *set, at).0 {
                    return Err("Busy(cooling), but the cooldown had certainly ended".into());
                }
                if busy.remaining > self.expiry.longest(*delay) {
                    return Err(format!(
                        "cooldown remaining {:?} exceeds the delay {delay:?}",
                        busy.remaining
                    ));
                }
                Ok(())
            }
            (state, _) => Err(format!("Busy {busy:?}, but the model says {state:?}")),
        }
    }

    /// Whether an obtain by another token could find the key free.
    fn obtainable(&self, key: usize, at: Window) -> bool {
        match &self.keys[key] {
            KeyModel::Free => true,
            KeyModel::Held { ttl, set, .. } => held_phases(self.expiry, *ttl, *set, at).late,
            KeyModel::Cooling { delay, set } => cooling_phases(self.expiry, *delay, *set, at).1,
        }
    }

    pub(super) fn apply(&mut self, op: Op, outcome: &Observed, at: Window) -> Result<(), String> {
        match (op, outcome) {
            (Op::Obtain { owner, key, ttl }, Observed::Obtain(o)) => match o {
                ObtainOutcome::Acquired {
                    fencing,
                    ttl: granted,
                } => {
                    if granted.as_duration() != ttl.duration() {
                        return Err(format!(
                            "Acquired with ttl {granted}, asked {:?}",
                            ttl.duration()
                        ));
                    }
                    if !self.obtainable(key, at) {
                        return Err(format!("Acquired, but the model says {:?}", self.keys[key]));
                    }
                    self.expect_new_fencing(key, *fencing)?;
                    self.keys[key] = KeyModel::Held {
                        owner,
                        fencing: *fencing,
                        holds: 1,
                        ttl: ttl.duration(),
                        set: at,
                    };
                    Ok(())
                }
                ObtainOutcome::Reacquired { holds } => match &mut self.keys[key] {
                    KeyModel::Held {
                        owner: h,
                        holds: n,
                        ttl: t,
                        set,
                        ..
                    } if *h == owner => {
                        if !held_phases(self.expiry, *t, *set, at).live {
                            return Err("Reacquired, but the hold had certainly expired".into());
                        }
                        if *holds != *n + 1 {
                            return Err(format!(
                                "Reacquired with {holds} holds, expected {}",
                                *n + 1
                            ));
                        }
                        *n = *holds;
                        *t = ttl.duration();
                        *set = at;
                        Ok(())
                    }
                    state => Err(format!("Reacquired, but the model says {state:?}")),
                },
                ObtainOutcome::Busy(busy) => self.check_busy(key, owner, busy, at),
                ObtainOutcome::Lost => Err("Lost, to an obtain that changes no mode".into()),
            },
            (Op::Prolong { owner, key, ttl }, Observed::Prolong(o)) => {
                let state = self.keys[key].clone();
                let (phases, ours) = match &state {
                    KeyModel::Held {
                        owner: h, ttl, set, ..
                    } => (held_phases(self.expiry, *ttl, *set, at), *h == owner),
                    _ => (Phases::default(), false),
                };
                match o {
                    ProlongOutcome::Prolonged if ours && phases.live => {}
                    ProlongOutcome::ProlongedLate if ours && phases.late => {}
                    ProlongOutcome::Lost if !ours => return Ok(()),
                    ProlongOutcome::Lost if phases.gone => {
                        self.keys[key] = KeyModel::Free;
                        return Ok(());
                    }
                    _ => {
                        return Err(format!(
                            "{o:?}, but the model says {state:?} (phases {phases:?}, ours {ours})"
                        ))
                    }
                }
                if let KeyModel::Held { ttl: t, set, .. } = &mut self.keys[key] {
                    *t = ttl.duration();
                    *set = at;
                }
                Ok(())
            }
            (Op::Release { owner, key, delay }, Observed::Release(o)) => {
                let state = self.keys[key].clone();
                let (phases, ours, holds) = match &state {
                    KeyModel::Held {
                        owner: h,
                        ttl,
                        set,
                        holds,
                        ..
                    } => (
                        held_phases(self.expiry, *ttl, *set, at),
                        *h == owner,
                        *holds,
                    ),
                    _ => (Phases::default(), false, 0),
                };
                let freed = match delay {
                    Some(d) => KeyModel::Cooling {
                        delay: d.duration(),
                        set: at,
                    },
                    None => KeyModel::Free,
                };
                match o {
                    ReleaseOutcome::Decremented { holds: left }
                        if ours && phases.live && holds > 1 =>
                    {
                        if *left != holds - 1 {
                            return Err(format!("Decremented to {left}, expected {}", holds - 1));
                        }
                        if let KeyModel::Held { holds, .. } = &mut self.keys[key] {
                            *holds = *left;
                        }
                    }
                    ReleaseOutcome::Released if ours && phases.live && holds == 1 => {
                        self.keys[key] = freed
                    }
                    ReleaseOutcome::ReleasedLate if ours && phases.late => self.keys[key] = freed,
                    ReleaseOutcome::Lost if !ours => {}
                    ReleaseOutcome::Lost if phases.gone => self.keys[key] = KeyModel::Free,
                    _ => {
                        return Err(format!(
                            "{o:?}, but the model says {state:?} (phases {phases:?}, ours {ours})"
                        ))
                    }
                }
                Ok(())
            }
            (Op::Inspect { key }, Observed::State(s)) => self.check_state(key, s, at),
            (Op::ForceRelease { key }, Observed::State(s)) => {
                self.check_state(key, s, at)?;
                self.keys[key] = KeyModel::Free;
                Ok(())
            }
            (op, outcome) => Err(format!("internal: {op:?} observed as {outcome:?}")),
        }
    }

    fn check_state(&mut self, key: usize, s: &LockState, at: Window) -> Result<(), String> {
        let state = self.keys[key].clone();
        match (&state, s) {
            (KeyModel::Free, LockState::Free) => Ok(()),
            (KeyModel::Held { ttl, set, .. }, LockState::Free)
                if held_phases(self.expiry, *ttl, *set, at).late =>
            {
                Ok(())
            }
            (
                KeyModel::Held {
                    owner,
                    fencing,
                    holds,
                    ttl,
                    set,
                },
                LockState::Held {
                    holder,
                    fencing: f,
                    remaining,
                    holds: n,
                },
            ) => {
                let ok = held_phases(self.expiry, *ttl, *set, at).live
                    && *holder == self.holders[*owner]
                    && f == fencing
                    && n == holds
                    && *remaining <= self.expiry.longest(*ttl);
                if ok {
                    Ok(())
                } else {
                    Err(format!("inspect says {s:?}, the model says {state:?}"))
                }
            }
            (KeyModel::Cooling { delay, set }, LockState::Free)
                if cooling_phases(self.expiry, *delay, *set, at).1 =>
            {
                self.keys[key] = KeyModel::Free;
                Ok(())
            }
            (KeyModel::Cooling { delay, set }, LockState::Cooling { remaining })
                if cooling_phases(self.expiry, *delay, *set, at).0
                    && *remaining <= self.expiry.longest(*delay) =>
            {
                Ok(())
            }
            _ => Err(format!("inspect says {s:?}, the model says {state:?}")),
        }
    }
}

/// What the backend answered to one step.
#[derive(Debug)]
pub(super) enum Observed {
    Obtain(ObtainOutcome),
    Prolong(ProlongOutcome),
    Release(ReleaseOutcome),
    State(LockState),
}
