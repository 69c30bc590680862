//! The whole conformance suite again, through a real PgBouncer in transaction mode (2 server
//! connections) in front of a private Postgres, with notifications off as they must be there.

mod support;

use std::sync::OnceLock;

use lock_postgres::Statements;
use support::harness::Postgres;
use support::{PgBouncer, PrivatePostgres, PASSWORD};

/// A harness through the bouncer; the servers live as long as the test process. Worker processes of the
/// multi-process cases get the URL in their config and start nothing.
fn harness() -> Postgres {
    if std::env::var_os(lock_conformance::process::WORKER_ENV).is_some() {
        return Postgres::at(String::new(), false).with_statements(Statements::Simple);
    }
    // Before anything starts: a missing pgbouncer fails each case at once, not after a
    // private Postgres per case.
    PgBouncer::require();
    static SERVERS: OnceLock<(PrivatePostgres, PgBouncer)> = OnceLock::new();
    let (server, bouncer) = SERVERS.get_or_init(|| {
        let server = PrivatePostgres::start();
        let bouncer = PgBouncer::start(server.port, PASSWORD);
        server.reap_at_exit();
        bouncer.reap_at_exit();
        (server, bouncer)
    });
    // PgBouncer before 1.21 (Debian 12 has 1.18) cannot carry prepared statements.
    Postgres::at(bouncer.url.clone(), false)
        .with_admin(server.url.clone())
        .with_statements(Statements::Simple)
}

lock_conformance::suite!("postgres", harness());
