//! The whole conformance suite on Postgres, multi-process cases included.

mod support;

use support::harness::Postgres;

lock_conformance::suite!("postgres", Postgres::new());
