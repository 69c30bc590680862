//! The backend as a storage of lock-core's adapter (`lock_core::backend::storage`): one
//! transaction reads the key's row under its row lock with the server's clock, the
//! adapter's step decides, and the same transaction writes the row it returns.

use lock_core::backend::codec::DigestJson;
use lock_core::backend::rules::columns::Columns;
use lock_core::backend::rules::Wake;
use lock_core::backend::storage::{Commit, Decide, DecideMany, Snapshot, Storage};
use lock_core::backend::ReleaseSubscription;
use lock_core::backend::{Capabilities, Grace};
use lock_core::{Key, Operation, Result, Ttl};
use tracing::Instrument;

use crate::exec::{row, Db};
use crate::read::{Read, Stored};
use crate::sql::{COMMIT, ROLLBACK};

impl Storage for Db {
    /// The token's digest and the holder's JSON.
    type Codec = DigestJson;
    const NAME: &'static str = crate::NAME;

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .shared(true)
            .prolong_batch(crate::MySqlBackend::BATCH)
    }

    fn grace(&self, ttl: Ttl) -> Grace {
        Grace::or_ttl(self.grace, ttl)
    }

    /// One transaction: the row read under its row lock (an obtain makes a placeholder row
    /// first, so that two obtains of a new key queue on one row lock), the server's clock
    /// read after that wait (in µs, also the fencing floor), the step, and the row it
    /// returns written and committed; nothing written, `ROLLBACK`, when it returns none.
    /// Row locks never conflict: every call waits its turn, so the answer is always
    /// [`Commit::Done`].
    async fn transact(
        &self,
        key: &Key,
        op: Operation,
        decide: &mut Decide<'_, String, String>,
    ) -> Result<Commit> {
        let span = tracing::debug_span!("mysql_lock", op = op.as_str(), key = key.as_str());
        let create = op == Operation::Obtain;
        let read = self.names.read_one(&self.session, key.as_str(), create);
        let name = key.as_str();
        let mut wake = Wake::Nobody;
        let mut plan = |read: &Read| {
            let change = decide(Snapshot {
                record: read.of(name),
                clock: read.clock(),
                fencing_floor: read.now_us,
            })?;
            wake = change.wake;
            let sql = match change.write {
                Some(record) => {
                    let columns: Columns = row(&record, read);
                    self.names.write([(name, &columns)].into_iter())
                }
                None => vec![ROLLBACK.to_owned()],
            };
            Ok(((), sql))
        };
        self.transaction(op, &read, &mut plan)
            .instrument(span)
            .await?;
        // Committed: this process's waiters try at once. (Cancelled or failed before this
        // point, they find the release at their next poll, as other processes' do.)
        self.waiters.wake(name, wake);
        Ok(Commit::Done)
    }

    /// Up to a batch of keys in one transaction: their rows read in primary-key order under
    /// their row locks with the server's clock, each decided in the batch's order (a key
    /// asked twice sees the first decision's write), the changed rows written in one
    /// statement and committed; `COMMIT` alone when nothing changed. Never
    /// [`Commit::Conflict`], as for one key.
    async fn transact_many(
        &self,
        keys: &[&Key],
        op: Operation,
        decide: &mut DecideMany<'_, String, String>,
    ) -> Result<Commit> {
        let span = tracing::debug_span!("mysql_lock", op = "prolong_many", locks = keys.len());
        let read = self
            .names
            .read_many(&self.session, keys.iter().map(|k| k.as_str()));
        let mut wakes: Vec<(&str, Wake)> = Vec::new();
        let mut plan = |read: &Read| {
            wakes.clear();
            let mut written: Vec<(&str, Stored)> = Vec::new();
            for (i, key) in keys.iter().enumerate() {
                let name = key.as_str();
                let before = written
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == name)
                    .map(|(_, r)| r)
                    .or_else(|| read.of(name));
                // An error is the adapter's, for that request alone; the rest go on.
                let Ok(change) = decide(
                    i,
                    Snapshot {
                        record: before,
                        clock: read.clock(),
                        fencing_floor: read.now_us,
                    },
                ) else {
                    continue;
                };
                wakes.push((name, change.wake));
                if let Some(record) = change.write {
                    written.retain(|(k, _)| *k != name);
                    written.push((name, record));
                }
            }
            let sql = if written.is_empty() {
                vec![COMMIT.to_owned()]
            } else {
                let rows: Vec<(&str, Columns)> =
                    written.iter().map(|(k, r)| (*k, row(r, read))).collect();
                self.names.write(rows.iter().map(|(k, c)| (*k, c)))
            };
            Ok(((), sql))
        };
        self.transaction(op, &read, &mut plan)
            .instrument(span)
            .await?;
        for (key, wake) in wakes {
            self.waiters.wake(key, wake);
        }
        Ok(Commit::Done)
    }

    /// This process's waiters only: the server has no notifications, so a release in
    /// another process reaches a waiter here at its next poll.
    async fn subscribe_releases(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        Ok(Some(self.waiters.subscribe(key.as_str())))
    }
}
