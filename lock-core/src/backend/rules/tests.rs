//! The rules on their own: fencing floors and the shared holds' decisions.

use super::*;

#[test]
fn fencing_never_goes_below_the_floor_nor_the_last_token() {
    let ttl = Ttl::from_millis(1).unwrap();
    let grace = Grace::or_ttl(None, ttl);
    let free: Record<u8, ()> = Record::new(50, State::Free);
    for (record, floor, want) in [(None, 10, 10), (Some(&free), 10, 51), (Some(&free), 90, 90)] {
        let ask = Obtain {
            token: &1,
            holder: &(),
            ttl,
            grace,
            fencing_floor: floor,
            mode: Mode::Exclusive,
            queue: false,
            change: None,
        };
        let got = obtain(record, Clock::millis(0), ask).outcome;
        assert_eq!(
            got,
            Obtained::Acquired {
                fencing: Fencing(want)
            }
        );
    }
}

fn ask(token: &u8, mode: Mode, queue: bool) -> Obtain<'_, u8, ()> {
    let ttl = Ttl::from_millis(1_000).unwrap();
    Obtain {
        token,
        holder: &(),
        ttl,
        grace: Grace::or_ttl(None, ttl),
        fencing_floor: 1,
        mode,
        queue,
        change: None,
    }
}

#[test]
fn a_mode_change_changes_its_own_live_hold_or_nothing() {
    let read = Mode::Shared {
        capacity: Mode::UNBOUNDED,
        weight: 1,
    };
    // The outcome of a mode change by `token` of its hold `of` at `at`, and whether it
    // wrote; the write is applied.
    let change = |r: &mut Option<Record<u8, ()>>, at, token: u8, mode, of| {
        let ask = Obtain {
            change: Some(of),
            ..ask(&token, mode, false)
        };
        let d = obtain(r.as_ref(), Clock::millis(at), ask);
        let outcome = format!("{:?}", d.outcome);
        let wrote = d.write.is_some();
        if let Some(w) = d.write {
            *r = Some(w);
        }
        (outcome, wrote)
    };
    let lost = ("Lost".to_owned(), false);
    // Token 1 reads under fencing 1.
    let mut r = None;
    assert!(obtain_into(&mut r, 0, 1, read, false).starts_with("Acquired"));
    // An upgrade naming another fencing token, or by another token: Lost, nothing written.
    assert_eq!(change(&mut r, 10, 1, Mode::Exclusive, 7), lost);
    assert_eq!(change(&mut r, 10, 2, Mode::Exclusive, 1), lost);
    // Its own live share: upgraded.
    let (up, _) = change(&mut r, 10, 1, Mode::Exclusive, 1);
    assert_eq!(up, "Acquired { fencing: Fencing(2) }");
    // Its own live exclusive hold, downgraded by name; naming another fencing token, or by
    // another token: Lost.
    let mut down = r.clone();
    assert_eq!(change(&mut down, 20, 1, read, 7), lost);
    assert_eq!(change(&mut down, 20, 2, read, 2), lost);
    let (d, _) = change(&mut down, 20, 1, read, 2);
    assert_eq!(d, "Acquired { fencing: Fencing(2) }");
    // A downgrade of the exclusive hold once it expired (nobody took it): Lost, where an
    // obtain without `change` grants a fresh share.
    let expired = r.clone();
    assert_eq!(change(&mut r, 2_000, 1, read, 2), lost);
    assert_eq!(
        obtain_into(&mut r, 2_000, 1, read, false),
        "Acquired { fencing: Fencing(3) }"
    );
    // The share gone (the key forgotten, as after a force release): an upgrade is Lost,
    // where an obtain without `change` grants the write lock afresh.
    let mut gone = None;
    assert_eq!(change(&mut gone, 20, 1, Mode::Exclusive, 1), lost);
    assert!(obtain_into(&mut gone, 20, 1, Mode::Exclusive, false).starts_with("Acquired"));
    // A live exclusive hold asked to become exclusive, or a share asked to become shared:
    // not a change of the other mode, Lost.
    let mut held = expired;
    assert_eq!(change(&mut held, 10, 1, Mode::Exclusive, 2), lost);
}

