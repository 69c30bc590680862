//! The decisions for a key held shared: a semaphore's permits and read holds (the rules
//! are on [`Shared`]).

use super::{
    cooling, count, give_up_waiting, hold_times, last_fencing, live_writer, next_fencing, nothing,
    phase, renewed, rewritten, writer_after, Clock, Decision, Hold, Obtain, Obtained, Phase,
    Record, Refusal, State, View, Wake,
};
use crate::{BusyReason, Fencing, Grace, Mode, ProlongOutcome, ReleaseOutcome, Ttl};

/// The shared holds of a key, in [`State::Shared`], and the rules that decide on them:
///
/// - Admission: a shared request is admitted when the live shared weights plus its weight
///   fit the key's capacity, nobody holds the key exclusively, and no other writer's marker
///   lives. The admission gets its own fencing token from the key's counter and its own
///   ttl.
/// - The first shared hold fixes the capacity while any shared hold (live, or expired
///   within its grace) is remembered; a request with another capacity is
///   [`Refusal::Capacity`].
/// - A token that holds the key shared and asks again with the same weight is
///   `Reacquired`; with another weight, [`Refusal::Weight`].
/// - Mode changes are obtains by the holder's own token in the other mode, of a hold taken
///   once (else [`Refusal::Mode`]). Down (exclusive to shared): always `Acquired`, the
///   fencing token kept. Up (shared to exclusive): `Acquired` with a fresh fencing token
///   when the caller's is the only live hold, else `Busy` (with a writer's marker when it
///   queues), the caller's share kept. A change that names its hold
///   ([`Obtain::change`]) finds that live hold or is `Lost`, nothing written.
/// - An expired hold stays in the record, so that its late prolong or release is told
///   apart from a lost one, as long as its room is not taken: each admission keeps the
///   expired holds (oldest first) that still fit beside the live ones and drops the others.
/// - A release that leaves no live hold starts the cooldown; any other ignores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared<T, H> {
    /// The capacity the first holder fixed ([`Mode::UNBOUNDED`] for read holds).
    pub capacity: u32,
    /// The holds, oldest admission first; expired ones only while within their grace and
    /// their room untaken.
    pub holds: Vec<Share<T, H>>,
}

/// One shared hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share<T, H> {
    /// The holder, its reentrant count and its times.
    pub hold: Hold<T, H>,
    /// Its own fencing token.
    pub fencing: u64,
    /// The permits it takes, 1 ..= capacity.
    pub weight: u32,
}

impl<T, H> Shared<T, H> {
    /// Whether any hold is still within its grace.
    pub(super) fn remembered(&self, clock: Clock) -> bool {
        self.holds.iter().any(|s| s.hold.forget > clock.now())
    }

    /// `token`'s hold, live or expired, while within its grace.
    fn remembered_own(&self, token: &T, clock: Clock) -> Option<&Share<T, H>>
    where
        T: PartialEq,
    {
        self.holds
            .iter()
            .find(|sh| sh.hold.token == *token && sh.hold.forget > clock.now())
    }

    /// The live holds.
    pub(super) fn live(&self, clock: Clock) -> Vec<&Share<T, H>> {
        self.holds
            .iter()
            .filter(|s| s.hold.expires > clock.now())
            .collect()
    }

    /// The live holds' weights together.
    fn used(&self, clock: Clock) -> u64 {
        self.live(clock).iter().map(|s| u64::from(s.weight)).sum()
    }

    /// The holds, `token`'s changed by `change`.
    fn with_own(
        &self,
        token: &T,
        mut change: impl FnMut(&Hold<T, H>) -> Hold<T, H>,
    ) -> Vec<Share<T, H>>
    where
        T: Clone + PartialEq,
        H: Clone,
    {
        self.holds
            .iter()
            .map(|sh| Share {
                hold: match sh.hold.token == *token {
                    true => change(&sh.hold),
                    false => sh.hold.clone(),
                },
                fencing: sh.fencing,
                weight: sh.weight,
            })
            .collect()
    }

    /// What an observer sees: the live holds, or free when none lives.
    pub(super) fn view(&self, clock: Clock, writer_until: Option<u64>) -> View<'_, H> {
        let holds: Vec<_> = self
            .live(clock)
            .into_iter()
            .map(|s| {
                (
                    &s.hold.holder,
                    Fencing(s.fencing),
                    clock.until(s.hold.expires),
                    s.hold.holds,
                    s.weight,
                )
            })
            .collect();
        if holds.is_empty() {
            return View::Free;
        }
        View::Shared {
            capacity: self.capacity,
            holds,
            writer_waiting: writer_until.map(|at| clock.until(at)),
        }
    }
}

