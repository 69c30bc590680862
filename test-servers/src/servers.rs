//! The servers: shared or private Redis (one server, a Cluster, Sentinel), Postgres with
//! PgBouncer, MariaDB, private etcd members, a fault proxy in front of any of them, and the process plumbing they
//! share (free ports, signals by pid, a reaper for servers that outlive their test).

pub mod cluster;
pub mod etcd;
pub mod logs;
pub mod mysql;
pub mod postgres;
pub mod proxy;
pub mod redis;
pub mod sentinel;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
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
    rustix::process::geteuid().is_root()
}

/// Where `program` is (on `PATH`, or in `/usr/sbin` and `/sbin`, where Debian puts
/// pgbouncer and where root's `PATH` may not look); else a panic at once, naming the Debian
/// `package` to install. A test calls it before it starts anything, so that a missing
/// binary costs no private server per test case.
pub fn require(program: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{program} is not installed: `apt-get install {package}` (as root)")
        })
}

/// Sends `SIG<name>` (`INT`, `TERM`, `KILL`, `STOP`, `CONT`) to `pid`, through the
/// system call: no `kill` program needed. Panics on another name; a process already gone
/// is not an error.
pub fn signal(pid: u32, name: &str) {
    use rustix::process::{kill_process, Pid, Signal};
    let signal = match name {
        "INT" => Signal::INT,
        "TERM" => Signal::TERM,
        "KILL" => Signal::KILL,
        "STOP" => Signal::STOP,
        "CONT" => Signal::CONT,
        other => panic!("no signal SIG{other} here"),
    };
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .unwrap_or_else(|| panic!("{pid} is not a process id"));
    match kill_process(pid, signal) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => panic!("kill -{name} {pid:?}: {e}"),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Signals reach a process on a machine without `kill(1)` (a minimal Debian has no
    /// procps): the check runs in a copy of this test binary whose `PATH` leads nowhere,
    /// so that no program can be found by name (with no `PATH` at all, glibc would look in
    /// /bin and /usr/bin). Stopping servers through `kill(1)` failed
    /// there: the signal never came, and a stop waited 30 s.
    #[test]
    fn signals_need_no_kill_program() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "servers::tests::signal_a_child",
                "--test-threads=1",
            ])
            .env_clear()
            .env("PATH", "/nonexistent")
            .output()
            .unwrap();
        assert!(out.status.success(), "signal_a_child failed without PATH");
        // A name that matches nothing runs nothing and succeeds: it must have run.
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("1 passed"), "{said}");
    }

    #[test]
    #[ignore = "run by signals_need_no_kill_program, without PATH"]
    fn signal_a_child() {
        let mut child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        signal(child.id(), "TERM");
        assert_eq!(child.wait().unwrap().signal(), Some(15));
    }

    #[test]
    fn a_missing_program_is_named_with_its_package() {
        let panic =
            std::panic::catch_unwind(|| require("no-such-server-xyz", "xyz-server")).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(message.contains("apt-get install xyz-server"), "{message}");
    }
}
