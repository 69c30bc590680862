//! Postgres servers: `DATABASE_URL` when set, else the local default server when it lets
//! `postgres` in without a password, else a private one (`initdb` in a temporary directory,
//! a free loopback port, run as the unprivileged `postgres` user when the tests run as
//! root); and PgBouncer in transaction mode in front of one.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The password of the private servers' `postgres` user (they refuse others over TCP).
pub const PASSWORD: &str = "lock-test-pw";

const HOW: &str = "install PostgreSQL (`apt-get install postgresql`) or set DATABASE_URL";

/// A private server, stopped on drop.
pub struct PrivatePostgres {
    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`.
    pub url: String,
    /// The server's port.
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    bin: PathBuf,
}

/// Runs `program` as the `postgres` user when we are root (initdb and postgres refuse root).
pub fn unprivileged(program: impl AsRef<Path>) -> Command {
    if crate::is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--clear-groups",
            "--",
        ])
        .arg(program.as_ref());
        c
    } else {
        Command::new(program.as_ref())
    }
}

fn bin_dir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions
        .pop()
        .filter(|d| d.join("initdb").exists())
        .unwrap_or_else(|| panic!("no initdb found: {HOW}"))
}

impl PrivatePostgres {
    /// Makes a cluster (scram auth over TCP, password [`PASSWORD`]) and starts it.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        if crate::is_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(
                ok,
                "cannot hand {} to the postgres user",
                dir.path().display()
            );
        }
        let bin = bin_dir();
        std::fs::write(dir.path().join("pw"), PASSWORD).unwrap();
        let out = unprivileged(bin.join("initdb"))
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", dir.path().join("pw").display()))
            .arg("-D")
            .arg(dir.path().join("data"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb ({e}): {HOW}"));
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = crate::free_port();
        let mut server = PrivatePostgres {
            url: format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"),
            port,
            child: None,
            dir,
            bin,
        };
        server.run();
        server
    }

    fn run(&mut self) {
        let child = unprivileged(self.bin.join("postgres"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args([
                "-p",
                &self.port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
            ])
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "fsync=off", "-c", "max_connections=200"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start postgres ({e}): {HOW}"));
        self.child = Some(child);
        crate::wait_for_port(self.port, "postgres");
        // Listening comes a moment before accepting logins; wait until it answers.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.accepts() {
            assert!(Instant::now() < deadline, "postgres never accepted a login");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn accepts(&self) -> bool {
        Command::new(self.bin.join("pg_isready"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    /// Stops the server by its pid (SIGINT: a fast shutdown that keeps the data).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::signal(child.id(), "INT");
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops and starts the server on the same port and data.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// The temporary directory holding the data and the socket.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl PrivatePostgres {
    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Keeps the server for the rest of the test process, then stops it (for statics).
    pub fn reap_at_exit(&self) {
        crate::reap_when_gone(&self.pid().into_iter().collect::<Vec<_>>(), self.dir.path());
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The URL of a shared server for the conformance suite, starting a private one (kept for
/// the life of the test process) when none is configured or listening.
pub fn shared_url() -> String {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return url;
    }
    // The local server only if it lets `postgres` in without a password (a freshly
    // installed Debian server asks for one over TCP): else a private one.
    let local = "postgres://postgres@127.0.0.1:5432/postgres";
    let login = || {
        Command::new("psql")
            .args(["-w", "-q", "-tA", "-c", "SELECT 1", local])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if TcpStream::connect("127.0.0.1:5432").is_ok() && login() {
        return local.to_owned();
    }
    static SERVER: std::sync::OnceLock<std::sync::Mutex<PrivatePostgres>> =
        std::sync::OnceLock::new();
    let server = SERVER.get_or_init(|| {
        let server = PrivatePostgres::start();
        server.reap_at_exit();
        std::sync::Mutex::new(server)
    });
    server.lock().unwrap().url.clone()
}

/// A `pgbouncer` in transaction mode in front of `port`, stopped on drop.
pub struct PgBouncer {
    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`, through the bouncer.
    pub url: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// Starts a bouncer (transaction mode, 2 server connections) in front of the Postgres
    /// on `pg_port`, letting `postgres` in with `password`.
    pub fn start(pg_port: u16, password: &str) -> Self {
        Self::require();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = crate::free_port();
        let ini = format!(
            "[databases]\npostgres = host=127.0.0.1 port={pg_port} dbname=postgres\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
             unix_socket_dir =\nauth_type = plain\nauth_file = {dir}/users.txt\n\
             pool_mode = transaction\ndefault_pool_size = 2\nmax_client_conn = 200\n\
             server_check_delay = 0\nserver_check_query = select 1\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {dir}/pgbouncer.log\n",
            dir = dir.path().display()
        );
        std::fs::write(dir.path().join("pgbouncer.ini"), ini).unwrap();
        std::fs::write(
            dir.path().join("users.txt"),
            format!("\"postgres\" \"{password}\"\n"),
        )
        .unwrap();
        if crate::is_root() {
            let _ = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status();
        }
        let pgbouncer = crate::require("pgbouncer", "pgbouncer");
        let child = unprivileged(pgbouncer)
            .arg(dir.path().join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start pgbouncer ({e}): install it with `apt-get install pgbouncer`")
            });
        crate::wait_for_port(port, "pgbouncer");
        PgBouncer {
            url: format!("postgres://postgres:{password}@127.0.0.1:{port}/postgres"),
            child,
            dir,
        }
    }

    /// Panics at once, naming the package, when pgbouncer is not installed: call it before
    /// starting the Postgres a bouncer goes in front of.
    pub fn require() {
        crate::require("pgbouncer", "pgbouncer");
    }

    /// Keeps the bouncer for the rest of the test process, then stops it (for statics).
    pub fn reap_at_exit(&self) {
        crate::reap_when_gone(&[self.child.id()], self.dir.path());
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
