//! The backend as a storage of lock-core's adapter (`lock_core::backend::storage`): one
//! transaction reads the key's row under its row lock with the server's clock, the
//! adapter's step decides, and the same transaction writes the row it returns.

use std::borrow::Cow;
use std::fmt;

use lock_core::backend::rules::columns::Columns;
use lock_core::backend::storage::{Commit, Decide, Snapshot, Storage};
use lock_core::backend::{Capabilities, Grace, Token};
use lock_core::{Error, ErrorKind, HolderInfo, Key, Operation, Result, Ttl};
use tracing::Instrument;

use crate::exec::{row, Db};
use crate::read::{parse_holder, Read};
use crate::sql::ROLLBACK;
use crate::NAME;

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The pool's options hold the password: only names are shown.
        f.debug_struct("MySqlBackend")
            .field("table", &self.names.table)
            .field("grace", &self.grace)
            .field("timeout", &self.pooled.deadline.timeout)
            .field("auto_migrate", &self.auto_migrate)
            .finish_non_exhaustive()
    }
}

impl Storage for Db {
    /// The SHA-256 of the token, in hex: the token itself never reaches the server.
    type Token = String;
    /// The holder info as JSON.
    type Holder = String;
    const NAME: &'static str = NAME;

    fn storage_capabilities(&self) -> Capabilities {
        Capabilities::none()
            .cross_process(true)
            .cross_host(true)
            .shared(true)
    }

    fn token<'t>(&self, token: &'t Token) -> Cow<'t, String> {
        Cow::Owned(token.digest())
    }

    fn holder<'h>(&self, holder: &'h HolderInfo, op: Operation) -> Result<Cow<'h, String>> {
        serde_json::to_string(holder).map(Cow::Owned).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                NAME,
                op,
                format!("holder info: {e}"),
            )
        })
    }

    fn decode_holder(&self, stored: &String, op: Operation) -> Result<HolderInfo> {
        parse_holder(op, stored)
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
        let mut plan = |read: &Read| {
            let change = decide(Snapshot {
                record: read.of(name),
                clock: read.clock(),
                fencing_floor: read.now_us,
            })?;
            let sql = match change.write {
                Some(record) => {
                    let columns: Columns = row(&record, read);
                    self.names.write([(name, &columns)].into_iter())
                }
                // Nobody waits on a notification here: waiters poll.
                None => vec![ROLLBACK.to_owned()],
            };
            Ok(((), sql))
        };
        self.transaction(op, &read, &mut plan)
            .instrument(span)
            .await?;
        Ok(Commit::Done)
    }
}
