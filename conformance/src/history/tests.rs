//! The checker on hand-written histories: each rule accepts what the contract allows and
//! refuses what it forbids, one history per case.

use std::time::Duration;

use super::*;

fn ms(n: u64) -> At {
    Duration::from_millis(n)
}

/// A history written call by call.
#[derive(Default)]
struct Script {
    events: Vec<Event>,
    next: OpId,
}

impl Script {
    /// A hold of `client` on `key`: obtain invoked at `invoked`, returned at `obtained`
    /// with `fencing`, claimed last at `until`.
    fn hold(
        &mut self,
        client: usize,
        key: &str,
        ask: Ask,
        (invoked, obtained, until): (u64, u64, u64),
        fencing: u64,
    ) -> OpId {
        let op = self.obtain(client, key, ask, invoked);
        self.events.push(Event::Return {
            op,
            result: Return::Obtained { fencing },
            at: ms(obtained),
        });
        self.events.push(Event::Claim {
            hold: op,
            at: ms(obtained),
        });
        self.events.push(Event::Claim {
            hold: op,
            at: ms(until),
        });
        op
    }

    fn obtain(&mut self, client: usize, key: &str, ask: Ask, at: u64) -> OpId {
        let op = self.next;
        self.next += 1;
        self.events.push(Event::Invoke {
            op,
            client,
            key: key.into(),
            call: Call::Obtain { ask, wait: false },
            at: ms(at),
        });
        op
    }

    fn release(&mut self, hold: OpId, client: usize, key: &str, (invoked, returned): (u64, u64)) {
        let op = self.next;
        self.next += 1;
        self.events.push(Event::Invoke {
            op,
            client,
            key: key.into(),
            call: Call::Release { hold },
            at: ms(invoked),
        });
        self.events.push(Event::Return {
            op,
            result: Return::Released("Released".into()),
            at: ms(returned),
        });
    }

    fn busy(&mut self, client: usize, key: &str, (invoked, returned): (u64, u64), holder: usize) {
        let op = self.obtain(client, key, Ask::Exclusive, invoked);
        self.events.push(Event::Return {
            op,
            result: Return::Busy {
                holder: Some(holder),
            },
            at: ms(returned),
        });
    }

    fn write(&mut self, hold: OpId, at: u64, accepted: bool) {
        self.events.push(Event::Write {
            hold,
            accepted,
            at: ms(at),
        });
    }

    fn check(&self) -> Result<Verdict, Violation> {
        check(&History {
            events: self.events.clone(),
        })
    }
}

const X: Ask = Ask::Exclusive;
const TWO_OF_THREE: Ask = Ask::Shared {
    capacity: 3,
    weight: 2,
};
const ONE_OF_THREE: Ask = Ask::Shared {
    capacity: 3,
    weight: 1,
};

#[test]
fn holds_one_after_another_check_out() {
    let mut s = Script::default();
    let a = s.hold(0, "k", X, (0, 5, 40), 10);
    s.release(a, 0, "k", (41, 45));
    s.hold(1, "k", X, (2, 46, 80), 11);
    let verdict = s.check().expect("one after the other");
    assert_eq!(verdict.holds, 2);
    assert_eq!(verdict.claims, 4);
}

#[test]
fn two_exclusive_holds_relied_on_at_once_break_exclusion() {
    let mut s = Script::default();
    s.hold(0, "k", X, (0, 5, 40), 10);
    s.hold(1, "k", X, (2, 30, 80), 11);
    let v = s.check().expect_err("overlap");
    assert_eq!(v.rule, Rule::Exclusion);
    assert_eq!(v.ops, vec![0, 1]);
    assert!(v.to_string().contains("Exclusion"), "{v}");
}

#[test]
fn holds_on_different_keys_never_meet() {
    let mut s = Script::default();
    s.hold(0, "k", X, (0, 5, 40), 10);
    s.hold(1, "other", X, (2, 30, 80), 11);
    s.check().expect("other key");
}

#[test]
fn a_hold_never_claimed_after_its_obtain_is_not_relied_on() {
    let mut s = Script::default();
    let op = s.obtain(0, "k", X, 0);
    s.events.push(Event::Return {
        op,
        result: Return::Obtained { fencing: 10 },
        at: ms(5),
    });
    s.hold(1, "k", X, (6, 7, 80), 11);
    s.check().expect("an unclaimed hold");
}

