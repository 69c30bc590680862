//! The whole conformance suite on MariaDB, multi-process cases included.

mod support;

use support::harness::MySql;

lock_conformance::suite!("mysql", MySql::new());

/// The mutex suite again, every lock one permit of a semaphore of 1.
mod as_semaphore {
    use super::*;
    lock_conformance::suite!("mysql", lock_conformance::AsSemaphore(MySql::new()));
}
