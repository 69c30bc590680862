//! The lock contract, executable: one suite that every `LockBackend` must pass.
//!
//! # Conformance-testing your own backend
//! Put this in `tests/conformance.rs` of your crate (with `lock-conformance`, `lock-core`
//! and `tokio` as dev-dependencies); it expands to one `#[test]` per property, so a failure
//! names the rule and shows the outcome that broke it:
//!
//! ```
//! use std::sync::Arc;
//! use lock_conformance::{async_trait, Harness};
//! use lock_core::{LockBackend, MemoryBackend};
//!
//! struct MyHarness;
//!
//! #[async_trait]
//! impl Harness for MyHarness {
//!     async fn backend(&self) -> Arc<dyn LockBackend> {
//!         Arc::new(MemoryBackend::new()) // your backend, in a fresh namespace
//!     }
//! }
//!
//! lock_conformance::suite!("memory", MyHarness);
//! # fn main() {}
//! ```
//!
//! Implement [`Harness::lose_data`], [`Harness::drop_connections`] and
//! [`Harness::shared_config`]/[`Harness::connect`] to unlock the fault and multi-process
//! cases. Left out, each skips the cases that need it, with a line on stderr, so that a
//! harness of one method is green on a backend that keeps the contract; except where the
//! backend's capabilities say the case applies: a backend that declares `cross_process`
//! fails the multi-process cases until its harness connects other processes, and one that
//! declares `cross_host` fails the data-loss and network-fault cases until its harness
//! offers them.
//! Each case is also a plain `async fn` in [`cases`], callable by hand with a [`Suite`].
//!
//! # What each property means
//! | case | the rule, in plain words |
//! |---|---|
//! | `model_sequences` | random sequences of obtain, re-obtain, prolong, release (with and without cooldown), inspect, force release and sleeps, over 3 owners and 2 keys, agree step by step with a reference model written from the contract; failures shrink to a minimal sequence |
//! | `second_owner_gets_busy` | a held key is Busy to others (naming the holder); other keys are independent; release frees it |
//! | `failed_obtain_leaves_holder_untouched` | a Busy obtain changes nothing |
//! | `reentrant_obtain_counts_holds` | same token: hold count, same fencing; each release gives back one hold |
//! | `second_release_is_lost`, `foreign_token_changes_nothing` | only the holder can prolong or release; anything else is Lost and changes nothing |
//! | `unprolonged_lock_expires_after_its_ttl`, `prolong_extends_the_lock` | ttl and prolong are honoured, remaining lies in (0, ttl] |
//! | `late_calls_when_untaken_are_late`, `late_calls_after_steal_are_lost`, `calls_past_grace_are_never_on_time` | Late versus Lost |
//! | `prolong_many_answers_each_as_prolong_would` | the watchdog's batch call answers every lock as its own prolong would, in order, whatever the mix and the size |
//! | `prolong_many_renews_the_largest_records` | the batch call renews records as large as the contract allows (longest keys, largest metadata, three shares a key) |
//! | `cooldown_blocks_everyone_then_frees`, `decrement_ignores_cooldown` | `delay_after` |
//! | `fencing_grows_across_everything`, `force_release_then_retake_fences_the_old_holder`, `paused_holder_is_fenced_out` | fencing tokens only grow; a stale holder is fenced out |
//! | `lock_all_with_a_lost_reply_leaves_none_of_the_keys_held`, `a_campaign_with_a_lost_reply_leads_once_or_leaves_nothing` | a reply lost after the backend applied the obtain (each key of a `lock_all` in turn, a campaign): a retry-safe error and nothing held under a token nobody has, or, within the wait, one hold |
//! | `a_prolong_landing_after_the_release_resurrects_nothing` | a prolong sent before the guard's release (then before a forced release) and held back by a slow network lands after it: the key is free once both answered, never held again by the guard that gave it up |
//! | `calls_under_contention_end_by_their_deadline` | eight tasks hammer one key through the harness's short-deadline backend ([`Harness::behind_faults`], replies slowed by a tenth of the deadline): every call answers within its deadline plus [`cases::DEADLINE_MARGIN`] (500 ms), its retries after conflicts included |
//! | `fencing_tokens_count_wall_clock_microseconds` | a fresh key's first token is the wall clock in µs since the Unix epoch (within 10 minutes), the one scale of every backend, so a job moved to another backend keeps writing through its fences |
//! | `listing_agrees_with_inspect`, `listing_pages_cover_every_key_while_keys_come_and_go` | listing who holds what: keys in every state under a prefix, two a page, each as `inspect` shows it and only those with something live; pages in key order (where the backend says so) cover every key held throughout a walk while others come and go; a backend that cannot list says `Unsupported` |
//! | `waiters_show_in_the_listing_while_they_wait` | two obtains waiting for a held key show as two waiting tasks of one process; one cancelled, one shows; the key released and taken, none; waiting records never list as locks |
//! | `holder_info_round_trips`, `odd_keys_are_independent_locks`, `namespaces_never_interfere`, `invalid_input_is_refused_before_io` | data and names |
//! | `exclusion_under_contention`, `many_locks_held_at_once`, `lock_all_takes_every_key_or_none`, `leaders_never_overlap_and_terms_grow`, `waiting_obtain_honours_release_and_deadline`, `cancelled_wait_leaves_nothing_behind`, `lost_signal_fires_only_when_lost`, `dropped_guard_does_not_hold_forever` | the client layer over this backend |
//! | `data_loss_is_lost_and_fencing_still_grows`, `dropped_connections_leave_a_safe_state` | faults |
//! | `multiprocess_exclusion`, `killed_holder_frees_after_ttl` | separate OS processes |
//! | `shared_holds_keep_the_contract`, `semaphore_capacity_holds_under_contention`, `multiprocess_semaphore_stays_within_its_permits` | shared holds: permits by weight, capacity and weight mismatches, readers and a waiting writer, late and lost per hold, tasks and processes never above the capacity |
//! | `killed_holder_frees_only_its_own_permits` | a process holding one permit of two is killed: its permit opens after its own ttl, the other holder's stays held and unlost |
//! | `a_semaphore_admits_exactly_its_capacity` | the hold that fills a semaphore is admitted and the one past it is `Busy(Full)`, by count and by weight |
//! | `expired_shares_are_kept_oldest_first` | of expired shares with room for some beside a new one, the oldest are kept (their late prolong is `ProlongedLate`), the rest dropped (`Lost`) |
//! | `a_writers_marker_lives_from_its_last_busy_attempt` | a live waiting writer's later attempts renew its marker; a dead one's lapses with its request's ttl |
//! | `a_downgrade_wakes_every_waiter` | every subscription of the key hears a downgrade, not only the longest waiter |
//! | `a_late_release_of_one_share_leaves_the_others_alone`, `a_shares_prolong_renews_that_share_only` | a share's late release and its prolong touch that share only |
//! | `a_release_leaving_live_shares_starts_no_cooldown` | `delay_after` applies only to the release that leaves no live hold |
//! | `an_expired_share_asked_again_is_a_fresh_hold` | a token whose share expired gets a fresh hold with a fresh fencing token, never `Reacquired` |
//! | `a_mode_change_of_a_hold_that_is_gone_is_lost` | a mode change changes the caller's own live hold with the fencing token it names, or nothing: an upgrade of a share that was force-released (a writer in and out in between) is `Lost`, never a fresh write lock; so is a downgrade of an exclusive hold that is gone |
//! | `mode_changes_keep_the_hold` | a holder's obtain in the other mode changes it: down keeps the fencing token, up waits for the other holds (its share kept) and gets a fresh one; reentrant holds change no mode |
//! | `observer_sees_every_event` | a counting observer on the locker sees every obtain (obtained, busy, timed out), hold (released, lost), loss with its cause, watchdog batch and (behind the fault proxy) backend error; `Locker::stats` agrees |
//! | `histories_check_out` | six clients take, hold (some past their ttl), write through a fence and give back a mutex, a semaphore, a read-write lock (mode changes included), a leadership and now and then two keys at once for a few seconds (`LOCK_CONFORMANCE_HISTORY_SECS`), calls cancelled at random, the network frozen, slowed and cut and the data lost when the harness offers it, and three more clients pass a key waiting for wake-ups only; the recorded history is checked ([`history`]): no two holds relied on at once where the contract forbids it, shares within capacity, fencing tokens and terms growing in real-time order, the fence never admitting a lower token, every `Busy` and every inspection naming a client that may have held the key, inspections showing every hold relied on throughout them, a prolong or release after the key was taken over answered `Lost`, no error the faults do not explain, and no waiter asleep beside a free key. A failure writes an HTML timeline and the whole history |
//! | `shared_model_sequences` | random sequences of exclusive and shared obtains (capacities, weights, waiting writers), prolongs, releases and inspects agree step by step with a reference model of the shared holds; after every step the live weights fit the capacity and an exclusive hold is alone |
//!
//! # The anchors' cases and where they live
//! The numbers are those of this crate's `ANCHOR-TESTS.md`: what the leading lock libraries
//! test on every backend, and what none of them tests (28 to 32).
//!
//! 1, 4, 5: `second_owner_gets_busy`, `failed_obtain_leaves_holder_untouched`; 2, 10, 13:
//! `waiting_obtain_honours_release_and_deadline`; 3: `reentrant_obtain_counts_holds`; 6, 7:
//! `second_release_is_lost`, `foreign_token_changes_nothing`; 8, 20:
//! `late_calls_*`; 9: `force_release_then_retake_fences_the_old_holder`; 11:
//! `cancelled_wait_leaves_nothing_behind`; 12: `invalid_input_is_refused_before_io`; 14: the
//! client gives back a grant that arrives expired (lock-core's unit tests, where the delay
//! can be injected); 15: `exclusion_under_contention`; 16: `multiprocess_exclusion`; 17:
//! `many_locks_held_at_once`; 18, 19: `prolong_extends_the_lock`; 21:
//! `dropped_connections_leave_a_safe_state`; 22: `lost_signal_fires_only_when_lost`; 23:
//! `dropped_guard_does_not_hold_forever`; 24: `killed_holder_frees_after_ttl`; 25:
//! `odd_keys_are_independent_locks`; 26: `holder_info_round_trips`; 27 (quorum): no Redlock
//! backend exists yet; 28: `fencing_grows_across_everything`,
//! `data_loss_is_lost_and_fencing_still_grows`; 29: `model_sequences`; 30:
//! `paused_holder_is_fenced_out`; 31: `cooldown_blocks_everyone_then_frees`; 32: in the
//! backend crates' own tests; 33: `histories_check_out` ([`history`]); 34:
//! `a_prolong_landing_after_the_release_resurrects_nothing`.
//!
//! # Broken backends it catches
//! The crate's own tests run the suite against deliberately broken wrappers of
//! `MemoryBackend` and assert that a named case fails each: release that ignores the token
//! (`foreign_token_changes_nothing`), prolong that succeeds after another owner took the lock
//! and `Lost` reported as `ProlongedLate` (`late_calls_after_steal_are_lost`), fencing that
//! does not grow after expiry (`fencing_grows_across_everything`), cooldown ignored
//! (`cooldown_blocks_everyone_then_frees`), ttl ignored
//! (`unprolonged_lock_expires_after_its_ttl`), reentrant release that frees at the first
//! release (`reentrant_obtain_counts_holds`); `model_sequences` catches every one of them
//! too. `tests/broken_shared.rs` bends one decision of lock-core's own rules at a time for
//! the "Shared holds" rules (the last permit refused or one past the capacity admitted,
//! expired shares kept newest first, a writer's marker timed from its first attempt or
//! never lapsing, a downgrade waking one waiter, a late release or a prolong reaching every
//! share, a cooldown beside live shares, an expired share `Reacquired`), and the case named
//! after each rule must fail on it and pass on the unbent rules. `tests/broken_history.rs`
//! bends memory in ways only many clients at once show (leases ended 40 ms early, a stale
//! release deleting the newer hold, a racing obtain of two permits counted as one, fencing
//! restarting after lost data, a prolong that renews nothing, a `Busy` naming the previous
//! holder, a release that wakes nobody), and `histories_check_out` must name the rule each
//! breaks.
//!
//! # Speed
//! `LOCK_CONFORMANCE_CASES` sets the number of random sequences of `model_sequences`
//! (default 24, up to 24 steps each) and of `shared_model_sequences` (up to 32 steps);
//! raise it for deep runs. Their sequences come from a seed drawn each run, which a
//! failure prints; `LOCK_CONFORMANCE_SEED=<n>` (or [`Suite::with_seed`]) runs the same
//! sequences again. `LOCK_CONFORMANCE_HISTORY_SECS` sets how long
//! `histories_check_out` records (3 s by default; see TESTING.md for the long runs).