#[test]
fn a_read_beside_a_write_breaks_exclusion() {
    let read = Ask::Shared {
        capacity: u32::MAX,
        weight: 1,
    };
    let mut s = Script::default();
    s.hold(0, "rw", read, (0, 5, 40), 10);
    s.hold(1, "rw", read, (1, 6, 40), 11);
    s.check().expect("two readers");
    s.hold(2, "rw", X, (2, 20, 30), 12);
    assert_eq!(s.check().expect_err("a writer").rule, Rule::Exclusion);
}

#[test]
fn shares_within_the_capacity_check_out_and_one_past_it_does_not() {
    let mut s = Script::default();
    s.hold(0, "s", TWO_OF_THREE, (0, 5, 40), 10);
    s.hold(1, "s", ONE_OF_THREE, (1, 6, 40), 11);
    s.check().expect("3 of 3");
    s.hold(2, "s", ONE_OF_THREE, (2, 20, 30), 12);
    let v = s.check().expect_err("4 of 3");
    assert_eq!(v.rule, Rule::Capacity);
    assert_eq!(v.ops, vec![0, 1, 2]);
}

#[test]
fn a_share_that_ended_before_the_next_began_leaves_room() {
    let mut s = Script::default();
    s.hold(0, "s", TWO_OF_THREE, (0, 5, 19), 10);
    s.hold(1, "s", TWO_OF_THREE, (1, 20, 40), 11);
    s.check().expect("one after the other");
}

#[test]
fn a_later_hold_with_a_lower_token_breaks_the_fencing_order() {
    let mut s = Script::default();
    let a = s.hold(0, "k", X, (0, 5, 10), 10);
    s.release(a, 0, "k", (11, 12));
    let b = s.hold(1, "k", X, (13, 14, 20), 9);
    let v = s.check().expect_err("lower token later");
    assert_eq!(v.rule, Rule::FencingOrder);
    assert_eq!(v.ops, vec![a, b]);
}

#[test]
fn obtains_in_flight_together_may_take_tokens_in_either_order() {
    let mut s = Script::default();
    // Shares asked for together: each may be applied first.
    s.hold(0, "s", ONE_OF_THREE, (0, 5, 10), 11);
    s.hold(1, "s", ONE_OF_THREE, (1, 6, 10), 10);
    s.check().expect("concurrent obtains");
}

#[test]
fn the_fencing_order_holds_across_lost_data_and_exclusion_does_not() {
    let mut s = Script::default();
    s.hold(0, "k", X, (0, 5, 60), 10);
    s.events.push(Event::Fault {
        fault: Fault::DataLoss { done: ms(22) },
        at: ms(20),
    });
    s.hold(1, "k", X, (25, 30, 80), 11);
    s.check().expect("an overlap across lost data is declared");
    s.hold(2, "k", X, (90, 95, 100), 11);
    assert_eq!(
        s.check().expect_err("the token did not grow").rule,
        Rule::FencingOrder
    );
}

#[test]
fn an_obtain_that_straddles_lost_data_is_left_out_of_exclusion() {
    let mut s = Script::default();
    s.hold(0, "k", X, (10, 25, 60), 10);
    s.events.push(Event::Fault {
        fault: Fault::DataLoss { done: ms(22) },
        at: ms(20),
    });
    s.hold(1, "k", X, (23, 30, 80), 11);
    s.check().expect("straddled");
    // Without the loss, the same holds overlap.
    s.events.retain(|e| !matches!(e, Event::Fault { .. }));
    assert_eq!(s.check().expect_err("no loss").rule, Rule::Exclusion);
}

#[test]
fn the_fence_accepting_a_lower_token_breaks_the_fence_order() {
    let mut s = Script::default();
    let a = s.hold(0, "k", ONE_OF_THREE, (0, 5, 40), 10);
    let b = s.hold(1, "k", ONE_OF_THREE, (1, 6, 40), 11);
    s.write(b, 10, true);
    s.write(a, 11, false);
    s.check().expect("the fence refused the lower token");
    s.write(a, 12, true);
    let v = s.check().expect_err("the fence took it");
    assert_eq!(v.rule, Rule::FenceOrder);
    assert_eq!(v.ops, vec![b, a]);
}

