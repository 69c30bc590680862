//! A lock as lock-core's rules see it, read from its keys at one revision.
//!
//! etcd has no clock a client can read, and this backend never judges expiry by the
//! client's: which keys exist says it all. A hold whose `H/` key exists is live; one with
//! only its `G/` key left expired and is within its grace; one with neither is gone. The
//! rules still decide on times, so the read makes up a clock: every decision happens at
//! [`NOW`], a live hold ends its ttl from now (less one nanosecond, so that a hold renewed
//! for the same ttl is told apart from one left alone), an expired one ended before now
//! (the earlier renewed, the earlier it ended) and its grace ends just after. The same
//! goes for the cooldown and the writer's marker. The times the rules write back are read
//! the same way when the decision is written: a time they moved is a lease to grant.

use std::collections::BTreeMap;

use lock_core::backend::rules::{Clock, Hold, Record, Share, Shared, State, Writer};
use lock_core::HolderInfo;

use crate::layout::{Base, CoolValue, FenceValue, HoldValue, Slot, WriterValue};

/// The made-up instant of every decision, in ns.
pub(crate) const NOW: u64 = 1 << 62;

/// The clock of every decision.
pub(crate) const fn clock() -> Clock {
    Clock::nanos(NOW)
}

const NS_PER_MS: u64 = 1_000_000;

/// The record the rules decide on.
pub(crate) type Rec = Record<String, HolderInfo>;

/// One hold's keys as read.
#[derive(Debug, Clone)]
pub(crate) struct SeenHold {
    /// The `H/` key is there: the hold is live.
    pub(crate) live: bool,
    /// The `G/` key is there.
    pub(crate) evidence: bool,
    /// What the keys keep (the live key's, when both are there).
    pub(crate) value: HoldValue,
}

impl SeenHold {
    /// The hold's end and the end of its grace on the made-up clock, read at `revision`.
    /// Of two live holds of one ttl, the one renewed first ends first: a nanosecond earlier
    /// per revision since (at most 100 µs), far below the ms the rules count in.
    pub(crate) fn times(&self, revision: u64) -> (u64, u64) {
        if self.live {
            let age = revision.saturating_sub(self.value.renewed).min(100_000);
            let expires = ends(self.value.ttl_ms).saturating_sub(age);
            (
                expires,
                expires.saturating_add(self.value.grace_ms.saturating_mul(NS_PER_MS)),
            )
        } else {
            // Before now, in the order the holds were renewed; the grace ends just after now.
            (NOW / 2 + self.value.renewed.min(NOW / 4), NOW + 1)
        }
    }

    fn hold(&self, token: &str, revision: u64) -> Hold<String, HolderInfo> {
        let (expires, forget) = self.times(revision);
        Hold {
            token: token.to_owned(),
            holder: self.value.holder.clone(),
            holds: self.value.holds,
            expires,
            forget,
        }
    }
}

/// Where something of `ms` that is still running ends on the made-up clock.
pub(crate) fn ends(ms: u64) -> u64 {
    NOW.saturating_add(ms.saturating_mul(NS_PER_MS))
        .saturating_sub(1)
}

/// A lock's keys at one revision, and the record they make.
#[derive(Debug)]
pub(crate) struct Seen {
    /// The revision of the read.
    pub(crate) revision: u64,
    /// Every key read, with its `mod_revision` and its lease (0: none): the transaction
    /// that writes the decision requires each unchanged (and still there: an expired lease
    /// deletes its keys), and a renewal keeps the leases alive (`renew.rs`).
    pub(crate) keys: Vec<(String, i64, i64)>,
    /// The holds, by token digest.
    pub(crate) holds: BTreeMap<String, SeenHold>,
    /// The cooldown.
    pub(crate) cooling: Option<CoolValue>,
    /// The waiting writer's marker.
    pub(crate) writer: Option<WriterValue>,
    /// The last fencing token issued, when `F` is there.
    pub(crate) fence: Option<u64>,
    /// The record the rules decide on (`None`: no key of the lock exists).
    pub(crate) record: Option<Rec>,
}

/// One key of a range read: its name, value, `mod_revision` and lease (0: none).
pub(crate) type Kv<'a> = (&'a str, &'a [u8], i64, i64);