/// Applies `d`'s write to `record`; returns the outcome.
fn apply<O>(record: &mut Option<Record<u8, ()>>, d: Decision<O, u8, ()>) -> O {
    if let Some(w) = d.write {
        *record = Some(w);
    }
    d.outcome
}

fn release_into(record: &mut Option<Record<u8, ()>>, at: u64, token: u8) -> (ReleaseOutcome, Wake) {
    let d = release(record.as_ref(), Clock::millis(at), &token, None);
    let wake = d.wake;
    (apply(record, d), wake)
}

fn obtain_into(
    record: &mut Option<Record<u8, ()>>,
    at: u64,
    token: u8,
    mode: Mode,
    queue: bool,
) -> String {
    let d = obtain(record.as_ref(), Clock::millis(at), ask(&token, mode, queue));
    let outcome = format!("{:?}", d.outcome);
    let write = d.write;
    if let Some(w) = write {
        *record = Some(w);
    }
    outcome
}

const SEM3: fn(u32) -> Mode = |w| Mode::Shared {
    capacity: 3,
    weight: w,
};

#[test]
fn a_semaphore_admits_up_to_its_capacity() {
    let mut r = None;
    assert!(obtain_into(&mut r, 0, 1, SEM3(2), false).starts_with("Acquired"));
    assert!(obtain_into(&mut r, 0, 2, SEM3(1), false).starts_with("Acquired"));
    let full = obtain_into(&mut r, 10, 3, SEM3(1), false);
    assert!(
        full.contains("Full") && full.contains("holders: 2"),
        "{full}"
    );
    // The room opens when the first hold ends: both end at 1000, remaining 990 ms.
    assert!(full.contains("990ms"), "{full}");
    assert!(obtain_into(&mut r, 10, 3, SEM3(1), false).contains("Full"));
    let refused = obtain_into(
        &mut r,
        10,
        3,
        Mode::Shared {
            capacity: 4,
            weight: 1,
        },
        false,
    );
    assert!(
        refused.contains("Capacity { stored: 3, asked: 4 }"),
        "{refused}"
    );
    assert!(obtain_into(&mut r, 10, 2, SEM3(2), false).contains("Weight"));
    assert!(obtain_into(&mut r, 10, 2, SEM3(1), false).contains("Reacquired { holds: 2 }"));
    // Token 1 releases its two permits: token 3 gets in, with a higher fencing token.
    assert_eq!(release_into(&mut r, 20, 1).0, ReleaseOutcome::Released);
    assert!(obtain_into(&mut r, 20, 3, SEM3(1), false).contains("Acquired { fencing: Fencing(3) }"));
    // Every hold has its own lease: at 1000 token 2's holds end, token 3's (from 20) live.
    // Token 2's reentrant obtain at 10 renewed it to 1010; token 3's runs to 1020.
    let view = format!("{:?}", view(r.as_ref(), Clock::millis(1_012)));
    assert!(
        view.contains("holds: [((), Fencing(3), 8ms, 1, 1)]"),
        "{view}"
    );
}