#[test]
fn a_busy_must_name_a_client_that_may_have_held_the_key() {
    let mut s = Script::default();
    let a = s.hold(0, "k", X, (0, 5, 40), 10);
    s.busy(1, "k", (10, 12), 0);
    s.release(a, 0, "k", (41, 45));
    s.check().expect("c0 held it");
    // Named after c0's release returned: c0 held nothing then.
    s.busy(1, "k", (50, 52), 0);
    let v = s.check().expect_err("c0 had given it back");
    assert_eq!(v.rule, Rule::BusyNamesAHolder);
    // Named before c2 ever asked.
    let mut s = Script::default();
    s.busy(1, "k", (1, 2), 2);
    s.hold(2, "k", X, (5, 6, 7), 10);
    assert_eq!(
        s.check().expect_err("c2 had not asked").rule,
        Rule::BusyNamesAHolder
    );
}

#[test]
fn a_violation_shows_its_events_and_the_timeline_marks_them() {
    let mut s = Script::default();
    s.hold(0, "k", X, (0, 5, 40), 10);
    s.hold(1, "k", X, (2, 30, 80), 11);
    s.hold(2, "other", X, (2, 30, 80), 12);
    let history = History {
        events: s.events.clone(),
    };
    let v = check(&history).expect_err("overlap");
    assert!(
        v.excerpt.events.iter().all(|e| match e {
            Event::Invoke { key, .. } => key == "k",
            _ => true,
        }),
        "the excerpt keeps to the key: {v}"
    );
    let page = render(&history, &v.key, Some(&v));
    assert_eq!(page.matches("class=\"violation\"").count(), 2, "{page}");
    assert!(page.contains("Exclusion"));
}

#[test]
fn a_waiter_asleep_beside_a_free_key_breaks_progress() {
    let wake = |s: &mut Script, client: usize, at: u64| {
        let op = s.next;
        s.next += 1;
        s.events.push(Event::Invoke {
            op,
            client,
            key: "w".into(),
            call: Call::AwaitWake { ask: X },
            at: ms(at),
        });
        op
    };
    let mut s = Script::default();
    let a = s.hold(0, "w", X, (0, 1, 90), 10);
    let waiter = wake(&mut s, 1, 20);
    s.release(a, 0, "w", (100, 101));
    s.events.push(Event::Return {
        op: waiter,
        result: Return::Obtained { fencing: 11 },
        at: ms(150),
    });
    let verdict = s.check().expect("woken at once");
    assert_eq!(verdict.wakes, 1);
    // The same waiter, woken only by its fallback poll six seconds later.
    let Some(Event::Return { at, .. }) = s.events.last_mut() else {
        unreachable!()
    };
    *at = ms(6100);
    let v = s.check().expect_err("asleep beside a free key");
    assert_eq!(v.rule, Rule::Progress);
    assert_eq!(v.ops, vec![a, waiter]);
    // Data lost near the release may lose the wake-up: not checked then.
    s.events.push(Event::Fault {
        fault: Fault::DataLoss { done: ms(99) },
        at: ms(98),
    });
    assert_eq!(s.check().expect("a fault beside it").wakes, 0);
}

#[test]
fn a_downgrade_keeps_its_token_and_an_upgrade_needs_a_fresh_one() {
    let read = Ask::Shared {
        capacity: u32::MAX,
        weight: 1,
    };
    let change = |s: &mut Script,
                  from: OpId,
                  ask: Ask,
                  (invoked, returned, until): (u64, u64, u64),
                  fencing: u64| {
        let op = s.next;
        s.next += 1;
        s.events.push(Event::Invoke {
            op,
            client: 0,
            key: "rw".into(),
            call: Call::Change { from, ask },
            at: ms(invoked),
        });
        s.events.push(Event::Return {
            op,
            result: Return::Obtained { fencing },
            at: ms(returned),
        });
        s.events.push(Event::Claim {
            hold: op,
            at: ms(until),
        });
        op
    };
    let mut s = Script::default();
    let write = s.hold(0, "rw", X, (0, 1, 10), 10);
    let down = change(&mut s, write, read, (11, 12, 20), 10);
    s.check().expect("a downgrade keeps the write lock's token");
    change(&mut s, down, X, (21, 22, 30), 10);
    let v = s.check().expect_err("an upgrade with the old token");
    assert_eq!(v.rule, Rule::FencingOrder);
}

