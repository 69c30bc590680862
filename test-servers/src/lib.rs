//! Servers for the workspace's tests: a Redis or Postgres to share (the configured one, the
//! local default when it answers, else a private one), and private servers (Redis,
//! Postgres, PgBouncer) on free loopback ports in temporary directories, for tests that
//! stop, pause or restart them. Each is stopped by its pid: on drop, or, for servers kept
//! in a `static` (never dropped), by a detached reaper once the test process is gone.
//!
//! A server that cannot be had is a panic that says how to get one: tests never pass
//! silently without their server.

pub mod bench;
pub mod cluster;
pub mod locks;
pub mod postgres;
pub mod proxy;
pub mod redis;
pub mod sentinel;

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback port nobody listens on (at the time of asking).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Waits up to 30 s for something to listen on `port`, else panics naming `what`.
pub fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on port {port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the tests run as root (Postgres and PgBouncer refuse to).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Stops `pids` (SIGINT, then SIGKILL after 5 s) and removes `dir` once this test process
/// is gone: a detached shell polls for our pid.
pub fn reap_when_gone(pids: &[u32], dir: &Path) {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let pids = pids.join(" ");
    let script = format!(
        "while kill -0 {owner} 2>/dev/null; do sleep 1; done; kill -INT {pids} 2>/dev/null; \
         sleep 5; kill -KILL {pids} 2>/dev/null; rm -rf '{dir}'",
        owner = std::process::id(),
        dir = dir.display()
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}
