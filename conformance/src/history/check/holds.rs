//! The rules of the holds themselves: exclusion and capacity among the holds relied on
//! at once, the fencing tokens' order, and the fence's.

use std::collections::{BTreeMap, HashMap};

use super::{ms, Hold, Op, Rule};
use crate::history::record::{Ask, At, OpId};

/// Two holds relied on at once where one is exclusive, or shares beyond the capacity:
/// within each span between data losses.
pub(super) fn overlaps(holds: &[Hold]) -> Option<(Rule, Vec<OpId>, String)> {
    let mut relied: Vec<(&Hold, At, At)> = holds
        .iter()
        .filter(|h| h.epoch.is_some())
        .filter_map(|h| h.relied().map(|(s, e)| (h, s, e)))
        .collect();
    relied.sort_by_key(|(h, s, _)| (*s, h.op));
    for (i, (b, b_start, b_end)) in relied.iter().enumerate() {
        // Every earlier-started hold still relied on after `b` was obtained.
        let live: Vec<&(&Hold, At, At)> = relied[..i]
            .iter()
            .filter(|(a, _, a_end)| a.epoch == b.epoch && *a_end > *b_start)
            .collect();
        if let Some((a, a_start, a_end)) = live
            .iter()
            .find(|(a, ..)| a.exclusive() || b.exclusive())
            .copied()
        {
            return Some((
                Rule::Exclusion,
                vec![a.op, b.op],
                format!(
                    "c{} relied on hold #{} ({:?}, fencing {}) from {} to {}, while c{} relied on \
                     hold #{} ({:?}, fencing {}) from {} to {}",
                    a.client,
                    a.op,
                    a.ask,
                    a.fencing,
                    ms(*a_start),
                    ms(*a_end),
                    b.client,
                    b.op,
                    b.ask,
                    b.fencing,
                    ms(*b_start),
                    ms(*b_end),
                ),
            ));
        }
        if let Ask::Shared { capacity, weight } = b.ask {
            let taken: u64 = live
                .iter()
                .map(|(a, ..)| match a.ask {
                    Ask::Shared { weight, .. } => u64::from(weight),
                    _ => 0,
                })
                .sum::<u64>()
                + u64::from(weight);
            if taken > u64::from(capacity) {
                let mut involved: Vec<OpId> = live.iter().map(|(a, ..)| a.op).collect();
                involved.push(b.op);
                return Some((
                    Rule::Capacity,
                    involved,
                    format!(
                        "at {} (when hold #{} of c{} was obtained) the shares relied on took {taken} \
                         of {capacity} permits",
                        ms(*b_start),
                        b.op,
                        b.client
                    ),
                ));
            }
        }
    }
    None
}

/// A hold obtained after another's obtain returned, with a fencing token no higher.
pub(super) fn fencing_order(holds: &[Hold]) -> Option<(Vec<OpId>, String)> {
    let mut by_return: Vec<&Hold> = holds.iter().collect();
    by_return.sort_by_key(|h| (h.obtained, h.op));
    let mut by_invoke: Vec<&Hold> = holds.iter().collect();
    by_invoke.sort_by_key(|h| (h.invoked, h.op));
    let fencing_of: HashMap<OpId, u64> = holds.iter().map(|h| (h.op, h.fencing)).collect();
    let mut highest: Option<&Hold> = None;
    let mut next = 0;
    for b in by_invoke {
        // A downgrade keeps the token of the hold it changed: equal to the highest is
        // right for it, lower is not.
        let kept = !b.exclusive()
            && b.changed_from
                .is_some_and(|from| fencing_of.get(&from) == Some(&b.fencing));
        while next < by_return.len() && by_return[next].obtained < b.invoked {
            let a = by_return[next];
            if highest.is_none_or(|h| a.fencing > h.fencing) {
                highest = Some(a);
            }
            next += 1;
        }
        if let Some(a) = highest {
            if b.fencing < a.fencing || (b.fencing == a.fencing && !kept) {
                return Some((
                    vec![a.op, b.op],
                    format!(
                        "hold #{} of c{} was obtained at {} with fencing {}; hold #{} of c{}, \
                         asked for at {}, after that, got fencing {}, not higher",
                        a.op,
                        a.client,
                        ms(a.obtained),
                        a.fencing,
                        b.op,
                        b.client,
                        ms(b.invoked),
                        b.fencing
                    ),
                ));
            }
        }
    }
    None
}

/// An accepted write with a token below one the fence had accepted on the same key.
pub(super) fn fence_order(
    holds: &HashMap<OpId, &Hold>,
    ops: &BTreeMap<OpId, Op>,
    writes: &mut [(OpId, At, bool)],
) -> Option<(String, Vec<OpId>, String)> {
    writes.sort_by_key(|(hold, at, _)| (*at, *hold));
    let mut highest: HashMap<&str, &Hold> = HashMap::new();
    for (hold, at, accepted) in writes.iter() {
        let (Some(h), Some(op)) = (holds.get(hold), ops.get(hold)) else {
            continue;
        };
        if !*accepted {
            continue;
        }
        if let Some(top) = highest.get(op.key.as_str()) {
            if h.fencing < top.fencing {
                return Some((
                    op.key.clone(),
                    vec![top.op, h.op],
                    format!(
                        "the fence accepted fencing {} of hold #{} at {}, after it had accepted \
                         fencing {} of hold #{}",
                        h.fencing,
                        h.op,
                        ms(*at),
                        top.fencing,
                        top.op
                    ),
                ));
            }
        }
        let top = highest.entry(op.key.as_str()).or_insert(h);
        if h.fencing > top.fencing {
            *top = h;
        }
    }
    None
}
