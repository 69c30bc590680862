//! Renewals without a write through the log.
//!
//! A hold renewed for the ttl and grace it already had needs no new keys: its `H/` and
//! `G/` keys are on leases granted for exactly that ttl and that ttl plus the grace
//! (`plan.rs`), and keeping those two leases alive sets both keys' ends where fresh leases
//! would. A lease keep-alive is answered by the leader from its memory, where a lease grant
//! and a transaction are each a write through the Raft log to every member's disk: a
//! renewal that wrote took a read, two grants and a transaction; this one takes a read,
//! two keep-alives (at once) and a read-only transaction, and writes nothing.
//!
//! The order keeps the answer true:
//!
//! 1. the read (the adapter's): both keys there, each on a lease no other key of the lock
//!    uses (a plan shares one lease among keys of one length, so a cooldown or a writer's
//!    marker may sit on a hold's lease: keeping that alive would stretch them too);
//! 2. both leases kept alive, each answered with a live lease (a lease that ran out since
//!    is "not found": the hold expired, and the write path decides it late);
//! 3. a read-only transaction that holds the lock's keys to the read: none written since,
//!    and both keys unchanged. Keys only change lease by a put, and a put changes their
//!    `mod_revision`: the leases kept alive in 2 were still the keys' when it ran, so
//!    the hold was renewed, exactly as the decision said.
//!
//! When 2 fails, the decision is written as any other (`storage.rs`): a lease past its
//! ttl that the leader has not revoked yet still shows its keys, and the write decides on
//! them as before. When 3 fails, something of the lock changed since the read: the call
//! is a conflict, and the adapter decides again on a fresh read (the write's transaction
//! has the same guard, and would fail after granting two leases for nothing). A lease kept
//! alive for nothing is harmless: it holds no key of the hold any more, or the keys it
//! holds are the hold's.
//!
//! What the keys keep is not rewritten, so a hold's `renewed` stays at its last written
//! renewal: of two holds that both expired, the one renewed last by a write is taken to have
//! ended last, where it may have been kept alive later. Only the made-up times of
//! `read.rs` order on it; which keys exist decides every answer.

use etcd_client::{Compare, CompareOp, Error as EtcdError, Txn};
use lock_core::backend::rules::Wake;
use lock_core::backend::storage::Commit;
use lock_core::{Operation, Result};

use crate::error::Deadline;
use crate::layout::{Base, HoldValue, Slot};
use crate::plan::{Lease, Plan};
use crate::read::Seen;
use crate::EtcdBackend;

/// A decision that only renews one hold for the ttl and grace it had: the hold's keys as
/// read, and the leases to keep alive.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Renewal {
    /// The hold's `H/` and `G/` keys, with the `mod_revision` the read saw.
    keys: [(String, i64); 2],
    /// The leases to keep alive: one, when both keys share it.
    leases: Vec<i64>,
}

impl Renewal {
    /// The renewal `plan` is, when it writes nothing but one hold's two keys, on fresh
    /// leases of the lengths they have, with what they keep unchanged but the revision of
    /// the renewal, and wakes nobody; `None` for any other plan.
    pub(crate) fn of(base: &Base, seen: &Seen, plan: &Plan, wake: Wake) -> Option<Renewal> {
        if wake != Wake::Nobody || !plan.deletes.is_empty() {
            return None;
        }
        let [first, second] = plan.puts.as_slice() else {
            return None;
        };
        let token = match base.slot(&first.key)? {
            Slot::Live(token) => token,
            _ => return None,
        };
        if second.key != base.evidence(token) {
            return None;
        }
        let old = seen.holds.get(token)?;
        if !old.live || !old.evidence {
            return None;
        }
        for put in [first, second] {
            if !matches!(put.lease, Lease::New(_)) {
                return None;
            }
            let new: HoldValue = serde_json::from_slice(&put.value).ok()?;
            let unchanged = HoldValue {
                renewed: new.renewed,
                ..old.value.clone()
            };
            // The same ttl and grace: the leases the keys have were granted for the
            // lengths the plan asks.
            if new != unchanged {
                return None;
            }
        }
        let read = |key: &str| seen.keys.iter().find(|(k, ..)| k == key);
        let (live, evidence) = (read(&first.key)?, read(&second.key)?);
        let mut leases = vec![live.2, evidence.2];
        leases.dedup();
        // A lease of the hold's alone: no other key of the lock on it, none without lease.
        let alone = leases.iter().all(|&lease| {
            lease != 0
                && seen
                    .keys
                    .iter()
                    .all(|(k, _, l)| *l != lease || *k == live.0 || *k == evidence.0)
        });
        alone.then(|| Renewal {
            keys: [(live.0.clone(), live.1), (evidence.0.clone(), evidence.1)],
            leases,
        })
    }
}

