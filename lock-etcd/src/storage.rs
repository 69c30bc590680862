//! The backend as a storage of lock-core's adapter (`lock_core::backend::storage`): one
//! range read of the lock's keys, the adapter's step on what they say ([`Seen`]), the
//! leases its writes need, and one transaction that writes them only if none of the keys
//! read changed, none appeared and none expired in between. A renewal for the same ttl
//! writes nothing: it keeps the hold's leases alive (`renew.rs`).

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};
use lock_core::backend::codec::Digest;
use lock_core::backend::rules;
use lock_core::backend::storage::{Commit, Decide, Snapshot, Storage};
use lock_core::backend::{Capabilities, Grace, KeyPage, KeysRequest, Listing, ReleaseSubscription};
use lock_core::{Error, ErrorKind, HolderInfo, Key, Operation, Result, Ttl};
use tracing::Instrument;

use crate::error::{corrupt, Deadline};
use crate::layout::Base;
use crate::plan::{Lease, Plan};
use crate::read::{self, Seen};
use crate::renew::Renewal;
use crate::{EtcdBackend, NAME};

impl Storage for EtcdBackend {
    /// The SHA-256 of the token, in hex: the token never reaches etcd.
    type Codec = Digest;
    const NAME: &'static str = NAME;

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .shared(true)
            .release_notification(true)
            .expiry(self.expiry)
            // The `F` key of every lock name ever taken (see `layout`).
            .fence_per_key(true)
            .listing(Listing::InKeyOrder)
    }

    /// The prefix's range, keys only (`list.rs`), by the backend's timeout.
    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        let span = tracing::debug_span!("etcd_lock", op = "list", prefix = req.prefix);
        self.keys(req, Deadline::after(self.timeout))
            .instrument(span)
            .await
    }

    fn grace(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(self.grace, ttl)
    }

    /// The backend's timeout, shared by a call's reads, lease grants, transactions and
    /// the ones run again after conflicts.
    fn conflicts_within(&self) -> std::time::Duration {
        self.timeout
    }

    fn call_timeout(&self) -> Option<std::time::Duration> {
        Some(self.timeout)
    }

    /// The read, the step, the lease grants and the guarded transaction, all within the
    /// backend's timeout. A decision that writes nothing (a busy obtain, an inspection)
    /// ends at the read: it was true at the read's revision.
    ///
    /// # Cancel safety
    /// Dropped before the transaction, nothing is written (leases already granted carry no
    /// key and lapse on their own); dropped during it, the transaction is applied whole or
    /// not at all.
    async fn transact(
        &self,
        key: &Key,
        op: Operation,
        decide: &mut Decide<'_, String, HolderInfo>,
    ) -> Result<Commit> {
        let span = tracing::debug_span!("etcd_lock", op = op.as_str(), key = key.as_str());
        self.decide(key, op, decide).instrument(span).await
    }

    /// This process's waiters of `key`, woken by the key's watch (`notify.rs`): a release
    /// or an expiry anywhere wakes the longest waiter.
    ///
    /// # Cancel safety
    /// Dropped before the watch is made, nothing is left running.
    async fn subscribe_releases(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        self.watched(key).await.map(Some)
    }
}

impl EtcdBackend {
    async fn decide(
        &self,
        key: &Key,
        op: Operation,
        decide: &mut Decide<'_, String, HolderInfo>,
    ) -> Result<Commit> {
        let deadline = Deadline::after(self.timeout);
        let base = Base::new(&self.prefix, key.as_str());
        let read = self
            .members
            .retried(op, "read", deadline, |c| {
                let range = GetOptions::new().with_range(base.end());
                let first = base.first();
                async move { c.kv_client().get(first, Some(range)).await }
            })
            .await?;
        let revision = read
            .header()
            .map(|h| h.revision())
            .and_then(|r| u64::try_from(r).ok())
            .ok_or_else(|| protocol(op, "a read answered without a revision".to_owned()))?;
        let mut kvs = Vec::with_capacity(read.kvs().len());
        for kv in read.kvs() {
            let name = kv.key_str().map_err(|e| {
                corrupt(
                    op,
                    format!("a key under {} is not UTF-8 ({e})", base.as_str()),
                )
            })?;
            kvs.push((name, kv.value(), kv.mod_revision(), kv.lease()));
        }
        let seen = Seen::read(&base, revision, kvs).map_err(|m| corrupt(op, m))?;
        // Every later write commits at a higher revision, and the wall clock only moves
        // forward: the floor keeps fencing tokens growing across expiry, deletion and
        // restarts without a counter of ours, on the scale of every other backend's.
        let change = decide(Snapshot {
            record: seen.record.as_ref(),
            clock: read::clock(),
            fencing_floor: rules::wall_clock_floor(revision + 1),
        })?;
        let Some(record) = change.write else {
            return Ok(Commit::Done);
        };
        let mut plan = seen.plan(&base, &record).map_err(|m| protocol(op, m))?;
        if plan.is_empty() {
            return Ok(Commit::Done);
        }
        if let Some(renewal) = Renewal::of(&base, &seen, &plan, change.wake) {
            if let Some(commit) = self.renewed(op, deadline, &base, &seen, &renewal).await? {
                return Ok(commit);
            }
        }
        plan.announce(&base, &seen, &record, change.wake);
        let leases = self.grant(op, deadline, &plan).await?;
        let txn = transaction(&base, &seen, &plan, &leases);
        let done = self
            .members
            .once(op, "txn", deadline, |c| async move {
                c.kv_client().txn(txn).await
            })
            .await?;
        if !done.succeeded() {
            self.revoke(leases);
            return Ok(Commit::Conflict);
        }
        // The leases the write moved keys off are left to lapse rather than revoked: a
        // revoke is a call to the leader per lease, two more per release and prolong.
        // Whom the decision wakes, here as in every other process, is woken by the key's
        // watch when it sees `F` (`notify.rs`): a wake-up here too would wake a second
        // waiter for the one the rules let in.
        Ok(Commit::Done)
    }

