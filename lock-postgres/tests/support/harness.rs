//! The conformance harness: every backend in a fresh table of a schema private to the
//! harness, dropped with it.

use std::sync::{Arc, Mutex};

use lock_conformance::{async_trait, Faulty, Harness};
use lock_core::backend::Token;
use lock_core::LockBackend;
use lock_postgres::{PostgresBackend, Statements};

use super::exec;

pub struct Postgres {
    url: String,
    /// Where test-side statements go: the server itself, not a bouncer in front of it.
    admin_url: String,
    schema: String,
    notifications: bool,
    statements: Statements,
    made: Mutex<Vec<PostgresBackend>>,
}

impl Postgres {
    pub fn new() -> Self {
        Self::at(super::shared_url(), true)
    }

    /// Through a URL of choice (a PgBouncer), with or without LISTEN/NOTIFY.
    pub fn at(url: String, notifications: bool) -> Self {
        Postgres {
            admin_url: url.clone(),
            url,
            schema: format!("lt_{}", &Token::generate().unwrap().to_hex()[..16]),
            notifications,
            statements: Statements::default(),
            made: Mutex::default(),
        }
    }

    /// Sends statements in `form` (the simple one through an old PgBouncer).
    pub fn with_statements(mut self, form: Statements) -> Self {
        self.statements = form;
        self
    }

    /// Sends test-side statements straight to the server at `url`.
    pub fn with_admin(mut self, url: String) -> Self {
        self.admin_url = url;
        self
    }

    fn make(&self, table: &str) -> PostgresBackend {
        let backend = PostgresBackend::builder(&self.url)
            .table(&self.schema, table)
            .notifications(self.notifications)
            .statements(self.statements)
            .build()
            .unwrap();
        self.made.lock().unwrap().push(backend.clone());
        backend
    }

    fn fresh_table() -> String {
        format!("t_{}", &Token::generate().unwrap().to_hex()[..16])
    }

    fn made(&self) -> Vec<PostgresBackend> {
        self.made.lock().unwrap().clone()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let (url, schema) = (self.admin_url.clone(), self.schema.clone());
        self.made.lock().unwrap().clear();
        if url.is_empty() {
            return;
        }
        // Drop runs outside any runtime we may block: a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(exec(
                &url,
                &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
            ));
        })
        .join();
    }
}

#[async_trait]
impl Harness for Postgres {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(self.make(&Self::fresh_table()))
    }

    async fn behind_faults(&self) -> Option<Faulty> {
        let (proxy, url) = test_servers::proxy::in_front_of(&self.url);
        let table = Self::fresh_table();
        let deadline = std::time::Duration::from_secs(1);
        let backend = PostgresBackend::builder(&url)
            .table(&self.schema, &table)
            .notifications(self.notifications)
            .statements(self.statements)
            .timeout(deadline)
            .build()
            .unwrap();
        Some(Faulty {
            backend: Arc::new(backend),
            direct: Arc::new(self.make(&table)),
            faults: Box::new(proxy),
            deadline,
        })
    }

    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        // Every row, fencing memory included, as if the database were restored from
        // nothing; the clock floor must keep fencing growing.
        for b in self.made() {
            let table = b.table();
            exec(
                &self.admin_url,
                &format!(
                    "DO $$ BEGIN IF to_regclass('{table}') IS NOT NULL THEN \
                     TRUNCATE {table}; END IF; END $$"
                ),
            )
            .await;
        }
        true
    }

    async fn drop_connections(&self, _: &Arc<dyn LockBackend>) -> bool {
        // Behind a bouncer, server connections are shared by every test of the process:
        // only idle ones are cut (the bouncer checks a connection before reuse), so no
        // other test's statement dies with them.
        let idle = if self.admin_url == self.url {
            ""
        } else {
            " AND state = 'idle'"
        };
        for b in self.made() {
            exec(
                &self.admin_url,
                &format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = '{}'{idle}",
                    b.application_name()
                ),
            )
            .await;
        }
        // pg_terminate_backend only signals: wait until those sessions are really gone, so
        // the case sees dead connections, not ones that die halfway through it.
        let admin = sqlx::PgPool::connect(&self.admin_url).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for b in self.made() {
            loop {
                let alive: i64 = sqlx::query_scalar(&format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1{idle}"
                ))
                .bind(b.application_name())
                .fetch_one(&admin)
                .await
                .unwrap();
                if alive == 0 || std::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        admin.close().await;
        true
    }

    /// The rows the backend's own sweep leaves behind: after sweeping until nothing is
    /// left to sweep, a row past its `forget_at` (or with none) would stay for ever.
    async fn lasting_records(&self) -> Option<u64> {
        let admin = sqlx::PgPool::connect(&self.admin_url).await.unwrap();
        let mut lasting = 0;
        for b in self.made() {
            let table = b.table();
            let exists: Option<String> =
                sqlx::query_scalar(&format!("SELECT to_regclass('{table}')::text"))
                    .fetch_one(&admin)
                    .await
                    .unwrap();
            if exists.is_none() {
                continue;
            }
            while b.sweep().await.unwrap() > 0 {}
            let left: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {table} WHERE forget_at < clock_timestamp() \
                 OR forget_at = 'infinity'"
            ))
            .fetch_one(&admin)
            .await
            .unwrap();
            lasting += left as u64;
        }
        admin.close().await;
        Some(lasting)
    }

    async fn shared_config(&self) -> Option<String> {
        Some(format!(
            "{} {} {}",
            self.url,
            self.schema,
            Self::fresh_table()
        ))
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        let mut parts = config.split(' ');
        let (url, schema, table) = (parts.next(), parts.next(), parts.next());
        Arc::new(
            PostgresBackend::builder(url.expect("url"))
                .table(schema.expect("schema"), table.expect("table"))
                .notifications(self.notifications)
                .statements(self.statements)
                .build()
                .unwrap(),
        )
    }
}