/// Decides a shared obtain of `weight` permits of `capacity` (the cooldown is answered
/// before).
pub(super) fn obtain<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    clock: Clock,
    ask: Obtain<'_, T, H>,
    capacity: u32,
    weight: u32,
) -> Decision<Obtained<'r, H>, T, H> {
    let writer = live_writer(record, clock).filter(|w| w.token != *ask.token);
    let writer_waiting = |holders| {
        nothing(Obtained::Busy {
            holder: None,
            remaining: writer.map_or_else(Default::default, |w| clock.until(w.until)),
            reason: BusyReason::WriterWaiting,
            holders,
        })
    };
    match phase(record, clock) {
        Phase::Live(h) if h.token == *ask.token => {
            downgrade(record, h, clock, &ask, capacity, weight)
        }
        Phase::Live(h) => nothing(Obtained::Busy {
            holder: Some(&h.holder),
            remaining: clock.until(h.expires),
            reason: BusyReason::Held,
            holders: 1,
        }),
        Phase::Shared(s) if s.capacity != capacity => {
            nothing(Obtained::Refused(Refusal::Capacity {
                stored: s.capacity,
                asked: capacity,
            }))
        }
        Phase::Shared(s) => {
            let live = s.live(clock);
            if let Some(own) = live.iter().find(|sh| sh.hold.token == *ask.token) {
                if own.weight != weight {
                    return nothing(Obtained::Refused(Refusal::Weight {
                        stored: own.weight,
                        asked: weight,
                    }));
                }
                return reacquire(record, s, clock, &ask);
            }
            if writer.is_some() {
                return writer_waiting(count(live.len()));
            }
            let used = s.used(clock);
            if used + u64::from(weight) <= u64::from(capacity) {
                return admit(record, &s.holds, clock, &ask, capacity, weight);
            }
            // Full: the hold whose end, with those ending before it, makes room.
            let mut ending: Vec<&Share<T, H>> = live.clone();
            ending.sort_by_key(|sh| sh.hold.expires);
            let mut left = used;
            let opener = ending.into_iter().find(|sh| {
                left -= u64::from(sh.weight);
                left + u64::from(weight) <= u64::from(capacity)
            });
            nothing(Obtained::Busy {
                holder: opener.map(|sh| &sh.hold.holder),
                remaining: opener.map_or_else(Default::default, |sh| clock.until(sh.hold.expires)),
                reason: BusyReason::Full,
                holders: count(live.len()),
            })
        }
        Phase::Free | Phase::Expired(_) if writer.is_some() => writer_waiting(0),
        Phase::Free | Phase::Expired(_) => admit(record, &[], clock, &ask, capacity, weight),
        Phase::Cooling { until } => nothing(cooling(clock, until)),
    }
}

/// The asker's live exclusive hold becomes a shared one (a downgrade): its fencing token
/// kept, its ttl reset, the first shared hold of the key (it fixes the capacity). Every
/// waiter is woken: readers may come in now. A hold taken more than once is refused: the
/// reentrant holds go first.
fn downgrade<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    hold: &Hold<T, H>,
    clock: Clock,
    ask: &Obtain<'_, T, H>,
    capacity: u32,
    weight: u32,
) -> Decision<Obtained<'r, H>, T, H> {
    if hold.holds > 1 {
        return nothing(Obtained::Refused(Refusal::Mode {
            held: Mode::Exclusive,
        }));
    }
    let fencing = last_fencing(record);
    let share = Share {
        hold: renewed(hold, clock, ask.ttl, ask.grace),
        fencing,
        weight,
    };
    let state = State::Shared(Shared {
        capacity,
        holds: vec![share],
    });
    Decision {
        outcome: Obtained::Acquired {
            fencing: Fencing(fencing),
        },
        write: Some(rewritten(record, clock, state)),
        wake: Wake::All,
    }
}

/// One more hold for the asker's live share, its ttl reset.
fn reacquire<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    s: &Shared<T, H>,
    clock: Clock,
    ask: &Obtain<'_, T, H>,
) -> Decision<Obtained<'r, H>, T, H> {
    let mut holds = 0;
    let shares = s.with_own(ask.token, |hold| {
        holds = hold.holds.saturating_add(1);
        Hold {
            holds,
            ..renewed(hold, clock, ask.ttl, ask.grace)
        }
    });
    let state = State::Shared(Shared {
        capacity: s.capacity,
        holds: shares,
    });
    Decision {
        outcome: Obtained::Reacquired { holds },
        write: Some(rewritten(record, clock, state)),
        wake: Wake::Nobody,
    }
}

