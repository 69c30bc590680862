//! The table's stored procedure (`sql/procedure.sql`) as lock-core's routine
//! (`lock_core::backend::routine`): an obtain, prolong or release of an exclusive hold is
//! one `CALL`, one round trip; it answers `defer` for a row with shares or a live writer's
//! marker. Inspections and forced releases have no call: they go to the storage
//! (`storage.rs`) at once, and so does every request once the procedure was found missing
//! or not ours to call (see `exec.rs`).

use std::time::Duration;

use lock_core::backend::routine::{Routine, Verdict};
use lock_core::backend::rules::{Ask, Reply, Wake};
use lock_core::{Error, Key, Operation, Result, Ttl};
use tokio::time::Instant;

use crate::exec::Db;
use crate::sql::{Call, ProcedureOp};
use crate::MySqlBackend;

impl Routine for Db {
    const BATCH: usize = MySqlBackend::BATCH;

    async fn decide(
        &self,
        key: &Key,
        ask: Ask<'_, String, String>,
        deadline: Instant,
    ) -> Result<Verdict<Reply>> {
        let key = key.as_str();
        let call = match ask {
            Ask::Obtain(o) => Call {
                op: ProcedureOp::Obtain,
                key,
                token: o.token,
                holder: Some(o.holder),
                ttl_us: micros(o.ttl.as_duration()),
                grace_us: micros(o.grace.as_duration()),
                delay_us: 0,
            },
            Ask::Prolong { token, ttl, grace } => Call {
                op: ProcedureOp::Prolong,
                key,
                token,
                holder: None,
                ttl_us: micros(ttl.as_duration()),
                grace_us: micros(grace.as_duration()),
                delay_us: 0,
            },
            Ask::Release { token, delay } => Call {
                op: ProcedureOp::Release,
                key,
                token,
                holder: None,
                ttl_us: 0,
                grace_us: 0,
                delay_us: delay.map_or(0, |d| micros(Ttl::as_duration(d))),
            },
            Ask::Inspect | Ask::Force => return Ok(Verdict::Defer),
        };
        match self.call(ask.operation(), &call, deadline).await? {
            Some(reply) => reply.verdict(&ask),
            None => Ok(Verdict::Defer),
        }
    }

    fn timeout(&self) -> Duration {
        self.pooled.deadline.timeout
    }

    fn past_deadline(&self, op: Operation) -> Error {
        self.pooled.deadline.error(op)
    }

    /// The server has no notifications: this process's waiters try at once, others poll.
    fn woken(&self, key: &Key, wake: Wake) {
        self.waiters.wake(key.as_str(), wake);
    }
}

/// A duration in µs, as the procedure takes it.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
