//! Private etcd members: one node, or a cluster of three, on free loopback ports with their
//! data in a temporary directory, stopped by pid (on drop, or by a reaper once the test
//! process is gone). Each member is started with `--heartbeat-interval 10
//! --election-timeout 100` so that a cluster elects a leader within a second and a
//! failover test does not wait a default election out. Debian's `etcd-server` package may
//! start a member of its own on 127.0.0.1:2379: nothing here uses it.
//!
//! `etcdctl` (Debian's `etcd-client`) asks the members what a test needs to know (the
//! leader, a revision) and moves the leadership.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Milliseconds between a leader's heartbeats.
pub const HEARTBEAT_MS: u64 = 10;
/// Milliseconds a follower waits without a heartbeat before it campaigns.
pub const ELECTION_MS: u64 = 100;

/// One member's ports and process.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    /// Stopped with SIGSTOP (and not continued yet).
    paused: bool,
}

/// A set of private etcd members forming one cluster.
pub struct EtcdCluster {
    members: Vec<Member>,
    /// Clients speak TLS, with the certificate in `dir/cert.pem`.
    tls: bool,
    etcd: PathBuf,
    etcdctl: PathBuf,
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `n` members (1 or 3, typically) and waits until they agree on a leader.
    /// Panics at once, naming the package, when `etcd` or `etcdctl` is missing.
    pub fn start(n: usize) -> Self {
        Self::start_with(n, false)
    }

    /// Starts `n` members that speak TLS to their clients (`https://`), with a certificate
    /// for 127.0.0.1 signed by a fresh certificate authority, both made by `openssl`
    /// ([`EtcdCluster::ca_pem`]).
    pub fn start_tls(n: usize) -> Self {
        Self::start_with(n, true)
    }

