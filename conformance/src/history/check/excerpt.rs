//! The part of a history that shows a violation.

use std::collections::{BTreeMap, HashMap};

use super::Op;
use crate::history::record::{At, Call, Event, History, OpId};

/// The events of `involved` (and of the releases of those holds), and the faults, from
/// the first of their invokes to the last of their events, in time order.
pub(super) fn excerpt(history: &History, ops: &BTreeMap<OpId, Op>, involved: &[OpId]) -> History {
    let mut wanted: Vec<OpId> = involved.to_vec();
    for (id, op) in ops {
        if let Call::Release { hold } = op.call {
            if involved.contains(&hold) {
                wanted.push(*id);
            }
        }
    }
    // Of a hold's claims and of its writes, the first and the last say how long it was
    // relied on.
    let mut claimed: HashMap<(OpId, bool), (At, At)> = HashMap::new();
    for e in &history.events {
        if let Event::Claim { hold, at } | Event::Write { hold, at, .. } = e {
            let write = matches!(e, Event::Write { .. });
            let span = claimed.entry((*hold, write)).or_insert((*at, *at));
            *span = (span.0.min(*at), span.1.max(*at));
        }
    }
    let ends = |hold: &OpId, write: bool, at: &At| {
        claimed
            .get(&(*hold, write))
            .is_some_and(|(first, last)| at == first || at == last)
    };
    let mine = |e: &Event| match e {
        Event::Invoke { op, .. } | Event::Return { op, .. } | Event::Cancel { op, .. } => {
            wanted.contains(op)
        }
        Event::Claim { hold, at } => wanted.contains(hold) && ends(hold, false, at),
        Event::Write { hold, at, .. } => wanted.contains(hold) && ends(hold, true, at),
        Event::Lost { hold, .. } => wanted.contains(hold),
        Event::Fault { .. } => false,
    };
    let mut events: Vec<Event> = history.events.iter().filter(|e| mine(e)).cloned().collect();
    let from = events.iter().map(Event::at).min().unwrap_or_default();
    let to = events.iter().map(Event::at).max().unwrap_or_default();
    events.extend(
        history
            .events
            .iter()
            .filter(|e| matches!(e, Event::Fault { .. }) && e.at() >= from && e.at() <= to)
            .cloned(),
    );
    events.sort_by_key(Event::at);
    History { events }
}
