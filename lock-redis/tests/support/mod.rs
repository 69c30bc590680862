//! A Redis server for tests: `REDIS_URL` when set, else the local default server when it
//! answers, else a private `redis-server` on a free loopback port in a temporary directory,
//! stopped by its pid. No Redis at all is a failure that says how to get one.

#![allow(dead_code, unreachable_pub)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private server, killed on drop.
pub struct PrivateRedis {
    pub url: String,
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl PrivateRedis {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("a free port")
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server ({e}): install it with `apt-get install redis-server`, or set REDIS_URL"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on port {port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        PrivateRedis {
            url: format!("redis://127.0.0.1:{port}/0"),
            port,
            child,
            _dir: dir,
        }
    }

    /// Stops the server by its pid (SIGKILL: nothing is saved).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The URL of a shared server for the conformance suite, starting a private one (kept for
/// the life of the test process) when none is configured or listening.
pub fn shared_url() -> String {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return url;
    }
    if TcpStream::connect("127.0.0.1:6379").is_ok() {
        return "redis://127.0.0.1:6379/0".to_owned();
    }
    static SERVER: std::sync::OnceLock<std::sync::Mutex<PrivateRedis>> = std::sync::OnceLock::new();
    let server = SERVER.get_or_init(|| std::sync::Mutex::new(PrivateRedis::start()));
    server.lock().unwrap().url.clone()
}