/// A new share for the asker. The live holds stay; expired ones (the asker's own aside)
/// stay, oldest first, while they fit beside the live ones and the new one.
fn admit<'r, T: Clone + PartialEq, H: Clone>(
    record: Option<&'r Record<T, H>>,
    before: &[Share<T, H>],
    clock: Clock,
    ask: &Obtain<'_, T, H>,
    capacity: u32,
    weight: u32,
) -> Decision<Obtained<'r, H>, T, H> {
    let now = clock.now();
    let others = before
        .iter()
        .filter(|sh| sh.hold.forget > now && sh.hold.token != *ask.token);
    let mut used: u64 = others
        .clone()
        .filter(|sh| sh.hold.expires > now)
        .map(|sh| u64::from(sh.weight))
        .sum::<u64>()
        + u64::from(weight);
    let mut holds: Vec<Share<T, H>> = others
        .filter(|sh| {
            if sh.hold.expires > now {
                return true;
            }
            let fits = used + u64::from(sh.weight) <= u64::from(capacity);
            if fits {
                used += u64::from(sh.weight);
            }
            fits
        })
        .cloned()
        .collect();
    let fencing = next_fencing(record, ask.fencing_floor);
    let (expires, forget) = hold_times(clock, ask.ttl, ask.grace);
    holds.push(Share {
        hold: Hold {
            token: ask.token.clone(),
            holder: ask.holder.clone(),
            holds: 1,
            expires,
            forget,
        },
        fencing,
        weight,
    });
    Decision {
        outcome: Obtained::Acquired {
            fencing: Fencing(fencing),
        },
        write: Some(Record {
            fencing,
            state: State::Shared(Shared { capacity, holds }),
            writer: writer_after(record, clock, ask.token),
        }),
        wake: Wake::One,
    }
}

/// Decides a prolong of a shared hold: `Prolonged` when live, `ProlongedLate` when expired
/// but still in the record, else `Lost`.
pub(super) fn prolong<T: Clone + PartialEq, H: Clone>(
    record: Option<&Record<T, H>>,
    s: &Shared<T, H>,
    clock: Clock,
    token: &T,
    ttl: Ttl,
    grace: Grace,
) -> Decision<ProlongOutcome, T, H> {
    let now = clock.now();
    let Some(own) = s.remembered_own(token, clock) else {
        return nothing(ProlongOutcome::Lost);
    };
    let outcome = match own.hold.expires > now {
        true => ProlongOutcome::Prolonged,
        false => ProlongOutcome::ProlongedLate,
    };
    let holds = s
        .with_own(token, |hold| renewed(hold, clock, ttl, grace))
        .into_iter()
        .filter(|sh| sh.hold.forget > now)
        .collect();
    let state = State::Shared(Shared {
        capacity: s.capacity,
        holds,
    });
    Decision {
        outcome,
        write: Some(rewritten(record, clock, state)),
        wake: Wake::Nobody,
    }
}

/// Decides a release of a shared hold.
pub(super) fn release<T: Clone + PartialEq, H: Clone>(
    record: Option<&Record<T, H>>,
    s: &Shared<T, H>,
    clock: Clock,
    token: &T,
    delay: Option<Ttl>,
) -> Decision<ReleaseOutcome, T, H> {
    let now = clock.now();
    let Some(own) = s.remembered_own(token, clock) else {
        return give_up_waiting(record, clock, token);
    };
    let live = own.hold.expires > now;
    if live && own.hold.holds > 1 {
        let holds = own.hold.holds - 1;
        let state = State::Shared(Shared {
            capacity: s.capacity,
            holds: s.with_own(token, |hold| Hold {
                holds,
                ..hold.clone()
            }),
        });
        return Decision {
            outcome: ReleaseOutcome::Decremented { holds },
            write: Some(rewritten(record, clock, state)),
            wake: Wake::Nobody,
        };
    }
    let rest: Vec<Share<T, H>> = s
        .holds
        .iter()
        .filter(|sh| sh.hold.token != *token && sh.hold.forget > now)
        .cloned()
        .collect();
    let writer = writer_after(record, clock, token);
    // A writer waits and another's share lives on: nobody can get in (the marker keeps
    // readers out, the share the writer), so nobody is woken; a herd of woken readers would
    // only queue the writer's next attempt behind theirs. The last share out wakes them all.
    let wake = match &writer {
        Some(w)
            if rest
                .iter()
                .any(|sh| sh.hold.expires > now && sh.hold.token != w.token) =>
        {
            Wake::Nobody
        }
        _ => Wake::All,
    };
    let state = match delay {
        _ if rest.iter().any(|sh| sh.hold.expires > now) => State::Shared(Shared {
            capacity: s.capacity,
            holds: rest,
        }),
        Some(d) => State::Cooling {
            until: clock.after(d.as_millis()),
        },
        None if rest.is_empty() => State::Free,
        None => State::Shared(Shared {
            capacity: s.capacity,
            holds: rest,
        }),
    };
    Decision {
        outcome: match live {
            true => ReleaseOutcome::Released,
            false => ReleaseOutcome::ReleasedLate,
        },
        write: Some(Record {
            fencing: last_fencing(record),
            state,
            writer,
        }),
        wake,
    }
}
