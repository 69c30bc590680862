//! The shared holds' decisions at the very tick where a hold ends or is forgotten, and
//! the arithmetic of what a new share keeps: each test kills mutants of
//! `rules/shared.rs` that the other tests left alive (`cargo mutants`, see TESTING.md).

use std::time::Duration;

use super::*;

/// Token `t`'s share: `weight` permits, live until `expires`, remembered until `forget`
/// (times on `Clock::millis`).
fn share(t: u8, weight: u32, expires: u64, forget: u64) -> Share<u8, ()> {
    Share {
        hold: Hold {
            token: t,
            holder: (),
            holds: 1,
            expires,
            forget,
        },
        fencing: u64::from(t),
        weight,
    }
}

fn shared(capacity: u32, shares: Vec<Share<u8, ()>>) -> Record<u8, ()> {
    Record::new(
        9,
        State::Shared(Shared {
            capacity,
            holds: shares,
        }),
    )
}

/// The tokens and weights of the shares a decision wrote.
fn tokens(d: Option<Record<u8, ()>>) -> Vec<(u8, u32)> {
    match d.map(|r| r.state) {
        Some(State::Shared(s)) => s
            .holds
            .iter()
            .map(|sh| (sh.hold.token, sh.weight))
            .collect(),
        other => panic!("expected shares, got {other:?}"),
    }
}

fn sem(capacity: u32, weight: u32) -> Mode {
    Mode::Shared { capacity, weight }
}

fn long() -> (Ttl, Grace) {
    let ttl = Ttl::from_millis(10_000).unwrap();
    (ttl, Grace::or_ttl(None, ttl))
}

#[test]
fn a_share_is_live_until_the_tick_its_ttl_ends_and_remembered_until_its_grace_ends() {
    let r = shared(2, vec![share(1, 1, 500, 1_000)]);
    let (ttl, grace) = long();
    let prolonged = |at| prolong(Some(&r), Clock::millis(at), &1, ttl, grace).outcome;
    assert_eq!(prolonged(499), ProlongOutcome::Prolonged);
    assert_eq!(prolonged(500), ProlongOutcome::ProlongedLate);
    assert_eq!(prolonged(999), ProlongOutcome::ProlongedLate);
    assert_eq!(prolonged(1_000), ProlongOutcome::Lost);
    let released = |at| release(Some(&r), Clock::millis(at), &1, None).outcome;
    assert_eq!(released(499), ReleaseOutcome::Released);
    assert_eq!(released(500), ReleaseOutcome::ReleasedLate);
    // Beside a share that keeps the record remembered, 1's own share is forgotten at the
    // very end of its grace as well.
    let r = shared(2, vec![share(1, 1, 500, 1_000), share(2, 1, 5_000, 9_000)]);
    let prolonged = |at| prolong(Some(&r), Clock::millis(at), &1, ttl, grace).outcome;
    assert_eq!(prolonged(999), ProlongOutcome::ProlongedLate);
    assert_eq!(prolonged(1_000), ProlongOutcome::Lost);
}

#[test]
fn a_share_forgotten_at_this_tick_is_dropped_by_a_prolong_and_a_release() {
    // 1 lives on; 2 is forgotten at 1,000.
    let r = shared(3, vec![share(1, 1, 5_000, 9_000), share(2, 1, 500, 1_000)]);
    let (ttl, grace) = long();
    let d = prolong(Some(&r), Clock::millis(1_000), &1, ttl, grace);
    assert_eq!(tokens(d.write), vec![(1, 1)]);
    let d = release(Some(&r), Clock::millis(1_000), &1, None);
    assert_eq!(d.write.map(|w| w.state), Some(State::Free));
    // One tick earlier 2 is still remembered: it stays in the record.
    let d = release(Some(&r), Clock::millis(999), &1, None);
    assert_eq!(tokens(d.write), vec![(2, 1)]);
}

#[test]
fn a_release_cools_the_key_only_when_no_other_share_lives() {
    let cool = Some(Ttl::from_millis(700).unwrap());
    // Another share lives: no cooldown.
    let r = shared(
        3,
        vec![share(1, 1, 5_000, 9_000), share(2, 1, 5_000, 9_000)],
    );
    let d = release(Some(&r), Clock::millis(100), &1, cool);
    assert_eq!(tokens(d.write), vec![(2, 1)]);
    // The other share ended at this very tick (remembered still): the cooldown starts.
    let r = shared(3, vec![share(1, 1, 5_000, 9_000), share(2, 1, 100, 9_000)]);
    let d = release(Some(&r), Clock::millis(100), &1, cool);
    assert!(
        matches!(d.write.map(|w| w.state), Some(State::Cooling { .. })),
        "an expired share beside the released one starts no cooldown of its own"
    );
    // No cooldown asked: the expired share stays remembered, the key is not free.
    let d = release(Some(&r), Clock::millis(100), &1, None);
    assert_eq!(tokens(d.write), vec![(2, 1)]);
}

