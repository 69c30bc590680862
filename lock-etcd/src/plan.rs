//! What to write for a decision: the record the rules returned, compared with the one that
//! was read ([`Seen`]), as puts, deletes and the leases the puts need.
//!
//! A hold whose times the rules left as read keeps its keys and their leases (its count
//! or holder may still change: its keys are rewritten on the leases they have). A hold
//! whose times moved (taken, renewed, prolonged late) gets two fresh leases: its ttl for
//! the `H/` key and the ttl plus the grace for the `G/` key. A hold the rules dropped loses
//! both keys. The cooldown and the writer's marker go the same way.

use lock_core::backend::rules::{Hold, State, Wake};
use lock_core::HolderInfo;

use crate::layout::{Base, CoolValue, FenceValue, HoldValue, Permits, Wakes, WriterValue};
use crate::read::{Rec, Seen, NOW};

const NS_PER_MS: u64 = 1_000_000;

/// The lease a put binds its key to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// The lease the key has now (the key exists: the transaction checks it).
    Keep,
    /// The plan's lease number `n` in [`Plan::leases`], granted before the transaction.
    New(usize),
    /// None: the key stays until deleted.
    Never,
}

/// One key to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Put {
    /// The key.
    pub(crate) key: String,
    /// Its value (JSON).
    pub(crate) value: Vec<u8>,
    /// Its lease.
    pub(crate) lease: Lease,
}

/// Everything one decision writes, in one transaction.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The ttls, in whole seconds, of the leases to grant (one per distinct ttl).
    pub(crate) leases: Vec<i64>,
    /// The keys to write.
    pub(crate) puts: Vec<Put>,
    /// The keys to delete.
    pub(crate) deletes: Vec<String>,
}

impl Plan {
    /// Whether the decision changed nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.deletes.is_empty()
    }

    /// A lease of at least `ms` (whole seconds, at least one), shared with the plan's
    /// other keys of the same length.
    fn lease(&mut self, ms: u64) -> Lease {
        let secs = i64::try_from(ms.div_ceil(1_000).max(1)).unwrap_or(i64::MAX);
        let n = match self.leases.iter().position(|&s| s == secs) {
            Some(n) => n,
            None => {
                self.leases.push(secs);
                self.leases.len() - 1
            }
        };
        Lease::New(n)
    }

    /// Announces whom the decision wakes to every process's watch: `F` written with it (its
    /// token kept, or the one the plan writes). Nothing for [`Wake::Nobody`].
    pub(crate) fn announce(&mut self, base: &Base, seen: &Seen, new: &Rec, wake: Wake) {
        let wake = match wake {
            Wake::Nobody => return,
            Wake::One => Wakes::One,
            Wake::All => Wakes::All,
        };
        let value = FenceValue {
            fencing: new.fencing.max(seen.fence.unwrap_or(0)),
            wake: Some(wake),
        };
        let key = base.fence();
        self.puts.retain(|p| p.key != key);
        self.put(key, &value, Lease::Never);
    }

    fn put(&mut self, key: String, value: &impl serde::Serialize, lease: Lease) {
        let value = serde_json::to_vec(value).expect("lock data serializes");
        self.puts.push(Put { key, value, lease });
    }
}

/// One hold of the record the rules returned.
struct Target<'r> {
    hold: &'r Hold<String, HolderInfo>,
    fencing: u64,
    shared: Option<Permits>,
}

/// The milliseconds from [`NOW`] to `at`, which the rules set as now plus whole ms.
fn ms_until(at: u64) -> u64 {
    at.saturating_sub(NOW) / NS_PER_MS
}