impl EtcdBackend {
    /// Renews as the [module](self) docs say, by `deadline`: `Some(Done)` when the hold
    /// was renewed without a write, `Some(Conflict)` when the lock changed since the read,
    /// `None` when the decision must be written after all.
    ///
    /// # Errors
    /// Only the read-only transaction's: a keep-alive that fails leaves the hold to the write
    /// path.
    pub(crate) async fn renewed(
        &self,
        op: Operation,
        deadline: Deadline,
        base: &Base,
        seen: &Seen,
        renewal: &Renewal,
    ) -> Result<Option<Commit>> {
        let alive = renewal.leases.iter().map(|&id| {
            self.members
                .retried(op, "lease keep-alive", deadline, move |c| async move {
                    match c.lease_client().keep_alive(id).await {
                        Ok(_) => Ok(true),
                        // The lease ran out ("lease not found"): the hold expired.
                        Err(EtcdError::LeaseKeepAliveError(_)) => Ok(false),
                        Err(e) => Err(e),
                    }
                })
        });
        for kept in futures_util::future::join_all(alive).await {
            if !matches!(kept, Ok(true)) {
                return Ok(None);
            }
        }
        let txn = unchanged(base, seen, renewal);
        // Read-only: served by a read of the leader's, repeated harmlessly.
        let checked = self
            .members
            .retried(op, "renewal check", deadline, move |c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        Ok(Some(match checked.succeeded() {
            true => Commit::Done,
            false => Commit::Conflict,
        }))
    }
}

/// The read-only transaction of step 3: no key of the lock written since the read, and
/// both of the hold's keys as read.
fn unchanged(base: &Base, seen: &Seen, renewal: &Renewal) -> Txn {
    let revision = i64::try_from(seen.revision).unwrap_or(i64::MAX);
    let mut compares =
        vec![
            Compare::mod_revision(base.first(), CompareOp::Less, revision.saturating_add(1))
                .with_range(base.end()),
        ];
    compares.extend(
        renewal
            .keys
            .iter()
            .map(|(key, at)| Compare::mod_revision(key.as_str(), CompareOp::Equal, *at)),
    );
    Txn::new().when(compares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Put;
    use lock_core::HolderInfo;

    fn value(renewed: u64, ttl_ms: u64) -> HoldValue {
        HoldValue {
            holder: HolderInfo::current(),
            holds: 1,
            fencing: 3,
            shared: None,
            ttl_ms,
            grace_ms: 1_000,
            renewed,
        }
    }

    fn bytes(v: &HoldValue) -> Vec<u8> {
        serde_json::to_vec(v).unwrap()
    }

    /// The hold `t` on leases 11 and 12, read at revision 9, and the plan that renews it
    /// with `new` on fresh leases.
    fn renewing(base: &Base, extra: Option<(&str, i64)>, new: &HoldValue) -> (Seen, Plan) {
        let old = bytes(&value(5, 1_000));
        let (live, evidence) = (base.live("t"), base.evidence("t"));
        let mut kvs = vec![
            (live.as_str(), &old[..], 6, 11),
            (evidence.as_str(), &old[..], 6, 12),
        ];
        let cool = br#"{"fencing":3,"ms":1000}"#;
        if let Some((key, lease)) = extra {
            kvs.push((key, &cool[..], 7, lease));
        }
        let seen = Seen::read(base, 9, kvs).unwrap();
        let plan = Plan {
            leases: vec![1, 2],
            puts: vec![
                Put {
                    key: live,
                    value: bytes(new),
                    lease: Lease::New(0),
                },
                Put {
                    key: evidence,
                    value: bytes(new),
                    lease: Lease::New(1),
                },
            ],
            deletes: Vec::new(),
        };
        (seen, plan)
    }

    #[test]
    fn a_renewal_for_the_same_ttl_keeps_the_hold_s_leases_alive() {
        let base = Base::new("p", "k");
        let (seen, plan) = renewing(&base, None, &value(9, 1_000));
        let renewal = Renewal::of(&base, &seen, &plan, Wake::Nobody).expect("a renewal");
        assert_eq!(renewal.leases, vec![11, 12]);
        assert_eq!(renewal.keys[0], (base.live("t"), 6));
        let txn = format!("{:?}", unchanged(&base, &seen, &renewal));
        assert_eq!(txn.matches("Compare {").count(), 3, "{txn}");
        assert!(!txn.contains("RequestPut"), "{txn}");
    }

    #[test]
    fn anything_more_than_the_same_renewal_is_written() {
        let base = Base::new("p", "k");
        // Another ttl: the leases were granted for another length.
        let (seen, plan) = renewing(&base, None, &value(9, 2_000));
        assert_eq!(Renewal::of(&base, &seen, &plan, Wake::Nobody), None);
        // Whom a decision wakes is announced by a write.
        let (seen, plan) = renewing(&base, None, &value(9, 1_000));
        assert_eq!(Renewal::of(&base, &seen, &plan, Wake::One), None);
        // A cooldown on the hold's lease would be stretched too.
        let cooling = base.cooling();
        let (seen, plan) = renewing(&base, Some((&cooling, 11)), &value(9, 1_000));
        assert_eq!(Renewal::of(&base, &seen, &plan, Wake::Nobody), None);
        // On a lease of its own, it is no matter.
        let (seen, plan) = renewing(&base, Some((&cooling, 13)), &value(9, 1_000));
        assert!(Renewal::of(&base, &seen, &plan, Wake::Nobody).is_some());
        // A changed count is written.
        let mut more = value(9, 1_000);
        more.holds = 2;
        let (seen, plan) = renewing(&base, None, &more);
        assert_eq!(Renewal::of(&base, &seen, &plan, Wake::Nobody), None);
        // A deletion with it is written.
        let (seen, mut plan) = renewing(&base, None, &value(9, 1_000));
        plan.deletes.push(base.writer());
        assert_eq!(Renewal::of(&base, &seen, &plan, Wake::Nobody), None);
    }
}