#[test]
fn readers_share_and_exclude_a_writer() {
    let mut r = None;
    assert!(obtain_into(&mut r, 0, 1, Mode::READ, false).starts_with("Acquired"));
    assert!(obtain_into(&mut r, 0, 2, Mode::READ, false).starts_with("Acquired"));
    let writer = obtain_into(&mut r, 0, 3, Mode::Exclusive, false);
    assert!(
        writer.contains("Shared") && writer.contains("holders: 2"),
        "{writer}"
    );
    // A reader asking to write is an upgrade, busy while the other reader holds on.
    let upgrade = obtain_into(&mut r, 0, 1, Mode::Exclusive, false);
    assert!(
        upgrade.contains("Shared") && upgrade.contains("holders: 1"),
        "{upgrade}"
    );
    // Once both readers expire, the writer gets it, and their late calls are lost.
    assert!(obtain_into(&mut r, 1_000, 3, Mode::Exclusive, false).starts_with("Acquired"));
    let late = prolong(
        r.as_ref(),
        Clock::millis(1_001),
        &1,
        Ttl::from_millis(10).unwrap(),
        Grace::or_ttl(None, Ttl::from_millis(10).unwrap()),
    );
    assert_eq!(late.outcome, ProlongOutcome::Lost);
    let reader = obtain_into(&mut r, 1_001, 1, Mode::READ, false);
    assert!(
        reader.contains("Held") && reader.contains("holders: 1"),
        "{reader}"
    );
}

#[test]
fn mode_changes_keep_the_hold_and_order_the_fencing() {
    let mut r = None;
    let fenced = |n: u64| {
        format!(
            "{:?}",
            Obtained::Acquired::<()> {
                fencing: Fencing(n)
            }
        )
    };
    assert_eq!(obtain_into(&mut r, 0, 1, Mode::Exclusive, false), fenced(1));
    // Taken twice: the reentrant hold goes before the mode changes.
    assert!(obtain_into(&mut r, 0, 1, Mode::Exclusive, false).contains("Reacquired"));
    assert!(obtain_into(&mut r, 0, 1, Mode::READ, false).contains("Refused(Mode"));
    assert_eq!(
        release_into(&mut r, 0, 1).0,
        ReleaseOutcome::Decremented { holds: 1 }
    );
    // Down: the fencing token kept, the ttl reset, and every waiter woken.
    let d = obtain(r.as_ref(), Clock::millis(500), ask(&1, Mode::READ, false));
    assert_eq!((format!("{:?}", d.outcome), d.wake), (fenced(1), Wake::All));
    r = d.write;
    assert!(obtain_into(&mut r, 600, 2, Mode::READ, false).starts_with("Acquired"));
    // Up: busy while another reader holds on; it queues, and keeps new readers out.
    let up = obtain_into(&mut r, 700, 1, Mode::Exclusive, true);
    assert!(up.contains("Shared") && up.contains("holders: 1"), "{up}");
    assert!(obtain_into(&mut r, 700, 3, Mode::READ, false).contains("WriterWaiting"));
    // Token 1's share lives on meanwhile: the downgrade reset its ttl to 1,500.
    let p = prolong(
        r.as_ref(),
        Clock::millis(1_400),
        &1,
        Ttl::from_millis(1_000).unwrap(),
        Grace::or_ttl(None, Ttl::from_millis(1_000).unwrap()),
    );
    assert_eq!(apply(&mut r, p), ProlongOutcome::Prolonged);
    // The last share but the upgrading writer's own leaves: the writer can get in, woken.
    assert_eq!(
        release_into(&mut r, 1_400, 2),
        (ReleaseOutcome::Released, Wake::All)
    );
    // Alone now: up, with a fresh fencing token above the other reader's.
    assert_eq!(
        obtain_into(&mut r, 1_500, 1, Mode::Exclusive, false),
        fenced(3)
    );
    assert!(obtain_into(&mut r, 1_500, 3, Mode::READ, false).contains("Held"));
    // Down to a semaphore: the first shared hold fixes its capacity.
    assert_eq!(obtain_into(&mut r, 1_600, 1, SEM3(2), false), fenced(3));
    assert!(obtain_into(&mut r, 1_600, 2, SEM3(1), false).starts_with("Acquired"));
    assert!(obtain_into(&mut r, 1_600, 3, SEM3(1), false).contains("Full"));
    assert!(obtain_into(&mut r, 1_600, 3, Mode::READ, false).contains("Refused(Capacity"));
}

