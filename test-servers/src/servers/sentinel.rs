//! A private Sentinel set: a primary, a replica and three sentinels on free loopback ports,
//! in a temporary directory, each stopped by its pid.

use std::time::{Duration, Instant};

use crate::cluster::{cli, Node};

/// The service name the sentinels monitor.
pub const SERVICE: &str = "locks";

/// A private primary, its replica and three sentinels (quorum 2), killed on drop.
pub struct RedisSentinel {
    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/locks/0`.
    pub url: String,
    /// The data nodes: the first primary, then its replica (roles change on failover).
    pub data: Vec<Node>,
    /// The three sentinels.
    pub sentinels: Vec<Node>,
    dir: tempfile::TempDir,
}

impl RedisSentinel {
    /// Starts the set; returns once every sentinel knows the primary and its replica. A
    /// primary silent for 1 s is declared down (`down-after-milliseconds`).
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let primary_port = crate::free_port();
        let mut data = Vec::new();
        for i in 0..2 {
            let port = if i == 0 {
                primary_port
            } else {
                crate::free_port()
            };
            let ndir = dir.path().join(format!("d{i}"));
            std::fs::create_dir_all(&ndir).expect("node dir");
            let mut args: Vec<String> = [
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(["--dir".into(), ndir.display().to_string()]);
            if i > 0 {
                args.extend([
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    primary_port.to_string(),
                ]);
            }
            data.push(Node::spawn(port, args));
        }
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = crate::free_port();
            let conf = dir.path().join(format!("sentinel{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "bind 127.0.0.1\nport {port}\ndir {dir}\n\
                     sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds {SERVICE} 1000\n\
                     sentinel failover-timeout {SERVICE} 10000\n\
                     sentinel parallel-syncs {SERVICE} 1\n",
                    dir = dir.path().display()
                ),
            )
            .expect("sentinel.conf");
            sentinels.push(Node::spawn(
                port,
                vec![conf.display().to_string(), "--sentinel".into()],
            ));
        }
        let addrs: Vec<String> = sentinels
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let set = RedisSentinel {
            url: format!("redis+sentinel://{}/{SERVICE}/0", addrs.join(",")),
            data,
            sentinels,
            dir,
        };
        set.wait_until_known();
        set
    }

    fn wait_until_known(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = self.sentinels.iter().all(|s| {
                let replicas = s.cli(&["SENTINEL", "REPLICAS", SERVICE]);
                let sentinels = s.cli(&["SENTINEL", "SENTINELS", SERVICE]);
                replicas.contains("slave")
                    && sentinels.lines().filter(|l| *l == "name").count() >= 2
            });
            let synced = self.data[1]
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up");
            if ready && synced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the private Sentinel set was not ready within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The port of the primary as the first sentinel sees it.
    pub fn primary_port(&self) -> u16 {
        let reply = cli(
            self.sentinels[0].port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE],
        );
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no primary known to the sentinel: {reply:?}"))
    }

    /// Index in `data` of the node on `port`.
    pub fn data_node(&self, port: u16) -> usize {
        self.data
            .iter()
            .position(|n| n.port == port)
            .expect("one of our data nodes")
    }

    /// Waits (up to 60 s) until the sentinels name a primary other than `old_port` and
    /// that node says it is a primary.
    pub fn wait_for_failover(&self, old_port: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let port = self.primary_port();
            if port != old_port && cli(port, &["ROLE"]).starts_with("master") {
                return port;
            }
            assert!(
                Instant::now() < deadline,
                "no failover away from port {old_port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every process's pid (for a reaper).
    pub fn pids(&self) -> Vec<u32> {
        self.data
            .iter()
            .chain(&self.sentinels)
            .filter_map(Node::pid)
            .collect()
    }
}

/// The URL of a Sentinel set shared by a test process: `REDIS_SENTINEL_URL` when set, else
/// a private one started on first use and stopped by a reaper once the process is gone.
pub fn shared_url() -> String {
    if let Ok(url) = std::env::var("REDIS_SENTINEL_URL") {
        return url;
    }
    static SET: std::sync::OnceLock<RedisSentinel> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let set = RedisSentinel::start();
        crate::reap_when_gone(&set.pids(), set.dir.path());
        set
    })
    .url
    .clone()
}
