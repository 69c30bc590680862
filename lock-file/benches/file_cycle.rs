//! Obtain+release cycles of the file backend against the raw file-lock cycle, in one run.
//!
//! Raw baseline: open + flock + pread + pwrite + unlock + close of one small file, the
//! cheapest correct read-modify-write a lock file can do. A lock cycle is two of those (obtain
//! and release), so 0.5 of the raw rate is the ceiling for any lock-file design.
//!
//! Run: `cargo bench -p lock-file --bench file_cycle`

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{HolderInfo, Key, LockBackend, ObtainRequest, ReleaseRequest, Token, Ttl};
use lock_file::FileBackend;

const CYCLES: usize = 20_000;
const ROUNDS: usize = 5;

fn raw(path: &std::path::Path) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 256];
    for i in 0..CYCLES {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap();
        f.lock().unwrap();
        let _ = f.read_at(&mut buf, 0).unwrap();
        let line = format!("{{\"v\":1,\"fencing\":{i}}}\n");
        f.write_all_at(line.as_bytes(), 0).unwrap();
        f.unlock().unwrap();
    }
    start.elapsed()
}

async fn cycles(backend: &Arc<dyn LockBackend>, keys: &[Key]) -> Duration {
    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    let holder = HolderInfo::current();
    let start = Instant::now();
    for i in 0..CYCLES {
        let key = &keys[i % keys.len()];
        let token = Token::generate().unwrap();
        let _ = backend
            .obtain(ObtainRequest {
                key,
                token: &token,
                ttl,
                holder: &holder,
            })
            .await
            .unwrap();
        let _ = backend
            .release(ReleaseRequest {
                key,
                token: &token,
                delay_after: None,
            })
            .await
            .unwrap();
    }
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend: Arc<dyn LockBackend> =
        Arc::new(FileBackend::new(tmp.path().join("locks")).unwrap());
    let one = [Key::new("bench").unwrap()];
    let many: Vec<Key> = (0..256)
        .map(|i| Key::new(format!("bench-{i}")).unwrap())
        .collect();
    let raw_path = tmp.path().join("raw.lock");
    let (mut r, mut a, mut b) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        r.push(raw(&raw_path));
        a.push(rt.block_on(cycles(&backend, &one)));
        b.push(rt.block_on(cycles(&backend, &many)));
    }
    let rate = |d: Duration| CYCLES as f64 / d.as_secs_f64();
    let (r, a, b) = (rate(median(r)), rate(median(a)), rate(median(b)));
    println!("raw open+flock+pread+pwrite+unlock+close  {r:>9.0} /s");
    println!(
        "file backend cycle, one key               {a:>9.0} /s  ratio {:.3}",
        a / r
    );
    println!(
        "file backend cycle, 256 keys              {b:>9.0} /s  ratio {:.3}",
        b / r
    );
}
