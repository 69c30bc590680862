//! The progress rule: a waiter for wake-ups is not left asleep beside a free key.

use std::collections::{BTreeMap, HashMap};

use super::{ms, Op, PROGRESS_BOUND};
use crate::history::record::{At, Call, OpId, Return};

/// The obtains of `key`.
pub(super) fn obtains_of<'a>(
    ops: &'a BTreeMap<OpId, Op>,
    key: &'a str,
) -> impl Iterator<Item = (&'a OpId, &'a Op)> + 'a {
    ops.iter()
        .filter(move |(_, o)| o.key == key && o.call.asks().is_some())
}

/// A release that left its key free, a waiter for wake-ups in flight across it, and
/// nobody admitted within [`PROGRESS_BOUND`] after it.
pub(super) fn progress(
    ops: &BTreeMap<OpId, Op>,
    faults: &[At],
    checked: &mut usize,
) -> Option<(String, Vec<OpId>, String)> {
    // When each hold was surely given back.
    let given_back: HashMap<OpId, At> = ops
        .values()
        .filter_map(|o| match (&o.call, &o.returned) {
            (Call::Release { hold }, Some((at, Return::Released(_)))) => Some((*hold, *at)),
            _ => None,
        })
        .collect();
    for (release, op) in ops {
        let (Call::Release { hold }, Some((freed, Return::Released(outcome)))) =
            (&op.call, &op.returned)
        else {
            continue;
        };
        if outcome != "Released" {
            continue;
        }
        let by = *freed + PROGRESS_BOUND;
        if faults
            .iter()
            .any(|f| *f + At::from_secs(1) >= op.invoked && *f <= by)
        {
            continue;
        }
        // Free: no other obtain of the key may hold it once the release is done. One that
        // returned `Obtained` before the release was sent must have been given back
        // before then; one that failed may hold it; one still waiting, or that returned
        // `Obtained` after the release was sent, is a waiter (admitted, if it returned).
        let free = obtains_of(ops, &op.key).all(|(id, o)| {
            id == hold
                || o.invoked > *freed
                || match &o.returned {
                    Some((at, Return::Busy { .. })) => {
                        !o.call.holds_in_flight() || *at <= op.invoked
                    }
                    Some((at, Return::Obtained { .. })) => {
                        *at > op.invoked || given_back.get(id).is_some_and(|b| *b <= op.invoked)
                    }
                    Some(_) => false,
                    None => matches!(o.call, Call::AwaitWake { .. }),
                }
        });
        if !free {
            continue;
        }
        let waiting = obtains_of(ops, &op.key).any(|(_, o)| {
            matches!(o.call, Call::AwaitWake { .. })
                && o.invoked < op.invoked
                && o.returned.as_ref().is_none_or(|(at, _)| *at > *freed)
        });
        if !waiting {
            continue;
        }
        *checked += 1;
        let admitted = obtains_of(ops, &op.key).any(|(_, o)| {
            matches!(o.returned, Some((at, Return::Obtained { .. })) if at > op.invoked && at <= by)
        });
        if admitted {
            continue;
        }
        let sleeper = obtains_of(ops, &op.key).find(|(_, o)| {
            matches!(o.call, Call::AwaitWake { .. })
                && o.invoked < op.invoked
                && o.returned.as_ref().is_none_or(|(at, _)| *at > by)
        });
        if let Some((waiter, w)) = sleeper {
            let ended = match &w.returned {
                Some((at, r)) => format!("returned {r:?} at {}", ms(*at)),
                None => "never returned".to_owned(),
            };
            return Some((
                op.key.clone(),
                vec![*hold, *waiter],
                format!(
                    "hold #{hold} was released at {} (the release returned), leaving the key \
                     free; c{}'s obtain #{waiter}, waiting since {}, {ended}, and nobody was \
                     admitted within {PROGRESS_BOUND:?}: the release woke nobody who took it \
                     (release call #{release})",
                    ms(*freed),
                    w.client,
                    ms(w.invoked)
                ),
            ));
        }
    }
    None
}
