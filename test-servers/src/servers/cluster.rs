//! A private Redis Cluster: 3 primaries and 3 replicas on free loopback ports, in a
//! temporary directory, each node stopped by its pid.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` of a private cluster or Sentinel set.
pub struct Node {
    /// Its client port on 127.0.0.1.
    pub port: u16,
    child: Option<Child>,
    args: Vec<String>,
}

impl Node {
    pub(crate) fn spawn(port: u16, args: Vec<String>) -> Self {
        let mut node = Node {
            port,
            child: None,
            args,
        };
        node.start();
        node
    }

    /// Starts the node again with the arguments it first had (after [`Node::kill`]).
    pub fn start(&mut self) {
        let child = Command::new(crate::require("redis-server", "redis-server"))
            .args(&self.args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}): install it with `apt-get install redis-server`")
            });
        self.child = Some(child);
        crate::wait_for_port(self.port, "redis-server");
    }

    /// Its pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `SIG<name>` (`STOP`, `CONT`) to the node by its pid.
    pub fn signal(&self, name: &str) {
        if let Some(pid) = self.pid() {
            crate::signal(pid, name);
        }
    }

    /// Stops the node by its pid (SIGKILL: nothing is saved).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `redis-cli -p PORT ARGS…`, its output trimmed; panics when redis-cli fails.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `redis-cli -p PORT ARGS…`, its output trimmed.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("redis-cli: apt-get install redis-tools");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A private cluster, killed on drop.
pub struct RedisCluster {
    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/`: the primaries as seeds.
    pub url: String,
    /// Every node, primaries first (as created: nodes 3..6 replicate 0..3, in some order).
    pub nodes: Vec<Node>,
    dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts six nodes and joins them into a cluster of three primaries with a replica
    /// each; returns once every node reports `cluster_state:ok` and all 16384 slots are
    /// served. A node is declared failed after 1 s without answers (`cluster-node-timeout`).
    pub fn start() -> Self {
        // A port picked free can be taken by another test's server before this node binds
        // it: the node dies, `redis-cli --cluster create` then waits for ever for it to
        // join. So the join has a deadline, and a failed start is tried again on new ports.
        let mut failures = Vec::new();
        for _ in 0..3 {
            match Self::try_start() {
                Ok(cluster) => {
                    cluster.wait_until_ok();
                    return cluster;
                }
                Err(why) => failures.push(why),
            }
        }
        panic!(
            "a Redis Cluster did not start in 3 tries: {}",
            failures.join("; ")
        )
    }

    /// Six nodes joined by `redis-cli --cluster create` within 60 s, or why not.
    fn try_start() -> Result<Self, String> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut nodes = Vec::new();
        for i in 0..6 {
            // Redis 7 takes the cluster bus port apart (else it is port + 10000, maybe taken).
            let (port, bus) = (crate::free_port(), crate::free_port());
            let ndir = dir.path().join(format!("n{i}"));
            std::fs::create_dir_all(&ndir).expect("node dir");
            let args = vec![
                "--bind".into(),
                "127.0.0.1".into(),
                "--port".into(),
                port.to_string(),
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-port".into(),
                bus.to_string(),
                "--cluster-config-file".into(),
                ndir.join("nodes.conf").display().to_string(),
                "--cluster-node-timeout".into(),
                "1000".into(),
                "--save".into(),
                String::new(),
                "--appendonly".into(),
                "no".into(),
                "--dir".into(),
                ndir.display().to_string(),
            ];
            nodes.push(Node::spawn(port, args));
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut create = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli: apt-get install redis-tools");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = create.try_wait().expect("redis-cli runs") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = create.kill();
                let _ = create.wait();
                return Err("redis-cli --cluster create did not end within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut said = String::new();
        if let Some(mut out) = create.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut out, &mut said);
        }
        if !status.success() {
            return Err(format!("redis-cli --cluster create failed: {said}"));
        }
        Ok(RedisCluster {
            url: format!("redis+cluster://{}/", addrs[..3].join(",")),
            nodes,
            dir,
        })
    }

    /// Waits (up to 60 s) until every running node says `cluster_state:ok` and knows a
    /// primary for every slot, and every replica finished its sync (a replica that never
    /// synced refuses to take over from a failed primary).
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self.nodes.iter().filter(|n| n.pid().is_some()).all(|n| {
                let info = n.cli(&["CLUSTER", "INFO"]);
                let replication = n.cli(&["INFO", "replication"]);
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the private Redis Cluster did not become ok within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The node that is primary for `slot` now, by asking a running node.
    pub fn primary_of(&self, slot: u16) -> usize {
        self.try_primary_of(slot)
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
    }

    /// The node that is primary for `slot` now, if one is (not during a failover).
    pub fn try_primary_of(&self, slot: u16) -> Option<usize> {
        let port = self.port_of(slot, true)?;
        self.nodes.iter().position(|n| n.port == port)
    }

    /// The node that replicates `slot`'s primary.
    pub fn replica_of(&self, slot: u16) -> usize {
        let port = self
            .port_of(slot, false)
            .unwrap_or_else(|| panic!("no replica of slot {slot}'s primary"));
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("the replica is one of ours")
    }

    fn port_of(&self, slot: u16, primary: bool) -> Option<u16> {
        let running = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a running node");
        // CLUSTER SHARDS would be nicer to parse, but CLUSTER NODES is in every version:
        // `id addr flags master ping pong epoch state slots…`.
        let nodes = running.cli(&["CLUSTER", "NODES"]);
        let lines: Vec<Vec<&str>> = nodes.lines().map(|l| l.split(' ').collect()).collect();
        let owner = lines.iter().find(|f| {
            f.len() > 8
                && f[2].contains("master")
                && !f[2].contains("fail")
                && f[8..].iter().any(|r| match r.split_once('-') {
                    Some((a, b)) => {
                        a.parse::<u16>().is_ok_and(|a| a <= slot)
                            && b.parse::<u16>().is_ok_and(|b| slot <= b)
                    }
                    None => r.parse::<u16>() == Ok(slot),
                })
        })?;
        let pick = if primary {
            owner
        } else {
            lines
                .iter()
                .find(|f| f.len() > 3 && f[3] == owner[0] && !f[2].contains("fail"))?
        };
        let addr = pick[1].split('@').next()?;
        addr.rsplit(':').next().and_then(|p| p.parse().ok())
    }

    /// Every node's pid (for a reaper).
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(Node::pid).collect()
    }

    /// The cluster's temporary directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// The URL of a cluster shared by a test process: `REDIS_CLUSTER_URL` when set, else a
/// private one started on first use and stopped by a reaper once the process is gone.
pub fn shared_url() -> String {
    if let Ok(url) = std::env::var("REDIS_CLUSTER_URL") {
        return url;
    }
    static CLUSTER: std::sync::OnceLock<RedisCluster> = std::sync::OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            let cluster = RedisCluster::start();
            crate::reap_when_gone(&cluster.pids(), cluster.dir());
            cluster
        })
        .url
        .clone()
}
