//! MariaDB servers: `MYSQL_URL` when set, else the local default server when it lets
//! `root` in without a password, else a private one (`mariadb-install-db` in a temporary
//! directory, a free loopback port, stopped by pid).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HOW: &str = "install MariaDB (`apt-get install mariadb-server`) or set MYSQL_URL";

/// How a private server treats its log on commit (`innodb_flush_log_at_trx_commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Written and flushed at every commit (1): a crash loses nothing committed.
    EveryCommit,
    /// Written and flushed once a second (0): a crash loses up to a second of commits.
    EverySecond,
}

/// A private MariaDB, stopped on drop. Database `test`; `root` without a password from
/// 127.0.0.1.
pub struct PrivateMariaDb {
    /// `mysql://root@127.0.0.1:PORT/test`.
    pub url: String,
    /// The server's port.
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    flush: Flush,
}

impl PrivateMariaDb {
    /// Makes a data directory and starts a server on it.
    pub fn start(flush: Flush) -> Self {
        crate::require("mariadbd", "mariadb-server");
        let install = crate::require("mariadb-install-db", "mariadb-server");
        let dir = tempfile::tempdir().expect("a temporary directory");
        // A temporary directory of its own: a server starting up deletes the temporary
        // tables it finds in its tmpdir, another server's included (seen as "Unknown table
        // 'mysql.tmp_proxies_priv'" when two installs ran at once in /tmp).
        std::fs::create_dir_all(dir.path().join("tmp")).expect("a tmpdir");
        let mut cmd = Command::new(install);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .arg(format!("--tmpdir={}", dir.path().join("tmp").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if crate::is_root() {
            cmd.arg("--user=root");
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run mariadb-install-db ({e}): {HOW}"));
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let port = crate::free_port();
        let mut server = PrivateMariaDb {
            url: format!("mysql://root@127.0.0.1:{port}/test"),
            port,
            child: None,
            dir,
            flush,
        };
        server.run();
        server.cli(
            "CREATE DATABASE IF NOT EXISTS test; \
                    CREATE USER IF NOT EXISTS root@'127.0.0.1'; \
                    GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;",
        );
        server
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    fn run(&mut self) {
        let flush = match self.flush {
            Flush::EveryCommit => "1",
            Flush::EverySecond => "0",
        };
        let mut cmd = Command::new(crate::require("mariadbd", "mariadb-server"));
        cmd.arg("--no-defaults")
            .arg(format!(
                "--datadir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--tmpdir={}",
                self.dir.path().join("tmp").display()
            ))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("pid").display()
            ))
            .arg(format!("--port={}", self.port))
            .args([
                "--bind-address=127.0.0.1",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=32M",
                "--max-connections=300",
            ])
            .arg(format!("--innodb-flush-log-at-trx-commit={flush}"));
        if crate::is_root() {
            cmd.arg("--user=root");
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start mariadbd ({e}): {HOW}"));
        self.child = Some(child);
        crate::wait_for_port(self.port, "mariadbd");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.accepts() {
            assert!(Instant::now() < deadline, "mariadbd never accepted a login");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn accepts(&self) -> bool {
        Command::new("mariadb")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-e", "SELECT 1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Runs `sql` as root over the server's socket; panics with the client's message if
    /// it fails.
    pub fn cli(&self, sql: &str) -> String {
        let out = Command::new("mariadb")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-N", "-B", "-e", sql])
            .output()
            .unwrap_or_else(|e| panic!("cannot run the mariadb client ({e}): {HOW}"));
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops the server by its pid: SIGTERM, a clean shutdown that keeps every commit.
    pub fn stop(&mut self) {
        self.stop_with("TERM");
    }

    /// Kills the server by its pid (SIGKILL): a crash, which loses the commits its log did
    /// not flush yet ([`Flush::EverySecond`]).
    pub fn crash(&mut self) {
        self.stop_with("KILL");
    }

    fn stop_with(&mut self, signal: &str) {
        if let Some(mut child) = self.child.take() {
            crate::signal(child.id(), signal);
            let deadline = Instant::now() + Duration::from_secs(60);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data, after [`stop`](Self::stop) or
    /// [`crash`](Self::crash).
    pub fn start_again(&mut self) {
        self.run();
    }

    /// Stops the server cleanly and keeps a copy of its data, as a backup taken now.
    pub fn snapshot(&mut self) {
        self.stop();
        self.copy_data("data", "snapshot");
        self.run();
    }

    /// Stops the server and puts back the data of the last [`snapshot`](Self::snapshot),
    /// then starts it: every write since is lost, as after a restore from a backup.
    pub fn restore(&mut self) {
        self.stop();
        let data = self.dir.path().join("data");
        std::fs::remove_dir_all(&data).expect("the data directory goes");
        self.copy_data("snapshot", "data");
        self.run();
    }

    fn copy_data(&self, from: &str, to: &str) {
        let (from, to) = (self.dir.path().join(from), self.dir.path().join(to));
        let _ = std::fs::remove_dir_all(&to);
        let ok = Command::new("cp")
            .arg("-a")
            .arg(&from)
            .arg(&to)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cp -a {} {}", from.display(), to.display());
    }

    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The temporary directory holding the data and the socket.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Keeps the server for the rest of the test process, then stops it (for statics).
    pub fn reap_at_exit(&self) {
        crate::reap_when_gone(&self.pid().into_iter().collect::<Vec<_>>(), self.dir.path());
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        self.stop_with("KILL");
    }
}

/// The URL of a shared server for the conformance suite, starting a private one (kept for
/// the life of the test process) when none is configured or answering.
pub fn shared_url() -> String {
    if let Ok(url) = std::env::var("MYSQL_URL") {
        return url;
    }
    let local = "mysql://root@127.0.0.1:3306/test";
    let login = || {
        Command::new("mariadb")
            .args(["-h127.0.0.1", "-P3306", "-uroot", "-e", "SELECT 1", "test"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if TcpStream::connect("127.0.0.1:3306").is_ok() && login() {
        return local.to_owned();
    }
    static SERVER: std::sync::OnceLock<std::sync::Mutex<PrivateMariaDb>> =
        std::sync::OnceLock::new();
    let server = SERVER.get_or_init(|| {
        let server = PrivateMariaDb::start(Flush::EveryCommit);
        server.reap_at_exit();
        std::sync::Mutex::new(server)
    });
    server.lock().unwrap().url.clone()
}
