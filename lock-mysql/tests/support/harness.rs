//! The conformance harness: every backend in a fresh table, as a user of the harness's
//! own (so that cutting its connections touches no other test's), both dropped with it.

use std::sync::{Arc, Mutex};

use lock_conformance::{async_trait, Faulty, Harness};
use lock_core::backend::Token;
use lock_core::LockBackend;
use lock_mysql::MySqlBackend;
use tokio::sync::OnceCell;

use super::exec;
use test_servers::as_user;

pub struct MySql {
    /// The server as root, for the test's own statements.
    admin_url: String,
    user: String,
    user_made: OnceCell<()>,
    /// Every table a backend of this harness was given.
    tables: Mutex<Vec<String>>,
}

impl MySql {
    pub fn new() -> Self {
        Self::at(super::shared_url())
    }

    pub fn at(admin_url: String) -> Self {
        MySql {
            admin_url,
            user: format!("lt_{}", &Token::generate().unwrap().to_hex()[..12]),
            user_made: OnceCell::new(),
            tables: Mutex::default(),
        }
    }

    /// The URL the backends use: the harness's user.
    async fn url(&self) -> String {
        self.user_made
            .get_or_init(|| async {
                exec(
                    &self.admin_url,
                    &format!(
                        "CREATE USER IF NOT EXISTS '{u}'@'%'; \
                         GRANT ALL ON *.* TO '{u}'@'%'",
                        u = self.user
                    ),
                )
                .await;
            })
            .await;
        as_user(&self.admin_url, &self.user)
    }

    /// A table nobody used, dropped with the harness.
    pub fn fresh_table(&self) -> String {
        let table = format!("t_{}", &Token::generate().unwrap().to_hex()[..16]);
        self.tables.lock().unwrap().push(table.clone());
        table
    }

    fn tables(&self) -> Vec<String> {
        self.tables.lock().unwrap().clone()
    }
}

impl Drop for MySql {
    fn drop(&mut self) {
        let tables: Vec<String> = self.tables().iter().map(|t| format!("`{t}`")).collect();
        let (url, user) = (self.admin_url.clone(), self.user.clone());
        let made_user = self.user_made.initialized();
        // Drop runs outside any runtime we may block: a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if !tables.is_empty() {
                    exec(&url, &format!("DROP TABLE IF EXISTS {}", tables.join(", "))).await;
                }
                if made_user {
                    exec(&url, &format!("DROP USER IF EXISTS '{user}'@'%'")).await;
                }
            });
        })
        .join();
    }
}

#[async_trait]
impl Harness for MySql {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        let url = self.url().await;
        let backend = MySqlBackend::builder(url)
            .table(&self.fresh_table())
            .build()
            .unwrap();
        Arc::new(backend)
    }

    async fn behind_faults(&self) -> Option<Faulty> {
        let url = self.url().await;
        let (proxy, proxied) = test_servers::proxy::in_front_of(&url);
        let table = self.fresh_table();
        let deadline = std::time::Duration::from_secs(1);
        let backend = MySqlBackend::builder(proxied)
            .table(&table)
            .timeout(deadline)
            .build()
            .unwrap();
        let direct = MySqlBackend::builder(url).table(&table).build().unwrap();
        Some(Faulty {
            backend: Arc::new(backend),
            direct: Arc::new(direct),
            faults: Box::new(proxy),
            deadline,
        })
    }

    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        // Every row, fencing memory included, as if the database were restored from
        // nothing; the clock floor must keep fencing growing.
        for table in self.tables() {
            let exists = exec(
                &self.admin_url,
                &format!(
                    "SELECT COUNT(*) FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{}'",
                    table
                ),
            )
            .await;
            if exists[0][0].as_deref() == Some("1") {
                exec(&self.admin_url, &format!("DELETE FROM `{table}`")).await;
            }
        }
        true
    }

    /// The rows the backend's own sweep leaves behind: after sweeping until nothing is
    /// left to sweep, a row past its `forget_us` would stay for ever.
    async fn lasting_records(&self) -> Option<u64> {
        let url = self.url().await;
        let mut lasting = 0;
        for table in self.tables() {
            let exists = exec(
                &self.admin_url,
                &format!(
                    "SELECT COUNT(*) FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{table}'"
                ),
            )
            .await;
            if exists[0][0].as_deref() != Some("1") {
                continue;
            }
            let backend = MySqlBackend::builder(url.clone())
                .table(&table)
                .build()
                .unwrap();
            while backend.sweep().await.unwrap() > 0 {}
            let left = exec(
                &self.admin_url,
                &format!(
                    "SELECT COUNT(*) FROM `{table}` \
                     WHERE forget_us < CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)"
                ),
            )
            .await;
            lasting += left[0][0].as_deref().unwrap_or("0").parse::<u64>().unwrap();
        }
        Some(lasting)
    }

    async fn drop_connections(&self, _: &Arc<dyn LockBackend>) -> bool {
        let ids = exec(
            &self.admin_url,
            &format!(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{}'",
                self.user
            ),
        )
        .await;
        let admin = sqlx::MySqlPool::connect(&self.admin_url).await.unwrap();
        for id in ids.iter().filter_map(|r| r[0].clone()) {
            // A connection may end by itself meanwhile: errors are fine here.
            let _ = sqlx::raw_sql(&format!("KILL CONNECTION {id}"))
                .execute(&admin)
                .await;
        }
        admin.close().await;
        true
    }

    async fn shared_config(&self) -> Option<String> {
        Some(format!("{} {}", self.url().await, self.fresh_table()))
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        let (url, table) = config.split_once(' ').expect("url and table");
        Arc::new(MySqlBackend::builder(url).table(table).build().unwrap())
    }
}
