//! Redis servers: `REDIS_URL` when set, else the local default server when it answers,
//! else a private `redis-server` on a free loopback port in a temporary directory.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// A private server, killed on drop.
pub struct PrivateRedis {
    /// `redis://127.0.0.1:PORT/0`, or `rediss://` for a TLS server.
    pub url: String,
    /// The server's port.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl PrivateRedis {
    /// Starts a server without persistence.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// A server that speaks TLS only, with a fresh self-signed certificate for 127.0.0.1
    /// (made by `openssl`); its `url` is `rediss://...`.
    pub fn start_tls() -> Self {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = crate::free_port();
        let mut cmd = Command::new(crate::require("redis-server", "redis-server"));
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path());
        if tls {
            let status = Command::new("openssl")
                .args([
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                ])
                .args([
                    "-subj",
                    "/CN=localhost",
                    "-addext",
                    "subjectAltName=IP:127.0.0.1",
                ])
                .arg("-keyout")
                .arg(dir.path().join("key.pem"))
                .arg("-out")
                .arg(dir.path().join("cert.pem"))
                .stderr(Stdio::null())
                .status()
                .expect("openssl, to make a test certificate: apt-get install openssl");
            assert!(status.success(), "openssl could not make a certificate");
            cmd.args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--tls-auth-clients", "no"])
                .arg("--tls-cert-file")
                .arg(dir.path().join("cert.pem"))
                .arg("--tls-key-file")
                .arg(dir.path().join("key.pem"));
        } else {
            cmd.args(["--port", &port.to_string()]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server ({e}): install it with `apt-get install redis-server`, or set REDIS_URL"));
        crate::wait_for_port(port, "redis-server");
        PrivateRedis {
            url: format!(
                "{}://127.0.0.1:{port}/0",
                if tls { "rediss" } else { "redis" }
            ),
            port,
            child,
            _dir: dir,
        }
    }

    /// Sends `SIG<name>` (`STOP`, `CONT`) to the server by its pid.
    pub fn signal(&self, name: &str) {
        crate::signal(self.child.id(), name);
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
    let server = SERVER.get_or_init(|| {
        let server = PrivateRedis::start();
        crate::reap_when_gone(&[server.child.id()], server._dir.path());
        std::sync::Mutex::new(server)
    });
    server.lock().unwrap().url.clone()
}
