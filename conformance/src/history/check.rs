//! The checker: a history split by key, and the rules every key's part must keep.
//!
//! A hold is *relied on* from the return of the obtain that made it to the last instant
//! its holder claimed it (the clock read before the holder checked that its guard was
//! neither lost nor out of time). Those intervals are what the checker holds the backend
//! to: the client layer promises that a guard is never valid after the backend could
//! have granted its key to anyone else, so no two of them may overlap where the contract
//! forbids it. A backend that ends a hold early, frees it on a stale release, admits one
//! share too many or answers late leaves two such intervals overlapping.
//!
//! The rules, each a [`Rule`]:
//! - [`Rule::Exclusion`]: an exclusive hold (a leadership too) is relied on alone;
//! - [`Rule::Capacity`]: the shares relied on at any instant fit the key's capacity;
//! - [`Rule::FencingOrder`]: a hold obtained after another's obtain returned has a higher
//!   fencing token (a leadership a higher term), across lost data too;
//! - [`Rule::FenceOrder`]: the tokens the resource's fence accepted never go down;
//! - [`Rule::BusyNamesAHolder`]: a `Busy` names a client that may have held the key
//!   while the call was in flight;
//! - [`Rule::AnsweredForAHoldThatWasTaken`]: a prolong or release of a hold is `Lost` once
//!   another client was granted the key over it (an obtain asked for after the hold's
//!   obtain returned, and answered before the call was sent; one of the two exclusive),
//!   never `Prolonged`, `ProlongedLate`, `Released` or `ReleasedLate`;
//! - [`Rule::UnexpectedError`]: a call fails only as the faults explain: the backend
//!   unavailable, a grant that arrived past its ttl, a hold that is gone (`Lost`), a mode
//!   change refused before any I/O (`InvalidInput`); never `Protocol`, `Corrupt`,
//!   `PermissionDenied`, `Config`, `StaleToken` or `InvalidInput` for any other call;
//! - [`Rule::Progress`]: once a release leaves the key free (no other obtain of it may
//!   hold it), a waiter that waits for wake-ups ([`Call::AwaitWake`]) gets the key, or
//!   someone else does, within [`PROGRESS_BOUND`]; not checked near a data loss, which
//!   may lose a wake-up (the waiter's fallback poll then costs it time, and nothing else).
//!   The network faults ([`Fault::Freeze`], [`Fault::Cut`]) are taken to reach only the
//!   clients behind them, never the waiters for wake-ups: so the workload runs them.
//!
//! Data loss (a server restart without persistence) is a declared fault: holds made before
//! it may overlap holds made after it (the fencing tokens are what still protects the
//! resource), so exclusion and capacity are checked within each span between losses, and
//! a hold whose obtain straddles a loss is left out of them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::record::{line, Ask, At, Call, Event, Fault, History, OpId, Return};

/// A rule of the history checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Two holds relied on at once, one of them exclusive.
    Exclusion,
    /// Shares relied on at once beyond the key's capacity.
    Capacity,
    /// A later hold with a fencing token no higher than an earlier one's.
    FencingOrder,
    /// The resource's fence accepted a token lower than one it had accepted before.
    FenceOrder,
    /// A `Busy` named a client that cannot have held the key then.
    BusyNamesAHolder,
    /// A waiter slept on while the key it waited for was free.
    Progress,
    /// A call failed with an error no injected fault explains.
    UnexpectedError,
    /// A prolong or release answered as if its hold were still there after another client
    /// was granted the key over it.
    AnsweredForAHoldThatWasTaken,
}

/// How long after a release that leaves its key free a waiter for wake-ups may still be
/// waiting while nobody has been admitted: a wake-up's delivery and the waiter's attempt,
/// with room for a machine loaded by a whole test run. Waiters for wake-ups poll every
/// 3 s besides.
pub const PROGRESS_BOUND: At = At::from_millis(1500);

/// A rule a history broke: which, on which key, the calls involved, and in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The key.
    pub key: String,
    /// The calls involved (holds by the obtain that made them).
    pub ops: Vec<OpId>,
    /// What happened, in words.
    pub message: String,
    /// The part of the history that shows it: the events of the calls involved and the
    /// faults between them, in time order.
    pub excerpt: History,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:?} on key {:?}: {}", self.rule, self.key, self.message)?;
        write!(f, "the events that show it:")?;
        for e in &self.excerpt.events {
            write!(f, "\n  {}", line(e))?;
        }
        Ok(())
    }
}