mod as_semaphore;
mod check;
mod counts;
mod harness;
mod pace;
mod worker;

pub mod cases;
pub mod fence;
pub mod history;
pub use cases::{faults, process};
pub mod table;

pub use as_semaphore::AsSemaphore;
pub use async_trait::async_trait;
pub use cases::model::case_count;
pub use check::{CaseResult, Failure};
pub use harness::{Faulty, Harness, NetworkFaults, Suite};

use std::future::Future;
use std::time::Duration;

/// How long one case may run before it counts as failed.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(600);

impl Suite {
    /// The suite as the [`suite!`] macro builds it inside a test module.
    #[doc(hidden)]
    pub fn for_test(name: &'static str, harness: impl Harness, module_path: &str) -> Self {
        let mut suite = Suite::new(name, harness);
        // libtest names tests by module path without the crate's name.
        suite.worker_test = match module_path.split_once("::") {
            Some((_, rest)) => format!("{rest}::conformance_worker"),
            None => "conformance_worker".to_owned(),
        };
        suite
    }
}

/// The worker side of the multi-process cases: runs the job in
/// [`process::WORKER_ENV`], on the backend its configuration names. Called by the suite's
/// ignored worker test; does nothing when the variable is unset.
#[doc(hidden)]
pub async fn run_worker(suite: &Suite) -> CaseResult {
    let Ok(raw) = std::env::var(process::WORKER_ENV) else {
        return Ok(());
    };
    let job: process::Job =
        serde_json::from_str(&raw).map_err(|e| Failure(format!("bad job: {e}")))?;
    let backend = suite.harness.connect(&job.config).await;
    match &job.history {
        Some(history) => crate::history::run_process(backend, history, &job.out).await,
        None => cases::process::run_job(backend, &job).await,
    }
}