#[test]
fn a_release_answered_released_after_the_key_was_taken_over_is_wrong() {
    let mut s = Script::default();
    let a = s.hold(0, "k", X, (0, 1, 50), 10);
    let b = s.hold(1, "k", X, (60, 70, 80), 11);
    s.release(a, 0, "k", (90, 91));
    let v = s.check().expect_err("Released after c1 took the key");
    assert_eq!(v.rule, Rule::AnsweredForAHoldThatWasTaken);
    assert_eq!(v.ops[..2], [a, b]);
    // Lost is the right answer.
    let Some(Event::Return { result, .. }) = s.events.last_mut() else {
        unreachable!()
    };
    *result = Return::Released("Lost".into());
    s.check().expect("Lost");
    // A release sent before the other obtain returned may have landed first.
    let mut s = Script::default();
    let a = s.hold(0, "k", X, (0, 1, 50), 10);
    s.hold(1, "k", X, (60, 95, 99), 11);
    s.release(a, 0, "k", (90, 91));
    s.check().expect("the release may have landed first");
}

#[test]
fn a_waiting_obtain_that_ended_busy_may_have_held_the_key_in_flight() {
    let mut s = Script::default();
    // c2 waited from 0 to 100 ms and gave up; c1's Busy at 40 ms named c2: a grant of
    // c2's that arrived past its ttl was held, then given back, in between.
    let waited = s.obtain(2, "k", X, 0);
    if let Some(Event::Invoke { call, .. }) = s.events.last_mut() {
        *call = Call::Obtain { ask: X, wait: true };
    }
    s.events.push(Event::Return {
        op: waited,
        result: Return::Busy { holder: None },
        at: ms(100),
    });
    s.busy(1, "k", (40, 41), 2);
    s.check().expect("c2 may have held the key while it waited");
    // Named after c2 had given up: c2 held nothing then.
    s.busy(1, "k", (120, 121), 2);
    assert_eq!(s.check().expect_err("after").rule, Rule::BusyNamesAHolder);
}

#[test]
fn an_error_no_fault_explains_is_a_violation() {
    let failed = |kind: &str| Return::Failed {
        kind: kind.into(),
        message: "what it said".into(),
    };
    let mut s = Script::default();
    let op = s.obtain(0, "k", X, 0);
    s.events.push(Event::Return {
        op,
        result: failed("Unavailable"),
        at: ms(5),
    });
    s.check()
        .expect("an unavailable backend is a fault's doing");
    let Some(Event::Return { result, .. }) = s.events.last_mut() else {
        unreachable!()
    };
    *result = failed("Protocol");
    let v = s.check().expect_err("a protocol error");
    assert_eq!(v.rule, Rule::UnexpectedError);
    assert!(v.message.contains("what it said"), "{v}");
}

#[test]
fn an_inspection_shows_the_holds_relied_on_throughout_it() {
    let inspect = |s: &mut Script,
                   client: usize,
                   (invoked, returned): (u64, u64),
                   holds: Vec<(Option<usize>, u64)>| {
        let op = s.next;
        s.next += 1;
        s.events.push(Event::Invoke {
            op,
            client,
            key: "k".into(),
            call: Call::Inspect,
            at: ms(invoked),
        });
        s.events.push(Event::Return {
            op,
            result: Return::Inspected { holds },
            at: ms(returned),
        });
    };
    let mut s = Script::default();
    s.hold(0, "k", X, (0, 5, 50), 10);
    inspect(&mut s, 1, (10, 12), vec![(Some(0), 10)]);
    s.check().expect("the holder shown");
    // Free while c0 relied on its hold throughout the call.
    inspect(&mut s, 1, (20, 22), Vec::new());
    assert_eq!(
        s.check().expect_err("missed").rule,
        Rule::InspectSeesTheHolds
    );
    // Free once c0's last claim was before the call returned: it may have ended.
    let mut s = Script::default();
    s.hold(0, "k", X, (0, 5, 50), 10);
    inspect(&mut s, 1, (49, 51), Vec::new());
    s.check().expect("the hold may have ended");
    // c1 shown with c0's token.
    inspect(&mut s, 2, (10, 12), vec![(Some(1), 10)]);
    assert_eq!(
        s.check().expect_err("wrong client").rule,
        Rule::InspectSeesTheHolds
    );
    // Free after a data loss under way since the hold was asked for: it took the hold.
    let mut s = Script::default();
    s.hold(0, "k", X, (0, 5, 50), 10);
    s.events.push(Event::Fault {
        fault: Fault::DataLoss { done: ms(8) },
        at: ms(3),
    });
    inspect(&mut s, 1, (20, 22), Vec::new());
    s.check().expect("the loss took the hold");
}
