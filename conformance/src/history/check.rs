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
//! - [`Rule::InspectSeesTheHolds`]: an inspection shows every hold relied on throughout
//!   the call (no data loss under way since it was asked for), and each hold it shows is the one with
//!   that fencing token the history knows, by the same client, who may have held the key;
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

mod answers;
mod excerpt;
mod holds;
mod progress;

use answers::{answered_after_taken, busy_names, inspections, unexpected_error};
use excerpt::excerpt;
use holds::{fence_order, fencing_order, overlaps};
use progress::progress;

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
    /// An inspection missed a hold relied on throughout it, or showed one nobody had.
    InspectSeesTheHolds,
    /// A prolong or release answered as if its hold were still there after another client
    /// was granted the key over it.
    AnsweredForAHoldThatWasTaken,
}

/// How long after a release that leaves its key free a waiter for wake-ups may still be
/// waiting while nobody has been admitted: a wake-up's delivery and the waiter's attempt,
/// with room for a machine loaded by a whole test run (CI runs sixteen etcd suites at
/// once on two cores). Waiters for wake-ups poll every 6 s besides.
pub const PROGRESS_BOUND: At = At::from_millis(2500);

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
    // The rules that name their key, in the order they are checked.
    let broke = |rule: Rule, found: Option<(String, Vec<OpId>, String)>| match found {
        Some((key, involved, message)) => Err(violation(rule, &key, &involved, message, &excerpt)),
        None => Ok(()),
    };
    broke(Rule::FenceOrder, fence_order(&holds, &ops, &mut writes))?;
    broke(
        Rule::AnsweredForAHoldThatWasTaken,
        answered_after_taken(&by_key, &ops),
    )?;
    broke(Rule::UnexpectedError, unexpected_error(&ops))?;
    broke(
        Rule::InspectSeesTheHolds,
        inspections(&by_key, &ops, &losses),
    )?;
    broke(Rule::BusyNamesAHolder, busy_names(&ops))?;
    broke(Rule::Progress, progress(&ops, &faults, &mut verdict.wakes))?;
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
