//! Obtain+release cycles of the file backend against the raw file-lock cycle, in one run.
//!
//! Raw baseline: open + flock + pread + pwrite + unlock + close of one small file, the
//! cheapest correct read-modify-write a lock file can do. A lock cycle is two of those (obtain
//! and release), so 0.5 of the raw rate is the ceiling for any lock-file design.
//!
//! Run: `cargo bench -p lock-file --bench file_cycle`

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use lock_core::LockBackend;
use lock_file::FileBackend;
use test_servers::bench::{backend_cycles, interleaved, rate, runtime};

const CYCLES: usize = 20_000;
const ROUNDS: usize = 5;

/// `n` raw read-modify-write cycles of one file.
async fn raw(path: PathBuf, n: usize) {
    let mut buf = [0u8; 256];
    for i in 0..n {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        f.lock().unwrap();
        let _ = f.read_at(&mut buf, 0).unwrap();
        let line = format!("{{\"v\":1,\"fencing\":{i}}}\n");
        f.write_all_at(line.as_bytes(), 0).unwrap();
        f.unlock().unwrap();
    }
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let backend: Arc<dyn LockBackend> =
        Arc::new(FileBackend::new(tmp.path().join("locks")).unwrap());
    let raw_path = tmp.path().join("raw.lock");
    runtime().block_on(async {
        let [r, b] = interleaved(ROUNDS, async || {
            let (path, backend) = (raw_path.clone(), backend.clone());
            [
                rate(1, CYCLES, move |_, n| raw(path.clone(), n)).await,
                rate(1, CYCLES, move |p, n| backend_cycles(backend.clone(), p, n)).await,
            ]
        })
        .await;
        println!("raw open+flock+pread+pwrite+unlock+close  {r:>9.0} /s");
        println!(
            "file backend cycle, 64 keys               {b:>9.0} /s  ratio {:.3}",
            b / r
        );
    });
}