/// Runs one case to completion on a fresh multi-threaded runtime and panics with the
/// backend's name, the case's name and the failure if it fails.
#[doc(hidden)]
pub fn run_case<F: Future<Output = CaseResult>>(suite: &Suite, case: &str, future: F) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(async { tokio::time::timeout(CASE_TIMEOUT, future).await });
    match result {
        Ok(Ok(())) => {}
        Ok(Err(failure)) => panic!("[{}] {case}: {failure}", suite.name),
        Err(_) => panic!(
            "[{}] {case}: did not finish within {CASE_TIMEOUT:?}",
            suite.name
        ),
    }
}

/// Calls `$callback!($($args)*; case, case, ...)` with every case of the suite, in the order
/// they run: the one list of cases that [`suite!`], [`CASE_NAMES`] and anyone running the
/// cases by hand (the `custom_backend` example) are made from. A test fails if a public case
/// function of the suite is missing from it.
///
/// It expands in item position (tests, functions, constants):
///
/// ```
/// macro_rules! count {
///     ($($case:ident),* $(,)?) => { const CASES: usize = [$(stringify!($case)),*].len(); };
/// }
/// lock_conformance::for_each_case!(count;);
/// assert_eq!(CASES, lock_conformance::CASE_NAMES.len());
/// ```
#[macro_export]
macro_rules! for_each_case {
    ($callback:path; $($args:tt)*) => {
        $callback! {
            $($args)*
            backend_reports_its_name,
            model_sequences,
            second_owner_gets_busy,
            failed_obtain_leaves_holder_untouched,
            reentrant_obtain_counts_holds,
            second_release_is_lost,
            foreign_token_changes_nothing,
            unprolonged_lock_expires_after_its_ttl,
            prolong_extends_the_lock,
            late_calls_when_untaken_are_late,
            late_calls_after_steal_are_lost,
            calls_past_grace_are_never_on_time,
            prolong_many_answers_each_as_prolong_would,
            prolong_many_renews_the_largest_records,
            busy_remaining_is_exact_both_ways,
            inspect_changes_nothing_before_late_calls,
            inspect_counts_reentrant_holds,
            reacquire_resets_the_ttl,
            late_release_with_delay_starts_the_cooldown,
            cooldown_blocks_everyone_then_frees,
            decrement_ignores_cooldown,
            fencing_grows_across_everything,
            fencing_tokens_count_wall_clock_microseconds,
            force_release_then_retake_fences_the_old_holder,
            holder_info_round_trips,
            odd_keys_are_independent_locks,
            namespaces_never_interfere,
            invalid_input_is_refused_before_io,
            exclusion_under_contention,
            many_locks_held_at_once,
            lock_all_takes_every_key_or_none,
            lock_all_with_a_lost_reply_leaves_none_of_the_keys_held,
            calls_under_contention_end_by_their_deadline,
            a_campaign_with_a_lost_reply_leads_once_or_leaves_nothing,
            leaders_never_overlap_and_terms_grow,
            waiting_obtain_honours_release_and_deadline,
            cancelled_wait_leaves_nothing_behind,
            lost_signal_fires_only_when_lost,
            dropped_guard_does_not_hold_forever,
            paused_holder_is_fenced_out,
            data_loss_is_lost_and_fencing_still_grows,
            dropped_connections_leave_a_safe_state,
            cancelled_calls_leave_nothing_held,
            obtain_retried_after_a_lost_reply_holds_once,
            a_prolong_landing_after_the_release_resurrects_nothing,
            partition_during_a_hold_fires_lost_in_time,
            slow_server_never_overstates_validity,
            partition_during_obtain_or_release_leaves_no_orphan,
            subscribe_in_a_partition_ends_by_its_deadline,
            leaders_never_overlap_under_network_faults,
            multiprocess_exclusion,
            multiprocess_lock_all_never_deadlocks_nor_overlaps,
            killed_holder_frees_after_ttl,
            shared_holds_keep_the_contract,
            mode_changes_keep_the_hold,
            a_semaphore_admits_exactly_its_capacity,
            expired_shares_are_kept_oldest_first,
            a_writers_marker_lives_from_its_last_busy_attempt,
            a_downgrade_wakes_every_waiter,
            a_release_wakes_a_waiter_at_once,
            a_release_wakes_one_waiter_not_two,
            the_last_share_beside_a_writer_wakes_every_waiter,
            a_resignation_wakes_the_candidate_not_the_observer,
            what_frees_nothing_wakes_nobody,
            a_forced_release_wakes_every_waiter,
            a_late_release_of_one_share_leaves_the_others_alone,
            a_shares_prolong_renews_that_share_only,
            a_release_leaving_live_shares_starts_no_cooldown,
            an_expired_share_asked_again_is_a_fresh_hold,
            a_mode_change_of_a_hold_that_is_gone_is_lost,
            a_capacity_holds_while_any_share_is_remembered,
            busy_names_the_hold_that_opens_room,
            inspect_shows_a_marker_only_beside_shares,
            semaphore_capacity_holds_under_contention,
            a_key_takes_a_thousand_readers,
            keys_taken_and_released_leave_nothing_behind,
            multiprocess_semaphore_stays_within_its_permits,
            killed_holder_frees_only_its_own_permits,
            shared_model_sequences,
            histories_check_out,
            listing_agrees_with_inspect,
            listing_pages_cover_every_key_while_keys_come_and_go,
            waiters_show_in_the_listing_while_they_wait,
            observer_sees_every_event
        }
    };
}

macro_rules! case_names {
    ($($case:ident),* $(,)?) => {
        /// The name of every case of the suite, in the order they run.
        pub const CASE_NAMES: &[&str] = &[$(stringify!($case)),*];
    };
}
for_each_case!(case_names;);

/// Stamps the whole suite into the enclosing module: one `#[test]` per case, plus the
/// ignored worker entry point the multi-process cases re-run the test binary with.
///
/// `$name` is the name the backend must report; `$harness` an expression building a
/// [`Harness`] (evaluated once per test).
#[macro_export]
macro_rules! suite {
    ($name:expr, $harness:expr) => {
        $crate::for_each_case!($crate::__suite_cases; $name, $harness;);

        #[test]
        #[ignore = "entry point of the multi-process cases; the suite runs it in child processes"]
        fn conformance_worker() {
            let suite = $crate::Suite::for_test($name, $harness, module_path!());
            $crate::run_case(&suite, "conformance_worker", $crate::run_worker(&suite));
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __suite_cases {
    ($name:expr, $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let suite = $crate::Suite::for_test($name, $harness, module_path!());
                $crate::run_case(&suite, stringify!($case), $crate::cases::$case(&suite));
            }
        )*
    };
}
