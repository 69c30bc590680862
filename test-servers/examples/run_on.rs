//! `run_on cluster|sentinel|etcd|etcd3 COMMAND [ARGS…]`: starts a private Redis Cluster (3
//! primaries, 3 replicas), Sentinel set (a primary, a replica, 3 sentinels), or etcd cluster
//! (one member, or three) on free loopback ports, runs the command with `LOCK_URL` set to
//! its URL, stops the servers and exits with the command's status. CI runs the
//! `dev_prod_swap` example this way.

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let topology = args.next().unwrap_or_default();
    let Some(program) = args.next() else {
        eprintln!("usage: run_on cluster|sentinel|etcd|etcd3 COMMAND [ARGS…]");
        return ExitCode::from(2);
    };
    // Kept alive until the command ends; dropping them kills the servers.
    let (_cluster, _sentinel, _etcd, url) = match topology.as_str() {
        "cluster" => {
            let c = test_servers::cluster::RedisCluster::start();
            let url = c.url.clone();
            (Some(c), None, None, url)
        }
        "sentinel" => {
            let s = test_servers::sentinel::RedisSentinel::start();
            let url = s.url.clone();
            (None, Some(s), None, url)
        }
        "etcd" | "etcd3" => {
            let e = test_servers::etcd::EtcdCluster::start(if topology == "etcd" { 1 } else { 3 });
            let hosts: Vec<String> = e
                .endpoints()
                .iter()
                .map(|u| u.trim_start_matches("http://").to_owned())
                .collect();
            let url = format!("etcd://{}/run-on", hosts.join(","));
            (None, None, Some(e), url)
        }
        other => {
            eprintln!("run_on: {other:?} is not cluster, sentinel, etcd or etcd3");
            return ExitCode::from(2);
        }
    };
    eprintln!("run_on: LOCK_URL={url}");
    match Command::new(&program)
        .args(args)
        .env("LOCK_URL", &url)
        .status()
    {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("run_on: {program} ended with {s}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("run_on: cannot run {program}: {e}");
            ExitCode::FAILURE
        }
    }
}