#[test]
fn a_waiting_writer_keeps_new_readers_out() {
    let mut r = None;
    assert!(obtain_into(&mut r, 0, 1, Mode::READ, false).starts_with("Acquired"));
    // Without queueing, nothing is marked.
    assert!(obtain_into(&mut r, 0, 9, Mode::Exclusive, false).contains("Shared"));
    assert!(obtain_into(&mut r, 0, 2, Mode::READ, false).starts_with("Acquired"));
    // Queueing, the writer leaves its marker for its ttl.
    assert!(obtain_into(&mut r, 10, 9, Mode::Exclusive, true).contains("Shared"));
    let kept_out = obtain_into(&mut r, 10, 3, Mode::READ, false);
    assert!(
        kept_out.contains("WriterWaiting") && kept_out.contains("1s"),
        "{kept_out}"
    );
    // A second writer's queueing leaves the first one's marker alone.
    assert!(obtain_into(&mut r, 20, 8, Mode::Exclusive, true).contains("Shared"));
    assert_eq!(
        r.as_ref().and_then(|r| r.writer.as_ref()).map(|w| w.token),
        Some(9)
    );
    // Readers inside keep reentering; the marker outlives them; the writer gets in.
    assert!(obtain_into(&mut r, 20, 1, Mode::READ, false).contains("Reacquired"));
    // While another's share lives, a release wakes nobody (nobody could get in); the last
    // share out wakes every waiter (the writer may not be first in line).
    assert_eq!(
        release_into(&mut r, 30, 1),
        (ReleaseOutcome::Decremented { holds: 1 }, Wake::Nobody)
    );
    assert_eq!(
        release_into(&mut r, 30, 1),
        (ReleaseOutcome::Released, Wake::Nobody)
    );
    assert_eq!(
        release_into(&mut r, 30, 2),
        (ReleaseOutcome::Released, Wake::All)
    );
    assert!(obtain_into(&mut r, 30, 3, Mode::READ, false).contains("WriterWaiting"));
    assert!(obtain_into(&mut r, 40, 9, Mode::Exclusive, true).starts_with("Acquired"));
    assert_eq!(
        r.as_ref().and_then(|r| r.writer.as_ref()),
        None,
        "obtained: marker gone"
    );
    // One waiter is woken; a reader that gets in wakes the next, and so on.
    assert_eq!(
        release_into(&mut r, 50, 9),
        (ReleaseOutcome::Released, Wake::One)
    );
    let d = obtain(r.as_ref(), Clock::millis(50), ask(&3, Mode::READ, false));
    assert_eq!(
        d.wake,
        Wake::One,
        "a shared admission wakes the next in line"
    );
    r = d.write;
    // A writer that gives up takes its marker away; a dead one's lapses with its ttl.
    assert!(obtain_into(&mut r, 60, 9, Mode::Exclusive, true).contains("Shared"));
    assert_eq!(release_into(&mut r, 60, 9).0, ReleaseOutcome::Lost);
    assert!(obtain_into(&mut r, 60, 4, Mode::READ, false).starts_with("Acquired"));
    assert!(obtain_into(&mut r, 70, 9, Mode::Exclusive, true).contains("Shared"));
    assert!(obtain_into(&mut r, 1_069, 5, Mode::READ, false).contains("WriterWaiting"));
    assert!(obtain_into(&mut r, 1_070, 5, Mode::READ, false).starts_with("Acquired"));
}

/// A writer's marker outlives an exclusive hold that another token took in between (a
/// marker keeps only shared requests out): that hold's release keeps it, so a reader still
/// waits behind the writer. (A mutant that dropped it passed every test before this one.)
#[test]
fn a_marker_outlives_another_tokens_exclusive_hold() {
    let mut r = None;
    assert!(obtain_into(&mut r, 0, 1, Mode::READ, false).starts_with("Acquired"));
    assert!(obtain_into(&mut r, 0, 9, Mode::Exclusive, true).contains("Shared"));
    assert_eq!(release_into(&mut r, 10, 1).0, ReleaseOutcome::Released);
    // Another writer takes the key before the marked one.
    assert!(obtain_into(&mut r, 10, 2, Mode::Exclusive, false).starts_with("Acquired"));
    assert_eq!(
        release_into(&mut r, 20, 2),
        (ReleaseOutcome::Released, Wake::All)
    );
    assert!(obtain_into(&mut r, 20, 3, Mode::READ, false).contains("WriterWaiting"));
    assert!(obtain_into(&mut r, 20, 9, Mode::Exclusive, true).starts_with("Acquired"));
}