impl Seen {
    /// What writing `new` over what was read takes.
    ///
    /// # Errors
    /// When the rules set a hold to end before now: a bug, said as such.
    pub(crate) fn plan(&self, base: &Base, new: &Rec) -> Result<Plan, String> {
        let mut plan = Plan::default();
        let targets: Vec<Target<'_>> = match &new.state {
            State::Held(hold) => vec![Target {
                hold,
                fencing: new.fencing,
                shared: None,
            }],
            State::Shared(shared) => shared
                .holds
                .iter()
                .map(|s| Target {
                    hold: &s.hold,
                    fencing: s.fencing,
                    shared: Some(Permits {
                        capacity: shared.capacity,
                        weight: s.weight,
                    }),
                })
                .collect(),
            State::Free | State::Cooling { .. } => Vec::new(),
        };
        for t in &targets {
            let token = t.hold.token.as_str();
            let old = self.holds.get(token);
            let mut value = HoldValue {
                holder: t.hold.holder.clone(),
                holds: t.hold.holds,
                fencing: t.fencing,
                shared: t.shared,
                ttl_ms: 0,
                grace_ms: 0,
                renewed: self.revision,
            };
            match old {
                Some(old) if old.times(self.revision) == (t.hold.expires, t.hold.forget) => {
                    value.ttl_ms = old.value.ttl_ms;
                    value.grace_ms = old.value.grace_ms;
                    value.renewed = old.value.renewed;
                    if value != old.value {
                        if old.live {
                            plan.put(base.live(token), &value, Lease::Keep);
                        }
                        if old.evidence {
                            plan.put(base.evidence(token), &value, Lease::Keep);
                        }
                    }
                }
                _ => {
                    if t.hold.expires <= NOW {
                        return Err(format!(
                            "the rules wrote a hold that ends before now ({} ns before)",
                            NOW - t.hold.expires
                        ));
                    }
                    value.ttl_ms = ms_until(t.hold.expires);
                    value.grace_ms = t.hold.forget.saturating_sub(t.hold.expires) / NS_PER_MS;
                    let live = plan.lease(value.ttl_ms);
                    let evidence = plan.lease(value.ttl_ms.saturating_add(value.grace_ms));
                    plan.put(base.live(token), &value, live);
                    plan.put(base.evidence(token), &value, evidence);
                }
            }
        }
        for (token, old) in &self.holds {
            if targets.iter().any(|t| t.hold.token == *token) {
                continue;
            }
            if old.live {
                plan.deletes.push(base.live(token));
            }
            if old.evidence {
                plan.deletes.push(base.evidence(token));
            }
        }
        if new.fencing > self.fence.unwrap_or(0) {
            let fence = FenceValue {
                fencing: new.fencing,
                wake: None,
            };
            plan.put(base.fence(), &fence, Lease::Never);
        }
        self.plan_cooling(base, new, &mut plan);
        self.plan_writer(base, new, &mut plan);
        Ok(plan)
    }

    fn plan_cooling(&self, base: &Base, new: &Rec, plan: &mut Plan) {
        let until = match new.state {
            State::Cooling { until } if until > NOW => Some(until),
            _ => None,
        };
        match (until, &self.cooling) {
            (None, None) => {}
            (None, Some(_)) => plan.deletes.push(base.cooling()),
            (Some(until), old) => {
                let kept = old.is_some_and(|c| crate::read::ends(c.ms) == until);
                let value = CoolValue {
                    fencing: new.fencing,
                    ms: match old {
                        Some(c) if kept => c.ms,
                        _ => ms_until(until),
                    },
                };
                if !kept {
                    let lease = plan.lease(value.ms);
                    plan.put(base.cooling(), &value, lease);
                } else if old.as_ref() != Some(&value) {
                    plan.put(base.cooling(), &value, Lease::Keep);
                }
            }
        }
    }

    fn plan_writer(&self, base: &Base, new: &Rec, plan: &mut Plan) {
        let marker = new.writer.as_ref().filter(|w| w.until > NOW);
        match (marker, &self.writer) {
            (None, None) => {}
            (None, Some(_)) => plan.deletes.push(base.writer()),
            (Some(w), old) => {
                let kept = old
                    .as_ref()
                    .is_some_and(|o| o.token == w.token && crate::read::ends(o.ms) == w.until);
                if !kept {
                    let value = WriterValue {
                        token: w.token.clone(),
                        ms: ms_until(w.until),
                    };
                    let lease = plan.lease(value.ms);
                    plan.put(base.writer(), &value, lease);
                }
            }
        }
    }
}
