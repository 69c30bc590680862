//! The whole conformance suite on the file backend, multi-process cases included, and the
//! mutex suite again through semaphores of one permit.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use lock_conformance::{async_trait, Harness};
use lock_core::backend::Token;
use lock_core::LockBackend;
use lock_file::FileBackend;

/// One temporary root per test; every backend a fresh directory under it.
struct Files {
    root: tempfile::TempDir,
    made: Mutex<Vec<PathBuf>>,
}

impl Files {
    fn new() -> Self {
        Files {
            root: tempfile::tempdir().expect("a temporary directory"),
            made: Mutex::default(),
        }
    }

    fn fresh_dir(&self) -> PathBuf {
        let token = Token::generate().expect("OS random generator");
        let dir = self.root.path().join(format!("ns-{}", token.to_hex()));
        self.made.lock().expect("not poisoned").push(dir.clone());
        dir
    }
}

#[async_trait]
impl Harness for Files {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(FileBackend::new(self.fresh_dir()).expect("lock directory"))
    }

    async fn lose_data(&self, _: &Arc<dyn LockBackend>) -> bool {
        // Data loss for a file backend: every record file deleted.
        for dir in self.made.lock().expect("not poisoned").iter() {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                std::fs::remove_file(entry.path()).expect("remove a record");
            }
        }
        true
    }

    /// The files the backend's own sweep leaves in the backends' directories.
    async fn lasting_records(&self) -> Option<u64> {
        let made = self.made.lock().expect("not poisoned").clone();
        let mut files = 0;
        for dir in made.iter().filter(|dir| dir.exists()) {
            FileBackend::new(dir)
                .expect("lock directory")
                .sweep()
                .await
                .expect("a sweep");
            files += std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .count();
        }
        Some(files as u64)
    }

    async fn shared_config(&self) -> Option<String> {
        Some(self.fresh_dir().to_string_lossy().into_owned())
    }

    async fn connect(&self, config: &str) -> Arc<dyn LockBackend> {
        Arc::new(FileBackend::new(config).expect("lock directory"))
    }
}

mod direct {
    use super::*;
    lock_conformance::suite!("file", Files::new());
}

/// The mutex suite again, every lock one permit of a semaphore of 1.
mod as_semaphore {
    use super::*;
    lock_conformance::suite!("file", lock_conformance::AsSemaphore(Files::new()));
}