    /// The certificate authority that signed the members' certificate, which a client
    /// must trust (PEM).
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("ca.pem")).expect("the test certificate authority")
    }

    fn start_with(n: usize, tls: bool) -> Self {
        assert!(n >= 1, "a cluster needs a member");
        let etcd = crate::require("etcd", "etcd-server");
        let etcdctl = crate::require("etcdctl", "etcd-client");
        // In memory where the machine has a tmpfs: etcd syncs its log to disk on every
        // write, and on a disk busy with a build one sync took seconds, past the backend's
        // deadline (calls failed in a CI run); the tests are about etcd's protocol, not
        // about the disk.
        let dir = tempfile::Builder::new()
            .prefix("etcd-test-")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .expect("a temporary directory");
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: crate::free_port(),
                peer_port: crate::free_port(),
                child: None,
                paused: false,
            })
            .collect();
        if tls {
            make_certificates(dir.path());
        }
        let mut cluster = EtcdCluster {
            tls,
            members,
            etcd,
            etcdctl,
            dir,
        };
        for i in 0..n {
            cluster.launch(i);
        }
        let pids: Vec<u32> = cluster
            .members
            .iter()
            .filter_map(|m| m.child.as_ref().map(Child::id))
            .collect();
        crate::reap_when_gone(&pids, cluster.dir.path());
        cluster.wait_for_leader();
        cluster
    }

    /// Starts member `i` (again) on its ports and data directory.
    fn launch(&mut self, i: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let m = &self.members[i];
        let data = self.dir.path().join(&m.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", m.name)))
            .expect("the member's log file");
        let client = self.endpoint(i);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut command = Command::new(&self.etcd);
        if self.tls {
            command
                .arg("--cert-file")
                .arg(self.dir.path().join("cert.pem"))
                .arg("--key-file")
                .arg(self.dir.path().join("key.pem"));
        }
        let child = command
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "distlock-test"])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ELECTION_MS.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start etcd ({e}): `apt-get install etcd-server`"));
        self.members[i].child = Some(child);
        crate::wait_for_port(self.members[i].client_port, "etcd");
    }

    /// The client URLs of every member, `http://127.0.0.1:PORT`.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// The client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.members[i].client_port)
    }

    /// `etcdctl` trusting the members' certificate when they speak TLS.
    fn etcdctl_command(&self) -> Command {
        let mut command = Command::new(&self.etcdctl);
        command.env("ETCDCTL_API", "3");
        if self.tls {
            command.arg("--cacert").arg(self.dir.path().join("ca.pem"));
        }
        command
    }

    /// Runs `etcdctl` against every live member's endpoint; its standard output. Panics
    /// with its standard error when it fails.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let live: Vec<String> = (0..self.members.len())
            .filter(|&i| self.live(i))
            .map(|i| self.endpoint(i))
            .collect();
        self.etcdctl_on(&live.join(","), args)
    }

    fn etcdctl_on(&self, endpoints: &str, args: &[&str]) -> String {
        let out = self
            .etcdctl_command()
            .arg(format!("--endpoints={endpoints}"))
            .args(["--command-timeout", "5s"])
            .args(args)
            .output()
            .expect("etcdctl runs");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether member `i` runs and is not paused.
    fn live(&self, i: usize) -> bool {
        self.members[i].child.is_some() && !self.members[i].paused
    }

    /// The live members' views: (index, member id, leader id) for each that answers.
    fn statuses(&self) -> Vec<(usize, u64, u64)> {
        let mut seen = Vec::new();
        for i in 0..self.members.len() {
            if !self.live(i) {
                continue;
            }
            let out = self
                .etcdctl_command()
                .arg(format!("--endpoints={}", self.endpoint(i)))
                .args([
                    "--command-timeout",
                    "1s",
                    "endpoint",
                    "status",
                    "-w",
                    "json",
                ])
                .output();
            let Ok(out) = out else { continue };
            let Ok(json) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
                continue;
            };
            let status = &json[0]["Status"];
            if let (Some(id), Some(leader)) = (
                status["header"]["member_id"].as_u64(),
                status["leader"].as_u64(),
            ) {
                seen.push((i, id, leader));
            }
        }
        seen
    }

    /// Waits up to 30 s until every live member (running, not paused) names the same
    /// leader, a live one; its index.
    pub fn wait_for_leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = self.statuses();
            let running = (0..self.members.len()).filter(|&i| self.live(i)).count();
            if seen.len() == running {
                let leader = seen[0].2;
                if leader != 0 && seen.iter().all(|s| s.2 == leader) {
                    if let Some(&(i, _, _)) = seen.iter().find(|s| s.1 == leader) {
                        return i;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "the etcd members agreed on no leader within 30 s: {seen:?} (logs in {})",
                self.dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Hands the leadership to member `to` (`etcdctl move-leader`, sent to the leader), and
    /// waits until every running member names it.
    pub fn move_leader(&self, to: usize) {
        let seen = self.statuses();
        let leader = self.wait_for_leader();
        let target = seen
            .iter()
            .find(|s| s.0 == to)
            .map(|s| s.1)
            .unwrap_or_else(|| panic!("member {to} does not answer"));
        if leader != to {
            self.etcdctl_on(
                &self.endpoint(leader),
                &["move-leader", &format!("{target:x}")],
            );
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.wait_for_leader() != to {
            assert!(Instant::now() < deadline, "member {to} never led");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `SIG<name>` (`STOP`, `CONT`, `KILL`) to member `i` by its pid. A member
    /// paused with `STOP` counts as gone for [`EtcdCluster::wait_for_leader`] until `CONT`.
    pub fn signal(&mut self, i: usize, name: &str) {
        if let Some(child) = &self.members[i].child {
            crate::signal(child.id(), name);
            match name {
                "STOP" => self.members[i].paused = true,
                "CONT" => self.members[i].paused = false,
                _ => {}
            }
        }
    }

    /// Stops member `i`: SIGTERM and its exit (SIGKILL with `kill`), its data kept.
    pub fn stop(&mut self, i: usize, kill: bool) {
        self.members[i].paused = false;
        if let Some(mut child) = self.members[i].child.take() {
            crate::signal(child.id(), if kill { "KILL" } else { "TERM" });
            let _ = child.wait();
        }
    }

    /// Saves a snapshot of the live members' data to `path` (`etcdctl snapshot save`, from
    /// one member).
    pub fn snapshot(&self, path: &std::path::Path) {
        let live = (0..self.members.len())
            .find(|&i| self.live(i))
            .expect("a live member");
        self.etcdctl_on(
            &self.endpoint(live),
            &["snapshot", "save", &path.display().to_string()],
        );
    }

    /// Replaces a one-member cluster's data with `snapshot` (`etcdctl snapshot restore`, as
    /// an operator recovers a lost cluster) and starts it again; waits for it to lead.
    pub fn restore(&mut self, snapshot: &std::path::Path) {
        assert_eq!(self.members.len(), 1, "restore is for a one-member cluster");
        self.stop(0, false);
        let m = &self.members[0];
        let data = self.dir.path().join(&m.name);
        std::fs::remove_dir_all(&data).expect("the old data removed");
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let out = Command::new(&self.etcdctl)
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "restore", &snapshot.display().to_string()])
            .arg("--data-dir")
            .arg(&data)
            .args(["--name", &m.name])
            .args(["--initial-cluster", &format!("{}={peer}", m.name)])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster-token", "distlock-test"])
            .output()
            .expect("etcdctl runs");
        assert!(
            out.status.success(),
            "etcdctl snapshot restore: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.launch(0);
        self.wait_for_leader();
    }

    /// Starts a stopped member `i` again on its data. With a quorum up, call
    /// [`EtcdCluster::wait_for_leader`] before using the cluster.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} still runs");
        self.launch(i);
    }
}

/// A certificate authority (`ca.pem`) and a server certificate for 127.0.0.1 it signed
/// (`cert.pem`, `key.pem`) in `dir`. (TLS clients such as rustls refuse a self-signed
/// authority presented as the server's own certificate.)
fn make_certificates(dir: &std::path::Path) {
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("the certificate's extensions");
    let steps: [&[&str]; 3] = [
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=distlock test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "key.pem",
            "-out",
            "server.csr",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "cert.pem",
        ],
    ];
    for args in steps {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl, to make a test certificate: apt-get install openssl");
        assert!(status.success(), "openssl {args:?} failed");
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            if let Some(child) = &self.members[i].child {
                // A paused member ignores SIGKILL's exit until it runs again.
                crate::signal(child.id(), "CONT");
            }
            self.stop(i, true);
        }
    }
}
