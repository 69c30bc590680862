//! The backend as a storage of lock-core's adapter (`lock_core::backend::storage`): one
//! range read of the lock's keys, the adapter's step on what they say ([`Seen`]), the
//! leases its writes need, and one transaction that writes them only if none of the keys
//! read changed, none appeared and none expired in between.

use std::borrow::Cow;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use lock_core::backend::storage::{Commit, Decide, Snapshot, Storage};
use lock_core::backend::{Capabilities, Grace, ReleaseSubscription, Token};
use lock_core::{Error, ErrorKind, HolderInfo, Key, Operation, Result, Ttl};
use tracing::Instrument;

use crate::error::Deadline;
use crate::layout::Base;
use crate::plan::{Lease, Plan};
use crate::read::{self, Seen};
use crate::{EtcdBackend, NAME};

impl Storage for EtcdBackend {
    /// The SHA-256 of the token, in hex: the token never reaches etcd.
    type Token = String;
    type Holder = HolderInfo;
    const NAME: &'static str = NAME;

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .shared(true)
            .release_notification(true)
            .expiry(self.expiry)
    }

    fn token<'t>(&self, token: &'t Token) -> Cow<'t, String> {
        Cow::Owned(token.digest())
    }

    fn holder<'h>(&self, holder: &'h HolderInfo, _: Operation) -> Result<Cow<'h, HolderInfo>> {
        Ok(Cow::Borrowed(holder))
    }

    fn decode_holder(&self, stored: &HolderInfo, _: Operation) -> Result<HolderInfo> {
        Ok(stored.clone())
    }

    fn grace(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(self.grace, ttl)
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
            kvs.push((name, kv.value(), kv.mod_revision()));
        }
        let seen = Seen::read(&base, revision, kvs).map_err(|m| corrupt(op, m))?;
        // Every later write commits at a higher revision: the floor keeps fencing tokens
        // growing across expiry, deletion and restarts without a counter of ours.
        let change = decide(Snapshot {
            record: seen.record.as_ref(),
            clock: read::clock(),
            fencing_floor: revision + 1,
        })?;
        let Some(record) = change.write else {
            return Ok(Commit::Done);
        };
        let plan = seen.plan(&base, &record).map_err(|m| protocol(op, m))?;
        if plan.is_empty() {
            return Ok(Commit::Done);
        }
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
        self.waiters.wake(key.as_str(), change.wake);
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

/// The transaction that writes `plan` if the lock's keys are as `seen` read them: each key
/// read still there at the revision it had, and no key of the lock written since.
fn transaction(base: &Base, seen: &Seen, plan: &Plan, leases: &[i64]) -> Txn {
    let revision = i64::try_from(seen.revision).unwrap_or(i64::MAX);
    let mut compares: Vec<Compare> = seen
        .keys
        .iter()
        .map(|(key, at)| Compare::mod_revision(key.as_str(), CompareOp::Equal, *at))
        .collect();
    compares.push(
        Compare::mod_revision(base.first(), CompareOp::Less, revision.saturating_add(1))
            .with_range(base.end()),
    );
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
        plan.deletes
            .iter()
            .map(|key| TxnOp::delete(key.as_str(), None)),
    );
    Txn::new().when(compares).and_then(ops)
}

fn corrupt(op: Operation, message: String) -> Error {
    Error::new(ErrorKind::Corrupt, NAME, op, message)
}

fn protocol(op: Operation, message: String) -> Error {
    Error::new(ErrorKind::Protocol, NAME, op, message)
}