/// What a clean history held, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Calls invoked.
    pub calls: usize,
    /// Holds obtained.
    pub holds: usize,
    /// Claims checked.
    pub claims: usize,
    /// Writes through the fence.
    pub writes: usize,
    /// Keys.
    pub keys: usize,
    /// Faults injected.
    pub faults: usize,
    /// Releases that left their key free while a waiter for wake-ups waited: the moments
    /// the progress rule checked.
    pub wakes: usize,
}

/// One call, as the history shows it.
#[derive(Debug, Clone)]
struct Op {
    client: usize,
    key: String,
    call: Call,
    invoked: At,
    returned: Option<(At, Return)>,
}

/// One hold: an obtain that returned `Obtained`.
#[derive(Debug, Clone, Copy)]
struct Hold {
    op: OpId,
    /// For a mode change, the hold it changed.
    changed_from: Option<OpId>,
    client: usize,
    ask: Ask,
    fencing: u64,
    invoked: At,
    obtained: At,
    /// The last claim, if any came after the obtain returned.
    relied_until: Option<At>,
    /// The span between data losses its obtain fell in; `None` when one straddled it.
    epoch: Option<usize>,
}

impl Hold {
    fn exclusive(&self) -> bool {
        !matches!(self.ask, Ask::Shared { .. })
    }

    /// The interval it was relied on, if it was.
    fn relied(&self) -> Option<(At, At)> {
        self.relied_until.map(|end| (self.obtained, end))
    }
}