#[test]
fn a_release_beside_a_waiting_writer_wakes_all_once_no_other_share_lives() {
    let writer = Writer {
        token: 7u8,
        until: 9_000,
    };
    let with_writer = |shares| Record {
        writer: Some(writer.clone()),
        ..shared(3, shares)
    };
    // Another share lives on: nobody can get in, nobody is woken.
    let r = with_writer(vec![share(1, 1, 5_000, 9_000), share(2, 1, 5_000, 9_000)]);
    assert_eq!(
        release(Some(&r), Clock::millis(100), &1, None).wake,
        Wake::Nobody
    );
    // The other share ended at this very tick: the writer can get in, all are woken.
    let r = with_writer(vec![share(1, 1, 5_000, 9_000), share(2, 1, 100, 9_000)]);
    assert_eq!(
        release(Some(&r), Clock::millis(100), &1, None).wake,
        Wake::All
    );
}

#[test]
fn a_full_semaphore_names_the_share_whose_end_makes_room_for_the_weight_asked() {
    // 3 permits: 1 holds 2 until 5,000, 2 holds 1 until 2,000.
    let r = shared(
        3,
        vec![share(1, 2, 5_000, 9_000), share(2, 1, 2_000, 9_000)],
    );
    let busy = |weight| match obtain(Some(&r), Clock::millis(100), ask(&3, sem(3, weight))).outcome
    {
        Obtained::Busy {
            holder, remaining, ..
        } => (holder.is_some(), remaining),
        other => panic!("expected Busy, got {other:?}"),
    };
    // A weight of 1 fits once 2 ends; a weight of 2 only once 1 ends too.
    assert_eq!(busy(1), (true, Duration::from_millis(1_900)));
    assert_eq!(busy(2), (true, Duration::from_millis(4_900)));
    assert_eq!(busy(3), (true, Duration::from_millis(4_900)));
    // 4 permits: 1 holds 3 until 2,000, 2 holds 1 until 5,000. The whole semaphore fits
    // only once both ended: 2's end, not 1's.
    let r = shared(
        4,
        vec![share(1, 3, 2_000, 9_000), share(2, 1, 5_000, 9_000)],
    );
    match obtain(Some(&r), Clock::millis(100), ask(&3, sem(4, 4))).outcome {
        Obtained::Busy { remaining, .. } => assert_eq!(remaining, Duration::from_millis(4_900)),
        other => panic!("expected Busy, got {other:?}"),
    }
}

fn ask(token: &u8, mode: Mode) -> Obtain<'_, u8, ()> {
    let (ttl, grace) = long();
    Obtain {
        token,
        holder: &(),
        ttl,
        grace,
        fencing_floor: 1,
        mode,
        queue: false,
        change: None,
    }
}

#[test]
fn a_new_share_keeps_the_expired_ones_that_fit_oldest_first() {
    let at = Clock::millis(1_000);
    // 2 ended at this very tick, 3 before; each remembered. A capacity of 2 and a new
    // share of 1 leave room for one of them: the first in the record.
    let r = shared(2, vec![share(2, 1, 1_000, 9_000), share(3, 1, 900, 9_000)]);
    assert_eq!(
        tokens(obtain(Some(&r), at, ask(&1, sem(2, 1))).write),
        vec![(2, 1), (1, 1)]
    );
    // A capacity of 1: none fits beside the new share, not even the one that ended now.
    let r = shared(1, vec![share(2, 1, 1_000, 9_000)]);
    assert_eq!(
        tokens(obtain(Some(&r), at, ask(&1, sem(1, 1))).write),
        vec![(1, 1)]
    );
    // Weights add up: 4 permits, a new 1, expired 2 and 2: only the first fits.
    let r = shared(4, vec![share(2, 2, 900, 9_000), share(3, 2, 900, 9_000)]);
    assert_eq!(
        tokens(obtain(Some(&r), at, ask(&1, sem(4, 1))).write),
        vec![(2, 2), (1, 1)]
    );
    // A share forgotten at this very tick is gone, and the asker's own expired share is
    // replaced, never kept beside its new one.
    let r = shared(3, vec![share(2, 1, 500, 1_000), share(1, 1, 900, 9_000)]);
    assert_eq!(
        tokens(obtain(Some(&r), at, ask(&1, sem(3, 1))).write),
        vec![(1, 1)]
    );
}
