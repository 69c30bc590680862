//! One plain async function per rule of the contract, named after the rule, in modules by
//! topic; every case is re-exported here, and [`for_each_case!`](crate::for_each_case) lists
//! them all.
//!
//! Each takes a [`Suite`] and returns `Err(Failure)` naming the outcome that broke the rule.
//! Ttls are chosen so that every expected outcome is certain on a loaded machine: "still
//! held" checks happen well inside the ttl, "expired" checks well after it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::ProlongRequest;
use lock_core::{
    Attempt, ErrorKind, Fencing, HolderInfo, Key, LockBackend, LockGuard, LockState, Locker,
    ObtainOutcome, ProlongOutcome, ReleaseOutcome, Retry, Ttl,
};
use tokio::time::Instant;

use crate::harness::{ms, ttl_of, Owner};
use crate::{ensure, CaseResult, Failure, Suite};

mod deadlines;
pub mod faults;
mod leader_faults;
mod lost_replies;
pub(crate) mod model;
pub(crate) mod model_shared;
pub(crate) mod observed;
pub(crate) mod precise;
pub mod process;
mod process_all;

pub use crate::history::histories_check_out;
pub use deadlines::{calls_under_contention_end_by_their_deadline, DEADLINE_MARGIN};
pub use faults::{
    cancelled_calls_leave_nothing_held, partition_during_a_hold_fires_lost_in_time,
    partition_during_obtain_or_release_leaves_no_orphan, slow_server_never_overstates_validity,
    subscribe_in_a_partition_ends_by_its_deadline,
};
pub use leader_faults::leaders_never_overlap_under_network_faults;
pub use lost_replies::{
    a_campaign_with_a_lost_reply_leads_once_or_leaves_nothing,
    lock_all_with_a_lost_reply_leaves_none_of_the_keys_held,
    obtain_retried_after_a_lost_reply_holds_once,
};
pub use model::{model_sequences, model_sequences_with};
pub use model_shared::{shared_model_sequences, shared_model_sequences_with};
pub use observed::observer_sees_every_event;
pub use precise::{
    busy_remaining_is_exact_both_ways, inspect_changes_nothing_before_late_calls,
    inspect_counts_reentrant_holds, late_release_with_delay_starts_the_cooldown,
    reacquire_resets_the_ttl,
};
pub use process::{
    killed_holder_frees_after_ttl, killed_holder_frees_only_its_own_permits,
    multiprocess_exclusion, multiprocess_semaphore_stays_within_its_permits,
};
pub use process_all::multiprocess_lock_all_never_deadlocks_nor_overlaps;

const LONG: Duration = Duration::from_secs(30);

fn acquired(outcome: ObtainOutcome, what: &str) -> Result<Fencing, Failure> {
    match outcome {
        ObtainOutcome::Acquired { fencing, .. } => Ok(fencing),
        other => Err(Failure(format!("{what}: expected Acquired, got {other:?}"))),
    }
}

fn busy(outcome: &ObtainOutcome) -> bool {
    matches!(outcome, ObtainOutcome::Busy(_))
}

/// Obtains `key` through the client layer, failing the case if it is busy.
async fn take(
    locker: &Locker,
    key: &str,
    ttl: Duration,
    watchdog: bool,
) -> Result<LockGuard, Failure> {
    let builder = locker.lock(key).ttl(ttl);
    let builder = if watchdog {
        builder.watchdog()
    } else {
        builder
    };
    match builder.try_obtain().await? {
        Attempt::Obtained(guard) => Ok(guard),
        Attempt::Busy(busy) => Err(Failure(format!("{key} should be free, but it is {busy}"))),
    }
}

/// Waits for every task, failing the case on the first that failed or panicked.
async fn join_tasks(tasks: Vec<tokio::task::JoinHandle<CaseResult>>) -> CaseResult {
    for t in tasks {
        t.await
            .map_err(|e| Failure(format!("task panicked: {e}")))??;
    }
    Ok(())
}

async fn pair(suite: &Suite, key: &str) -> (Arc<dyn LockBackend>, Owner, Owner) {
    let backend = suite.harness.backend().await;
    let a = Owner::new(&backend, key, "owner a");
    let b = Owner::new(&backend, key, "owner b");
    (backend, a, b)
}

mod client;
mod expiry;
mod identity;
mod listing;
mod recovery;
mod scale;
mod shared;
mod shared_answers;
mod shared_rules;
mod stale_calls;
mod wakes;

pub use client::*;
pub use expiry::*;
pub use identity::*;
pub use listing::*;
pub use recovery::*;
pub use scale::*;
pub use shared::*;
pub use shared_answers::*;
pub use shared_rules::*;
pub use stale_calls::*;
pub use wakes::*;

pub(crate) use crate::check::report;
