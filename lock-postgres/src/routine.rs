//! The function of `schema.sql` as lock-core's routine (`lock_core::backend::routine`):
//! each request one statement, one round trip, that decides an exclusive hold and answers
//! `defer` for a row with shares or a live writer's marker. The kit routes every call, and
//! decides what is deferred on the storage of `storage.rs`.

use std::time::Duration;

use lock_core::backend::routine::{Asked, Routine, Verdict};
use lock_core::backend::rules::{Ask, Reply, Wake};
use lock_core::{Error, Key, Operation, ProlongOutcome, Result, Ttl};
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::protocol;
use crate::exec::{Db, Sql};
use crate::reply::Word;
use crate::sql::{Args, Prolongs};
use crate::PostgresBackend;

impl Routine for Db {
    const BATCH: usize = PostgresBackend::BATCH;

    /// One call of the function (`p_op` `obtain`, `prolong`, `release`, `inspect` or
    /// `force`) by `deadline`.
    async fn decide(
        &self,
        key: &Key,
        ask: Ask<'_, String, String>,
        deadline: Instant,
    ) -> Result<Verdict<Reply>> {
        let (word, args) = match ask {
            Ask::Obtain(o) => {
                let args = Args {
                    token: Some(o.token),
                    ttl_ms: o.ttl.as_millis(),
                    grace_ms: o.grace.as_millis(),
                    holder: Some(o.holder),
                    delay_ms: 0,
                };
                ("obtain", args)
            }
            Ask::Prolong { token, ttl, grace } => {
                let args = Args {
                    token: Some(token),
                    ttl_ms: ttl.as_millis(),
                    grace_ms: grace.as_millis(),
                    ..Args::default()
                };
                ("prolong", args)
            }
            Ask::Release { token, delay } => {
                let args = Args {
                    token: Some(token),
                    delay_ms: delay.map_or(0, Ttl::as_millis),
                    ..Args::default()
                };
                ("release", args)
            }
            Ask::Inspect => ("inspect", Args::default()),
            Ask::Force => ("force", Args::default()),
        };
        let reply = self
            .call_by(ask.operation(), word, key, args, deadline)
            .await?;
        reply.verdict(&ask)
    }

    /// One statement for the whole batch, in the order of the keys' advisory lock ids (see
    /// `sql::Prolongs`); the answers in the order of `asks`.
    async fn decide_many(
        &self,
        asks: &[Asked<'_, String, String>],
        deadline: Instant,
    ) -> Result<Vec<Verdict<ProlongOutcome>>> {
        let op = Operation::Prolongate;
        let mut order: Vec<(i64, usize)> = asks
            .iter()
            .enumerate()
            .map(|(i, (key, _))| (self.names.lock_id(key.as_str()), i))
            .collect();
        order.sort_unstable();
        let mut batch = Prolongs::default();
        let ms = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for &(lock, i) in &order {
            let (key, ask) = &asks[i];
            let Ask::Prolong { token, ttl, grace } = ask else {
                return Err(protocol(op, "a batch of prolongs holds another request"));
            };
            batch.keys.push(key.as_str().to_owned());
            batch.locks.push(lock);
            batch.tokens.push((*token).clone());
            batch.ttls.push(ms(ttl.as_millis()));
            batch.graces.push(ms(grace.as_millis()));
        }
        let span = tracing::debug_span!("postgres_lock", op = "prolong_many", locks = asks.len());
        let replies = self
            .send(op, &Sql::Prolongs(&batch), deadline)
            .instrument(span)
            .await?;
        if replies.len() != asks.len() {
            return Err(protocol(
                op,
                format!("{} rows for {} prolongs", replies.len(), asks.len()),
            ));
        }
        let mut verdicts = vec![Verdict::Defer; asks.len()];
        for (&(_, i), reply) in order.iter().zip(&replies) {
            if reply.outcome != Word::Defer {
                verdicts[i] = Verdict::Decided(reply.prolong_outcome()?);
            }
        }
        Ok(verdicts)
    }

    fn timeout(&self) -> Duration {
        self.pooled.deadline.timeout
    }

    fn past_deadline(&self, op: Operation) -> Error {
        self.pooled.deadline.error(op)
    }

    /// Without notifications, this process's waiters; with them, the function's `NOTIFY`
    /// wakes every process's.
    fn woken(&self, key: &Key, wake: Wake) {
        self.wake_local(key, wake);
    }
}
