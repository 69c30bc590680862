//! The decision table (`lock_conformance::table`) through `lock_core::backend::rules::step`,
//! on an exact clock of milliseconds and one of nanoseconds: the one entry of the Rust rules
//! that every backend on the storage adapter, the Redis WATCH variant and MariaDB decide
//! with.

use std::time::Duration;

use lock_conformance::table::{
    Answer, Ask, Before, Seen, SeenShare, Wakes, Who, CASES, DELAY_MS, FENCING, GRACE_MS, TTL_MS,
};
use lock_core::backend::rules::{
    self, step, Clock, Hold, Obtain, Obtained, Record, Reply, Share, Shared, State, Writer,
};
use lock_core::backend::Grace;
use lock_core::{HolderInfo, LockState, ObtainOutcome, Ttl};

type Stored = Record<Who, &'static str>;

/// The table on `clock`.
fn run_table(clock: Clock) {
    let at = |offset_ms: i64| {
        let ticks = clock.ticks(offset_ms.unsigned_abs());
        if offset_ms < 0 {
            clock.now() - ticks
        } else {
            clock.now() + ticks
        }
    };
    // Milliseconds from now to `t`, negative in the past.
    let rel = |t: u64| {
        if t >= clock.now() {
            i64::try_from(clock.until(t).as_millis()).unwrap()
        } else {
            -i64::try_from((clock.now() - t) / clock.ticks(1)).unwrap()
        }
    };
    let ttl = Ttl::from_millis(TTL_MS).unwrap();
    let grace = Grace::new(Duration::from_millis(GRACE_MS)).unwrap();
    let delay = Ttl::from_millis(DELAY_MS).unwrap();
    for case in CASES {
        let plain = |state| Some(Record::new(FENCING, state));
        let before: Option<Stored> = match case.before {
            Before::Nothing => None,
            Before::Free => plain(State::Free),
            Before::Cooling { left_ms } => plain(State::Cooling { until: at(left_ms) }),
            Before::Held {
                by,
                holds,
                expires_in_ms,
                forget_in_ms,
            } => plain(State::Held(Hold {
                token: by,
                holder: "holder",
                holds,
                expires: at(expires_in_ms),
                forget: at(forget_in_ms),
            })),
            Before::Shared { .. } => case.before.shared_at(0).map(|s| Record {
                fencing: FENCING,
                state: State::Shared(Shared {
                    capacity: s.capacity,
                    holds: s
                        .holds
                        .iter()
                        .map(|h| Share {
                            hold: Hold {
                                token: h.by,
                                holder: "holder",
                                holds: h.holds,
                                expires: at(h.expires),
                                forget: at(h.forget),
                            },
                            fencing: h.fencing,
                            weight: h.weight,
                        })
                        .collect(),
                }),
                writer: s.writer.map(|(token, until)| Writer {
                    token,
                    until: at(until),
                }),
            }),
        };
        let before = before.as_ref();
        let holder = |_: &&str| Ok::<_, lock_core::Error>(HolderInfo::current());
        let (mode, queue, change) = match case.ask {
            Ask::ObtainAs { mode, queue } => (mode, queue, None),
            Ask::Change { mode, of } => (mode, false, Some(of)),
            _ => (lock_core::Mode::Exclusive, false, None),
        };
        let ask = match case.ask {
            Ask::Obtain | Ask::ObtainAs { .. } | Ask::Change { .. } => rules::Ask::Obtain(Obtain {
                token: &Who::A,
                holder: &"caller",
                ttl,
                grace,
                fencing_floor: 0,
                mode,
                queue,
                change,
            }),
            Ask::Prolong => rules::Ask::Prolong {
                token: &Who::A,
                ttl,
                grace,
            },
            Ask::Release { delay: d } => rules::Ask::Release {
                token: &Who::A,
                delay: d.then_some(delay),
            },
            Ask::Inspect => rules::Ask::Inspect,
            Ask::Force => rules::Ask::Force,
        };
        // Every case through the one entry, `rules::step`.
        let d = step(before, clock, ask);
        let wakes = match lock_conformance::table::wakes(case.name) {
            None => rules::Wake::Nobody,
            Some(Wakes::One) => rules::Wake::One,
            Some(Wakes::All) => rules::Wake::All,
        };
        assert_eq!(d.wake, wakes, "{}: whom the write wakes", case.name);
        let write = d.write;
        let answer = match d.outcome {
            rules::Answer::Obtain(Obtained::Refused(_), _) => Answer::Refused,
            outcome => match outcome.try_into_reply("rules", holder).unwrap() {
                Reply::Obtain(o) => Answer::Obtain(o),
                Reply::Prolong(o) => Answer::Prolong(o),
                Reply::Release(o) => Answer::Release(o),
                Reply::State(s) => Answer::State(s),
            },
        };
        let stored = write.as_ref().or(before);
        let seen = match stored {
            None => Seen::Nothing,
            Some(r) => match &r.state {
                State::Free => Seen::Free { fencing: r.fencing },
                State::Cooling { until } => Seen::Cooling {
                    fencing: r.fencing,
                    left_ms: rel(*until),
                },
                State::Held(h) => Seen::Held {
                    by: Some(h.token),
                    holds: h.holds,
                    fencing: r.fencing,
                    expires_in_ms: rel(h.expires),
                    forget_in_ms: rel(h.forget),
                },
                State::Shared(s) => Seen::Shared {
                    fencing: r.fencing,
                    capacity: s.capacity,
                    holds: s
                        .holds
                        .iter()
                        .map(|sh| SeenShare {
                            by: Some(sh.hold.token),
                            weight: sh.weight,
                            holds: sh.hold.holds,
                            fencing: sh.fencing,
                            expires_in_ms: rel(sh.hold.expires),
                            forget_in_ms: rel(sh.hold.forget),
                        })
                        .collect(),
                    writer: r.writer.as_ref().map(|w| (Some(w.token), rel(w.until))),
                },
            },
        };
        if let Err(e) = case.check(&answer, &seen, 0) {
            panic!("{e}");
        }
        // What the exact rules do is also what a backend without end times must do.
        if let Err(e) = case.check_coarse(&answer, &seen, 0) {
            panic!("coarse: {e}");
        }
    }
}