    /// Grants the plan's leases, all at once; their ids in the plan's order.
    async fn grant(&self, op: Operation, deadline: Deadline, plan: &Plan) -> Result<Vec<i64>> {
        let grants = plan.leases.iter().map(|&secs| {
            self.members
                .retried(op, "lease grant", deadline, move |c| async move {
                    c.lease_client().grant(secs, None).await
                })
        });
        let mut ids = Vec::with_capacity(plan.leases.len());
        let mut failed = None;
        for granted in futures_util::future::join_all(grants).await {
            match granted {
                Ok(granted) => ids.push(granted.id()),
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            Some(e) => {
                self.revoke(ids);
                Err(e)
            }
            None => Ok(ids),
        }
    }

    /// Revokes leases no key was written on, in the background: they would lapse anyway.
    fn revoke(&self, leases: Vec<i64>) {
        if leases.is_empty() {
            return;
        }
        let Some(client) = self.members.any_client() else {
            return;
        };
        let timeout = self.timeout;
        tokio::spawn(async move {
            let mut lease = client.lease_client();
            for id in leases {
                let _ = tokio::time::timeout(timeout, lease.revoke(id)).await;
            }
        });
    }
}

/// The transaction that writes `plan` if the lock's keys are as `seen` read them.
///
/// Its guard is what the decision's safety needs, and no more, so that it stays within
/// etcd's operations per transaction (`--max-txn-ops`, 128 by default) however many holds
/// a key has:
/// - one range compare: no key of the lock was written since the read (a hold admitted
///   meanwhile writes `F`, so two admissions read at one revision never both land);
/// - each key the plan rewrites that the read saw: still there, unchanged (its lease may
///   have run out, and a put that keeps a lease fails on a key that is gone; and a renewal
///   must not put back a hold that was released, force-released or lost with the data
///   since: the range compare alone misses a deletion when nothing else of the lock was
///   written after it, as when a data loss took the release's wake-up key too).
///
/// A key read and deleted since that the plan does not write is not compared: such
/// deletions only free room, a decision that counted the key is as safe without it, and a
/// key the plan deletes anyway may be gone already. The deletes go as ranges: the range compare
/// holds every key of the lock to those read, so each run of keys to delete that no kept
/// or written key interrupts is one range delete (a `force_release` of 1,000 readers is
/// one operation, not 2,000).
fn transaction(base: &Base, seen: &Seen, plan: &Plan, leases: &[i64]) -> Txn {
    let revision = i64::try_from(seen.revision).unwrap_or(i64::MAX);
    let mut compares =
        vec![
            Compare::mod_revision(base.first(), CompareOp::Less, revision.saturating_add(1))
                .with_range(base.end()),
        ];
    compares.extend(plan.puts.iter().filter_map(|put| {
        let at = seen.keys.iter().find(|(k, ..)| *k == put.key)?.1;
        Some(Compare::mod_revision(
            put.key.as_str(),
            CompareOp::Equal,
            at,
        ))
    }));
    let mut ops: Vec<TxnOp> = plan
        .puts
        .iter()
        .map(|put| {
            let options = match put.lease {
                Lease::Keep => PutOptions::new().with_ignore_lease(),
                Lease::New(n) => PutOptions::new().with_lease(leases[n]),
                Lease::Never => PutOptions::new(),
            };
            TxnOp::put(put.key.as_str(), put.value.clone(), Some(options))
        })
        .collect();
    ops.extend(
        delete_runs(seen, plan)
            .into_iter()
            .map(|(first, end)| match end {
                None => TxnOp::delete(first, None),
                Some(end) => TxnOp::delete(first, Some(DeleteOptions::new().with_range(end))),
            }),
    );
    Txn::new().when(compares).and_then(ops)
}

/// The plan's deletes as runs of the lock's keys in order: `(first, None)` deletes one key,
/// `(first, Some(end))` the keys from `first` up to `end` (exclusive). A run ends at a key
/// read that stays, or one the plan writes.
fn delete_runs(seen: &Seen, plan: &Plan) -> Vec<(String, Option<String>)> {
    let deleted: std::collections::BTreeSet<&str> =
        plan.deletes.iter().map(String::as_str).collect();
    let mut all: std::collections::BTreeSet<&str> =
        seen.keys.iter().map(|(k, ..)| k.as_str()).collect();
    all.extend(plan.puts.iter().map(|p| p.key.as_str()));
    all.extend(deleted.iter().copied());
    let mut runs = Vec::new();
    let mut run: Vec<&str> = Vec::new();
    let mut close = |run: &mut Vec<&str>| {
        match run.as_slice() {
            [] => {}
            [one] => runs.push(((*one).to_owned(), None)),
            [first, .., last] => runs.push(((*first).to_owned(), Some(format!("{last}\0")))),
        }
        run.clear();
    };
    for key in all {
        if deleted.contains(key) {
            run.push(key);
        } else {
            close(&mut run);
        }
    }
    close(&mut run);
    runs
}

fn protocol(op: Operation, message: String) -> Error {
    Error::new(ErrorKind::Protocol, NAME, op, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Put;

    fn seen(base: &Base, keys: &[String]) -> Seen {
        let value = br#"{"holder":{"host":"h","pid":1},"holds":1,"fencing":1,"shared":{"capacity":4294967295,"weight":1},"ttl_ms":1000,"grace_ms":1000,"renewed":1}"#;
        let fence = br#"{"fencing":1}"#;
        let kvs = keys.iter().map(|k| {
            let v: &[u8] = if k.ends_with('F') { fence } else { value };
            (k.as_str(), v, 5, 1)
        });
        Seen::read(base, 9, kvs).unwrap()
    }

    #[test]
    fn deletes_go_as_runs_between_the_keys_that_stay() {
        let base = Base::new("p", "k");
        let tokens: Vec<String> = (0..1_000).map(|i| format!("{i:04}")).collect();
        let mut keys: Vec<String> = tokens
            .iter()
            .flat_map(|t| [base.live(t), base.evidence(t)])
            .collect();
        keys.push(base.fence());
        let seen = seen(&base, &keys);
        // Everything but F goes: one range (G/ then H/ follow each other).
        let all = Plan {
            deletes: keys[..keys.len() - 1].to_vec(),
            ..Plan::default()
        };
        assert_eq!(
            delete_runs(&seen, &all),
            vec![(
                base.evidence("0000"),
                Some(format!("{}\0", base.live("0999")))
            )]
        );
        // One reader's keys: two single deletes, its neighbours stay.
        let one = Plan {
            deletes: vec![base.live("0500"), base.evidence("0500")],
            ..Plan::default()
        };
        assert_eq!(
            delete_runs(&seen, &one),
            vec![(base.evidence("0500"), None), (base.live("0500"), None)]
        );
        // A key the plan writes inside a deleted run splits it.
        let taken = Plan {
            puts: vec![Put {
                key: base.evidence("0500x"),
                value: Vec::new(),
                lease: Lease::New(0),
            }],
            deletes: tokens.iter().map(|t| base.evidence(t)).collect(),
            ..Plan::default()
        };
        let runs = delete_runs(&seen, &taken);
        assert_eq!(runs.len(), 2, "{runs:?}");
        let txn_ops = |plan: &Plan| {
            let txn = transaction(&base, &seen, plan, &[1]);
            format!("{txn:?}").matches("RequestDeleteRange").count()
        };
        assert_eq!(txn_ops(&all), 1);
        assert_eq!(txn_ops(&taken), 2);
    }

    /// The guard of a decision among 1,000 holds: the range compare, and the keys read that
    /// the plan rewrites (on their lease or on a fresh one: a renewal must find its hold
    /// still there), never a compare per key read.
    #[test]
    fn a_transaction_compares_only_what_it_rewrites() {
        let base = Base::new("p", "k");
        let mut keys: Vec<String> = (0..1_000)
            .flat_map(|i| {
                let t = format!("{i:04}");
                [base.live(&t), base.evidence(&t)]
            })
            .collect();
        keys.push(base.fence());
        let seen = seen(&base, &keys);
        let plan = Plan {
            puts: vec![
                Put {
                    key: base.live("0001"),
                    value: Vec::new(),
                    lease: Lease::Keep,
                },
                Put {
                    key: base.live("0002"),
                    value: Vec::new(),
                    lease: Lease::New(0),
                },
                Put {
                    key: base.fence(),
                    value: Vec::new(),
                    lease: Lease::Never,
                },
                Put {
                    key: base.live("fresh"),
                    value: Vec::new(),
                    lease: Lease::New(0),
                },
            ],
            ..Plan::default()
        };
        let txn = format!("{:?}", transaction(&base, &seen, &plan, &[1]));
        assert_eq!(txn.matches("Compare {").count(), 4, "{txn}");
        let renewed = format!("key: {:?}, range_end: []", base.live("0002").as_bytes());
        assert!(
            txn.contains(&renewed),
            "the renewed hold's key is compared: {txn}"
        );
    }
}