impl Seen {
    /// The lock under `base` from the keys a range read at `revision` returned.
    ///
    /// # Errors
    /// What is wrong with a key, when one cannot be read (the caller says it is corrupt).
    pub(crate) fn read<'a>(
        base: &Base,
        revision: u64,
        kvs: impl IntoIterator<Item = Kv<'a>>,
    ) -> Result<Seen, String> {
        let mut seen = Seen {
            revision,
            keys: Vec::new(),
            holds: BTreeMap::new(),
            cooling: None,
            writer: None,
            fence: None,
            record: None,
        };
        for (key, value, mod_revision, lease) in kvs {
            let Some(slot) = base.slot(key) else { continue };
            seen.keys.push((key.to_owned(), mod_revision, lease));
            let bad =
                |e: serde_json::Error| format!("the key {key} does not hold a lock's data ({e})");
            match slot {
                Slot::Live(token) | Slot::Evidence(token) => {
                    let value: HoldValue = serde_json::from_slice(value).map_err(bad)?;
                    let live = matches!(slot, Slot::Live(_));
                    let hold = seen.holds.entry(token.to_owned()).or_insert(SeenHold {
                        live: false,
                        evidence: false,
                        value: value.clone(),
                    });
                    if live {
                        hold.live = true;
                        hold.value = value;
                    } else {
                        hold.evidence = true;
                    }
                }
                Slot::Cooling => seen.cooling = Some(serde_json::from_slice(value).map_err(bad)?),
                Slot::Writer => seen.writer = Some(serde_json::from_slice(value).map_err(bad)?),
                Slot::Fence => {
                    let fence: FenceValue = serde_json::from_slice(value).map_err(bad)?;
                    seen.fence = Some(fence.fencing);
                }
            }
        }
        if !seen.keys.is_empty() {
            seen.record = Some(seen.record(base)?);
        }
        Ok(seen)
    }

    fn record(&self, base: &Base) -> Result<Rec, String> {
        let writer = self.writer.as_ref().map(|w| Writer {
            token: w.token.clone(),
            until: ends(w.ms),
        });
        let mut exclusive = self.holds.iter().filter(|(_, h)| h.value.shared.is_none());
        let shared: Vec<_> = self
            .holds
            .iter()
            .filter_map(|(t, h)| h.value.shared.map(|p| (t, h, p)))
            .collect();
        let mixed = || {
            format!(
                "the lock's keys under {} hold more than one exclusive hold, or exclusive and \
                 shared holds at once, which this backend never writes; delete them (etcdctl \
                 del --prefix '{}') to free the lock",
                base.as_str(),
                base.as_str()
            )
        };
        let (fencing, state) = match (exclusive.next(), shared.is_empty()) {
            (Some((token, hold)), true) => {
                if exclusive.next().is_some() {
                    return Err(mixed());
                }
                (
                    hold.value.fencing,
                    State::Held(hold.hold(token, self.revision)),
                )
            }
            (Some(_), false) => return Err(mixed()),
            (None, false) => {
                let capacity = shared[0].2.capacity;
                let mut holds: Vec<Share<String, HolderInfo>> = shared
                    .iter()
                    .map(|(token, hold, permits)| Share {
                        hold: hold.hold(token, self.revision),
                        fencing: hold.value.fencing,
                        weight: permits.weight,
                    })
                    .collect();
                // Admission order: fencing tokens grow with every admission.
                holds.sort_by_key(|s| s.fencing);
                let fencing = holds.last().map_or(0, |s| s.fencing);
                (fencing, State::Shared(Shared { capacity, holds }))
            }
            (None, true) => match &self.cooling {
                Some(c) => (c.fencing, State::Cooling { until: ends(c.ms) }),
                None => (0, State::Free),
            },
        };
        Ok(Record {
            fencing: fencing.max(self.fence.unwrap_or(0)),
            state,
            writer,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Permits;
    use lock_core::backend::rules::{self, Ask};
    use lock_core::{ProlongOutcome, Ttl};

    fn value(fencing: u64, renewed: u64, shared: Option<Permits>) -> Vec<u8> {
        serde_json::to_vec(&HoldValue {
            holder: HolderInfo::current(),
            holds: 1,
            fencing,
            shared,
            ttl_ms: 1_000,
            grace_ms: 1_000,
            renewed,
        })
        .unwrap()
    }

    #[test]
    fn a_hold_with_only_its_evidence_left_is_late_and_without_it_lost() {
        let base = Base::new("p", "k");
        let v = value(7, 5, None);
        let (live, evidence) = (base.live("t"), base.evidence("t"));
        let ttl = Ttl::from_millis(1_000).unwrap();
        let prolong = Ask::Prolong {
            token: &"t".to_owned(),
            ttl,
            grace: lock_core::backend::Grace::or_ttl(None, ttl),
        };
        let answer = |kvs: Vec<Kv<'_>>| {
            let seen = Seen::read(&base, 9, kvs).unwrap();
            match rules::step(seen.record.as_ref(), clock(), prolong).outcome {
                rules::Answer::Prolong(p) => p,
                other => panic!("{other:?}"),
            }
        };
        let both = vec![
            (live.as_str(), &v[..], 6, 1),
            (evidence.as_str(), &v[..], 6, 2),
        ];
        assert_eq!(answer(both), ProlongOutcome::Prolonged);
        let late = vec![(evidence.as_str(), &v[..], 6, 2)];
        assert_eq!(answer(late), ProlongOutcome::ProlongedLate);
        assert_eq!(answer(vec![]), ProlongOutcome::Lost);
    }

    #[test]
    fn expired_shares_end_in_the_order_they_were_renewed() {
        let base = Base::new("p", "k");
        let permits = Some(Permits {
            capacity: 2,
            weight: 1,
        });
        let (old, new) = (value(3, 10, permits), value(4, 20, permits));
        let (a, b) = (base.evidence("a"), base.evidence("b"));
        let seen = Seen::read(
            &base,
            30,
            vec![(a.as_str(), &new[..], 21, 1), (b.as_str(), &old[..], 11, 2)],
        )
        .unwrap();
        let Some(Record {
            state: State::Shared(shared),
            fencing: 4,
            ..
        }) = seen.record
        else {
            panic!("{:?}", seen.record)
        };
        assert_eq!(shared.holds[0].hold.token, "b", "admitted first");
        assert!(shared.holds[0].hold.expires < shared.holds[1].hold.expires);
        assert!(shared
            .holds
            .iter()
            .all(|s| s.hold.expires < NOW && s.hold.forget > NOW));
    }

    #[test]
    fn two_exclusive_holds_are_corrupt_and_say_how_to_clear_them() {
        let base = Base::new("p", "k");
        let v = value(1, 1, None);
        let (a, b) = (base.live("a"), base.live("b"));
        let err = Seen::read(
            &base,
            2,
            vec![(a.as_str(), &v[..], 1, 1), (b.as_str(), &v[..], 1, 1)],
        )
        .unwrap_err();
        assert!(err.contains("etcdctl del --prefix 'p/6b/'"), "{err}");
        let garbage = Seen::read(&base, 2, vec![(a.as_str(), &b"{"[..], 1, 1)]).unwrap_err();
        assert!(garbage.contains("does not hold a lock's data"), "{garbage}");
    }
}
