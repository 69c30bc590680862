//! The rules of the answers: whom a `Busy` names, what a call of a hold that was taken
//! over answers, and which errors a call may end with.

use std::collections::{BTreeMap, HashMap};

use super::{ms, Hold, Op};
use crate::history::record::{At, Call, OpId, Return};

/// A `Busy` that names a client none of whose calls on the key may have held it while the
/// `Busy`'s call was in flight.
pub(super) fn busy_names(ops: &BTreeMap<OpId, Op>) -> Option<(String, Vec<OpId>, String)> {
    // When each hold was surely given back: its release returned.
    let mut given_back: HashMap<OpId, At> = HashMap::new();
    for op in ops.values() {
        if let (Call::Release { hold }, Some((at, Return::Released(_)))) = (&op.call, &op.returned)
        {
            given_back.insert(*hold, *at);
        }
    }
    for (id, op) in ops {
        let Some((
            returned,
            Return::Busy {
                holder: Some(named),
            },
        )) = &op.returned
        else {
            continue;
        };
        let may_have_held = ops.iter().any(|(other, o)| {
            o.client == *named
                && o.key == op.key
                && o.call.asks().is_some()
                && o.invoked <= *returned
                && match &o.returned {
                    // A call that waited may have held the key in flight (a grant that
                    // arrived past its ttl, or whose reply was lost, is given back and the
                    // wait goes on; a set gives back what it took when a later key is
                    // busy) until it returned; one attempt answered Busy held nothing.
                    Some((at, Return::Busy { .. })) => {
                        o.call.holds_in_flight() && *at >= op.invoked
                    }
                    _ => given_back.get(other).is_none_or(|end| *end >= op.invoked),
                }
        });
        if !may_have_held {
            return Some((
                op.key.clone(),
                vec![*id],
                format!(
                    "call #{id} of c{} was answered Busy naming c{named} as the holder, but no \
                     obtain of c{named} may have held the key between {} and {}",
                    op.client,
                    ms(op.invoked),
                    ms(*returned)
                ),
            ));
        }
    }
    None
}

/// A prolong or release of a hold answered as if the hold were there, sent after another
/// client was granted the key over it.
pub(super) fn answered_after_taken(
    by_key: &BTreeMap<&str, Vec<Hold>>,
    ops: &BTreeMap<OpId, Op>,
) -> Option<(String, Vec<OpId>, String)> {
    for (key, holds) in by_key {
        let of: HashMap<OpId, &Hold> = holds.iter().map(|h| (h.op, h)).collect();
        // The hold a hold was first, before its mode changes: holds of one token share it.
        let root = |mut op: OpId| {
            while let Some(from) = of.get(&op).and_then(|h| h.changed_from) {
                op = from;
            }
            op
        };
        let same_token = |a: &Hold, b: &Hold| root(a.op) == root(b.op);
        for (id, op) in ops {
            let (Call::Prolong { hold } | Call::Release { hold }, Some((_, answer))) =
                (&op.call, &op.returned)
            else {
                continue;
            };
            let kept = match answer {
                Return::Released(o) | Return::Prolonged(o) => o != "Lost",
                _ => false,
            };
            let Some(h) = of.get(hold) else { continue };
            if !kept {
                continue;
            }
            let taken = holds.iter().find(|b| {
                b.op != h.op
                    && (b.exclusive() || h.exclusive())
                    && b.invoked > h.obtained
                    && b.obtained < op.invoked
                    && !same_token(b, h)
            });
            if let Some(b) = taken {
                return Some((
                    (*key).to_owned(),
                    vec![h.op, b.op, *id],
                    format!(
                        "call #{id} ({:?}) of hold #{} answered {answer:?}, but c{} was granted \
                         the key over it (hold #{}, asked for at {}, obtained at {}) before the \
                         call was sent at {}: it must be Lost",
                        op.call,
                        h.op,
                        b.client,
                        b.op,
                        ms(b.invoked),
                        ms(b.obtained),
                        ms(op.invoked)
                    ),
                ));
            }
        }
    }
    None
}

/// A call that failed with an error the faults do not explain.
pub(super) fn unexpected_error(ops: &BTreeMap<OpId, Op>) -> Option<(String, Vec<OpId>, String)> {
    ops.iter().find_map(|(id, op)| {
        let Some((at, Return::Failed { kind, message })) = &op.returned else {
            return None;
        };
        let explained = match kind.as_str() {
            "Unavailable" | "ExpiredOnArrival" | "Lost" => true,
            "InvalidInput" => matches!(op.call, Call::Change { .. }),
            _ => false,
        };
        (!explained).then(|| {
            (
                op.key.clone(),
                vec![*id],
                format!(
                    "call #{id} of c{} ({:?}) failed at {} with {kind}, which no fault \
                     explains: {message}",
                    op.client,
                    op.call,
                    ms(*at)
                ),
            )
        })
    })
}

/// An inspection that missed a hold relied on throughout the call, or that showed a hold
/// the history gives to another client, or a client that cannot have held the key.
pub(super) fn inspections(
    by_key: &BTreeMap<&str, Vec<Hold>>,
    ops: &BTreeMap<OpId, Op>,
    losses: &[(At, At)],
) -> Option<(String, Vec<OpId>, String)> {
    for (id, op) in ops {
        let (Call::Inspect, Some((returned, Return::Inspected { holds: seen }))) =
            (&op.call, &op.returned)
        else {
            continue;
        };
        let holds = by_key.get(op.key.as_str()).map_or(&[][..], Vec::as_slice);
        // Relied on from before the call was sent to after it answered, and no data loss
        // under way since the hold was asked for: the backend had it live throughout.
        let missed = holds.iter().find(|h| {
            h.relied()
                .is_some_and(|(from, to)| from <= op.invoked && to >= *returned)
                && !losses
                    .iter()
                    .any(|(s, d)| *d >= h.invoked && *s <= *returned)
                && !seen.iter().any(|(_, f)| *f == h.fencing)
        });
        if let Some(h) = missed {
            return Some((
                op.key.clone(),
                vec![h.op, *id],
                format!(
                    "inspection #{id} of c{} (from {} to {}) showed {seen:?} (client, fencing), \
                     without hold #{} of c{} (fencing {}), relied on from {} to {}",
                    op.client,
                    ms(op.invoked),
                    ms(*returned),
                    h.op,
                    h.client,
                    h.fencing,
                    ms(h.obtained),
                    ms(h.relied_until.unwrap_or_default())
                ),
            ));
        }
        for (client, fencing) in seen {
            let Some(client) = client else { continue };
            if let Some(h) = holds.iter().find(|h| h.fencing == *fencing) {
                if h.client != *client {
                    return Some((
                        op.key.clone(),
                        vec![h.op, *id],
                        format!(
                            "inspection #{id} of c{} showed fencing {fencing} held by c{client}, \
                             but hold #{} with that token is c{}'s",
                            op.client, h.op, h.client
                        ),
                    ));
                }
            }
            let may_have_held = ops.values().any(|o| {
                o.client == *client
                    && o.key == op.key
                    && o.call.asks().is_some()
                    && o.invoked <= *returned
            });
            if !may_have_held {
                return Some((
                    op.key.clone(),
                    vec![*id],
                    format!(
                        "inspection #{id} of c{} showed c{client} holding the key, but c{client} \
                         had not asked for it by {}",
                        op.client,
                        ms(*returned)
                    ),
                ));
            }
        }
    }
    None
}