/// Checks `history` against every [`Rule`], key by key.
///
/// # Errors
/// The first violation found (by rule, in the order above, then by key).
pub fn check(history: &History) -> Result<Verdict, Violation> {
    let mut ops: BTreeMap<OpId, Op> = BTreeMap::new();
    let mut claims: HashMap<OpId, At> = HashMap::new();
    let mut writes: Vec<(OpId, At, bool)> = Vec::new();
    let mut losses: Vec<(At, At)> = Vec::new();
    let mut faults: Vec<At> = Vec::new();
    let mut verdict = Verdict::default();
    for e in &history.events {
        match e {
            Event::Invoke {
                op,
                client,
                key,
                call,
                at,
            } => {
                verdict.calls += 1;
                ops.insert(
                    *op,
                    Op {
                        client: *client,
                        key: key.clone(),
                        call: call.clone(),
                        invoked: *at,
                        returned: None,
                    },
                );
            }
            Event::Return { op, result, at } => {
                if let Some(o) = ops.get_mut(op) {
                    o.returned = Some((*at, result.clone()));
                }
            }
            Event::Claim { hold, at } => {
                verdict.claims += 1;
                let last = claims.entry(*hold).or_insert(*at);
                *last = (*last).max(*at);
            }
            Event::Write { hold, accepted, at } => {
                verdict.writes += 1;
                writes.push((*hold, *at, *accepted));
            }
            Event::Fault { fault, at } => {
                verdict.faults += 1;
                if let Fault::DataLoss { done } = fault {
                    // The network faults cut the clients behind them off, never the
                    // waiters for wake-ups; a data loss reaches everyone.
                    faults.push(*at);
                    faults.push(*done);
                    losses.push((*at, *done));
                }
            }
            Event::Cancel { .. } | Event::Lost { .. } => {}
        }
    }
    // The span between losses a hold's obtain fell in, if no loss overlapped the obtain.
    let epoch = |invoked: At, obtained: At| {
        let straddled = losses.iter().any(|(s, d)| *s <= obtained && *d >= invoked);
        (!straddled).then(|| losses.iter().filter(|(_, d)| *d < invoked).count())
    };

    let mut by_key: BTreeMap<&str, Vec<Hold>> = BTreeMap::new();
    for (id, op) in &ops {
        let (Some(ask), Some((obtained, Return::Obtained { fencing }))) =
            (op.call.asks(), &op.returned)
        else {
            continue;
        };
        let epoch = epoch(op.invoked, *obtained);
        let relied_until = claims.get(id).copied().filter(|c| c >= obtained);
        by_key.entry(&op.key).or_default().push(Hold {
            op: *id,
            changed_from: match op.call {
                Call::Change { from, .. } => Some(from),
                _ => None,
            },
            client: op.client,
            ask,
            fencing: *fencing,
            invoked: op.invoked,
            obtained: *obtained,
            relied_until,
            epoch,
        });
    }
    verdict.keys = ops
        .values()
        .map(|o| o.key.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    verdict.holds = by_key.values().map(Vec::len).sum();

    let excerpt = |involved: &[OpId]| excerpt(history, &ops, involved);
    for (key, holds) in &by_key {
        if let Some((rule, involved, message)) = overlaps(holds) {
            return Err(violation(rule, key, &involved, message, &excerpt));
        }
    }
    for (key, holds) in &by_key {
        if let Some((involved, message)) = fencing_order(holds) {
            return Err(violation(
                Rule::FencingOrder,
                key,
                &involved,
                message,
                &excerpt,
            ));
        }
    }
    let holds: HashMap<OpId, &Hold> = by_key.values().flatten().map(|h| (h.op, h)).collect();
    if let Some((key, involved, message)) = fence_order(&holds, &ops, &mut writes) {
        return Err(violation(
            Rule::FenceOrder,
            &key,
            &involved,
            message,
            &excerpt,
        ));
    }
    if let Some((key, involved, message)) = answered_after_taken(&by_key, &ops) {
        return Err(violation(
            Rule::AnsweredForAHoldThatWasTaken,
            &key,
            &involved,
            message,
            &excerpt,
        ));
    }
    if let Some((key, involved, message)) = unexpected_error(&ops) {
        return Err(violation(
            Rule::UnexpectedError,
            &key,
            &involved,
            message,
            &excerpt,
        ));
    }
    if let Some((key, involved, message)) = busy_names(&ops) {
        return Err(violation(
            Rule::BusyNamesAHolder,
            &key,
            &involved,
            message,
            &excerpt,
        ));
    }
    if let Some((key, involved, message)) = progress(&ops, &faults, &mut verdict.wakes) {
        return Err(violation(
            Rule::Progress,
            &key,
            &involved,
            message,
            &excerpt,
        ));
    }
    Ok(verdict)
}

fn violation(
    rule: Rule,
    key: &str,
    involved: &[OpId],
    message: String,
    excerpt: &dyn Fn(&[OpId]) -> History,
) -> Violation {
    Violation {
        rule,
        key: key.to_owned(),
        ops: involved.to_vec(),
        message,
        excerpt: excerpt(involved),
    }
}

fn ms(at: At) -> String {
    format!("{:.3} ms", at.as_secs_f64() * 1000.0)
}

/// Two holds relied on at once where one is exclusive, or shares beyond the capacity:
/// within each span between data losses.
fn overlaps(holds: &[Hold]) -> Option<(Rule, Vec<OpId>, String)> {
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
fn fencing_order(holds: &[Hold]) -> Option<(Vec<OpId>, String)> {
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
fn fence_order(
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

/// A `Busy` that names a client none of whose calls on the key may have held it while the
/// `Busy`'s call was in flight.
fn busy_names(ops: &BTreeMap<OpId, Op>) -> Option<(String, Vec<OpId>, String)> {
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
fn answered_after_taken(
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
fn unexpected_error(ops: &BTreeMap<OpId, Op>) -> Option<(String, Vec<OpId>, String)> {
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

/// The obtains of `key`.
fn obtains_of<'a>(
    ops: &'a BTreeMap<OpId, Op>,
    key: &'a str,
) -> impl Iterator<Item = (&'a OpId, &'a Op)> + 'a {
    ops.iter()
        .filter(move |(_, o)| o.key == key && o.call.asks().is_some())
}

/// A release that left its key free, a waiter for wake-ups in flight across it, and
/// nobody admitted within [`PROGRESS_BOUND`] after it.
fn progress(
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

/// The events of `involved` (and of the releases of those holds), and the faults, from
/// the first of their invokes to the last of their events, in time order.
fn excerpt(history: &History, ops: &BTreeMap<OpId, Op>, involved: &[OpId]) -> History {
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
