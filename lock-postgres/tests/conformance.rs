//! The whole conformance suite on Postgres, multi-process cases included.

mod support;

use support::harness::Postgres;

lock_conformance::suite!("postgres", Postgres::new());

/// The mutex suite again, every lock one permit of a semaphore of 1: the shared holds that
/// the client decides (`src/storage.rs`) keep the mutex's contract.
mod as_semaphore {
    use super::*;
    lock_conformance::suite!("postgres", lock_conformance::AsSemaphore(Postgres::new()));
}
