//! The backend as a storage of lock-core's adapter (`lock_core::backend::storage`): one
//! transaction reads the key's row under its row lock with the server's clock, the
//! adapter's step decides, and the same transaction writes the row it returns.

use lock_core::backend::rules::columns::Columns;
use lock_core::backend::rules::Wake;
use lock_core::backend::storage::{Commit, Decide, Snapshot, Storage};
use lock_core::backend::ReleaseSubscription;
use lock_core::{Key, Operation, Result};
use tracing::Instrument;

use crate::exec::{row, Db};
use crate::read::Read;
use crate::sql::ROLLBACK;

impl Storage for Db {
    lock_sql::storage_encoding!(crate::NAME);

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

    /// This process's waiters only: the server has no notifications, so a release in
    /// another process reaches a waiter here at its next poll.
    async fn subscribe_releases(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
        Ok(Some(self.waiters.subscribe(key.as_str())))
    }
}