#[test]
fn the_table_holds_on_a_clock_of_milliseconds() {
    run_table(Clock::millis(1_800_000_000_000));
}

#[test]
fn the_table_holds_on_a_clock_of_nanoseconds() {
    run_table(Clock::nanos(5_000_000_000_000));
}

#[test]
fn a_check_that_cannot_fail_is_not_a_check() {
    // The first case, answered wrongly, must be refused.
    let case = &CASES[0];
    let wrong = Answer::Obtain(ObtainOutcome::Reacquired { holds: 2 });
    assert!(case.check(&wrong, &Seen::Nothing, 0).is_err());
}

/// The coarse check forgets only when ends came, never what the lock is: a hold left
/// where the row frees the lock, a live hold read as ended, an expired hold read as live,
/// a cooldown that should still run, or a hold's count, are all refused.
#[test]
fn the_coarse_check_still_refuses_a_wrong_record() {
    let find = |name: &str| CASES.iter().find(|c| c.name == name).unwrap();
    let release = find("release, live");
    let released = Answer::Release(lock_core::ReleaseOutcome::Released);
    let left = Seen::Held {
        by: Some(Who::A),
        holds: 1,
        fencing: FENCING,
        expires_in_ms: 10_000,
        forget_in_ms: 70_000,
    };
    assert!(release.check_coarse(&released, &left, 2_000).is_err());
    assert!(release
        .check_coarse(&released, &Seen::Free { fencing: FENCING }, 2_000)
        .is_ok());

    let inspect = find("inspect, expired");
    let free = Answer::State(LockState::Free);
    let expired = |expires_in_ms, holds| Seen::Held {
        by: Some(Who::A),
        holds,
        fencing: FENCING,
        expires_in_ms,
        forget_in_ms: 50_000,
    };
    assert!(inspect
        .check_coarse(&free, &expired(Seen::OVER, 2), 2_000)
        .is_ok());
    assert!(inspect
        .check_coarse(&free, &expired(10_000, 2), 2_000)
        .is_err());
    assert!(inspect
        .check_coarse(&free, &expired(Seen::OVER, 1), 2_000)
        .is_err());
    let forgotten = Seen::Free { fencing: FENCING };
    assert!(inspect.check_coarse(&free, &forgotten, 2_000).is_err());

    let cooling = find("inspect, cooling");
    let answer = Answer::State(LockState::Cooling {
        remaining: Duration::from_secs(20),
    });
    assert!(cooling.check_coarse(&answer, &forgotten, 2_000).is_err());
}

/// Every row [`WAKES`](lock_conformance::table::WAKES) names is a row of the table.
#[test]
fn every_row_the_wake_column_names_is_in_the_table() {
    for (name, _) in lock_conformance::table::WAKES {
        assert!(
            CASES.iter().any(|case| case.name == *name),
            "WAKES names {name:?}, which is no row"
        );
    }
}