#[test]
fn an_expired_share_is_late_while_its_room_is_untaken() {
    let two = |w| Mode::Shared {
        capacity: 2,
        weight: w,
    };
    let mut r = None;
    let short = Ttl::from_millis(100).unwrap();
    let long = Ttl::from_millis(10_000).unwrap();
    let grace = Grace::or_ttl(None, long);
    let d = obtain(
        None,
        Clock::millis(0),
        Obtain {
            ttl: short,
            grace,
            ..ask(&1, two(1), false)
        },
    );
    let _ = apply(&mut r, d);
    assert!(obtain_into(&mut r, 200, 2, two(1), false).starts_with("Acquired"));
    let late = prolong(r.as_ref(), Clock::millis(300), &1, long, grace);
    assert_eq!(late.outcome, ProlongOutcome::ProlongedLate);
    let d = obtain(
        None,
        Clock::millis(0),
        Obtain {
            ttl: short,
            grace,
            ..ask(&1, two(1), false)
        },
    );
    let mut r2 = None;
    let _ = apply(&mut r2, d);
    assert!(
        obtain_into(&mut r2, 200, 2, two(2), false).starts_with("Acquired"),
        "1's room taken"
    );
    assert_eq!(
        prolong(r2.as_ref(), Clock::millis(300), &1, long, grace).outcome,
        ProlongOutcome::Lost
    );
    assert_eq!(
        release(r2.as_ref(), Clock::millis(300), &1, None).outcome,
        ReleaseOutcome::Lost
    );
}

#[test]
fn an_invalid_mode_is_refused_whatever_the_record() {
    for mode in [
        Mode::Shared {
            capacity: 0,
            weight: 1,
        },
        Mode::Shared {
            capacity: 2,
            weight: 3,
        },
        Mode::Shared {
            capacity: 2,
            weight: 0,
        },
    ] {
        let d = obtain(None, Clock::millis(0), ask(&1, mode, false));
        assert_eq!(d.outcome, Obtained::Refused(Refusal::Invalid(mode)));
        assert!(d.write.is_none());
        let e = Refusal::Invalid(mode).into_error("b");
        assert!(e.to_string().contains("permit"), "{e}");
    }
}

#[test]
fn a_share_is_forgotten_at_the_very_end_of_its_grace() {
    let share = Share {
        hold: Hold {
            token: 2u8,
            holder: (),
            holds: 1,
            expires: 500,
            forget: 1_000,
        },
        fencing: 7,
        weight: 1,
    };
    let record = Record::new(
        7,
        State::Shared(Shared {
            capacity: 2,
            holds: vec![share],
        }),
    );
    let other_capacity = Mode::Shared {
        capacity: 3,
        weight: 1,
    };
    // One tick before the end of its grace the share is remembered, and fixes the capacity.
    let before = obtain(
        Some(&record),
        Clock::millis(999),
        ask(&1, other_capacity, false),
    );
    assert!(
        matches!(before.outcome, Obtained::Refused(Refusal::Capacity { .. })),
        "{:?}",
        before.outcome
    );
    // At its end it says no more than a missing record would: another capacity is admitted.
    let at = obtain(
        Some(&record),
        Clock::millis(1_000),
        ask(&1, other_capacity, false),
    );
    assert!(
        matches!(at.outcome, Obtained::Acquired { .. }),
        "{:?}",
        at.outcome
    );
}
