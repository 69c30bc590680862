//! The etcd rows: the backend's cycles next to the least a leased lock costs on etcd (a
//! lease, a put-if-absent transaction on it, a delete), shared holds and handoffs, on
//! `ETCD_URL`'s members or a private member started for the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::{LockBackend, Locker};
use lock_etcd::EtcdBuilder;
use test_servers::bench::{rounds, run};
use test_servers::etcd::EtcdCluster;

use crate::report::Table;
use crate::{handoffs, several_keys, shared_holds, through, watched, Batching, Size, CONCURRENCY};

/// A lease of 30 s, a transaction that puts the key on it only if the key is absent, and
/// a delete: 3 round trips, what any leased lock on etcd needs at the least.
async fn raw_cycles(client: Client, prefix: String, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    let (mut kv, mut lease) = (client.kv_client(), client.lease_client());
    for i in 0..n {
        let started = Instant::now();
        let key = format!("bench-raw/{prefix}{}", i % 64);
        let id = lease.grant(30, None).await.expect("lease grant").id();
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.as_str(),
                "bench",
                Some(PutOptions::new().with_lease(id)),
            )]);
        assert!(
            kv.txn(txn).await.expect("txn").succeeded(),
            "the key was free"
        );
        kv.delete(key.as_str(), None).await.expect("delete");
        times.push(started.elapsed());
    }
    times
}

pub(crate) async fn etcd(table: &mut Table, size: Size) -> Result<(), String> {
    // A private member unless ETCD_URL names a cluster (kept alive for the whole run).
    let (_member, url) = match std::env::var("ETCD_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            if std::process::Command::new("etcd")
                .arg("--version")
                .output()
                .is_err()
            {
                return Err("no etcd binary (apt-get install etcd-server), no ETCD_URL".into());
            }
            let member = tokio::task::spawn_blocking(|| EtcdCluster::start(1))
                .await
                .map_err(|e| e.to_string())?;
            let host = member.endpoint(0).trim_start_matches("http://").to_owned();
            (Some(member), format!("etcd://{host}/bench"))
        }
    };
    let backend = EtcdBuilder::from_url(&url)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| {
            format!(
                "no etcd at {} (set ETCD_URL): {e}",
                lock_core::redact_url(&url)
            )
        })?;
    let endpoints: Vec<String> = url
        .trim_start_matches("etcd://")
        .split('/')
        .next()
        .unwrap_or_default()
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::to_owned)
        .collect();
    let client = Client::connect(&endpoints, None)
        .await
        .map_err(|e| e.to_string())?;
    let backend: Arc<dyn LockBackend> = Arc::new(backend);
    if size.watched_only {
        etcd_watched(table, backend, size, &endpoints[0]).await;
        return Ok(());
    }
    let locker = Locker::new(backend.clone());
    for tasks in CONCURRENCY {
        let [raw, project] = rounds(size.rounds, async || {
            let c = client.clone();
            [
                run(tasks, size.pg_cycles, move |prefix, count| {
                    raw_cycles(c.clone(), prefix, count)
                })
                .await,
                through(&locker, tasks, size.pg_cycles, true).await,
            ]
        })
        .await;
        let what = "lease + put-if-absent txn + delete";
        table.cycles("etcd", "obtain()+release", tasks, what, raw, project);
    }
    let etcd_size = Size {
        cycles: size.pg_cycles,
        ..size
    };
    shared_holds(table, "etcd", &locker, etcd_size).await;
    several_keys(table, "etcd", &locker, etcd_size).await;
    handoffs(table, "etcd", backend.clone(), size, None).await;
    etcd_watched(table, backend, size, &endpoints[0]).await;
    Ok(())
}

/// The watched locks, with the member's gRPC calls per period, and its CPU and the writes
/// through its log over the whole hold (its `/metrics`).
async fn etcd_watched(table: &mut Table, backend: Arc<dyn LockBackend>, size: Size, member: &str) {
    // Each lock's prolong is a call of its own: a read, the keep-alives of its two leases
    // sent at once (one round trip) and a read-only transaction; three round trips too
    // where a new ttl takes a read, two lease grants at once and the transaction.
    let batch = Some(Batching {
        locks: 1,
        round_trips: 3,
    });
    let before = Metrics::of(member).await;
    let started = Instant::now();
    watched(table, "etcd", backend, size, batch, || async {
        Metrics::of(member).await.map(|m| m.calls)
    })
    .await;
    let took = started.elapsed().as_secs_f64();
    if let (Some(a), Some(b)) = (before, Metrics::of(member).await) {
        table.note(format!(
            "etcd member over {took:.0} s of {} watched locks (taken, held, released): \
             {:.1} CPU seconds ({:.0}% of a core), {:.0} writes through the log, {:.0} \
             gRPC calls",
            size.watched,
            b.cpu - a.cpu,
            100.0 * (b.cpu - a.cpu) / took,
            b.writes - a.writes,
            b.calls.saturating_sub(a.calls) as f64,
        ));
    }
}

/// What an etcd member's `/metrics` count.
#[derive(Clone, Copy)]
struct Metrics {
    /// CPU seconds of the member's process (`process_cpu_seconds_total`).
    cpu: f64,
    /// Proposals committed to its log (`etcd_server_proposals_committed_total`).
    writes: f64,
    /// gRPC calls it answered (`grpc_server_handled_total`, every method and code).
    calls: u64,
}

impl Metrics {
    /// The member at `endpoint` (`http://host:port` or `host:port`), read now; `None` when
    /// it cannot be read within 5 s.
    async fn of(endpoint: &str) -> Option<Metrics> {
        tokio::time::timeout(Duration::from_secs(5), Metrics::read(endpoint))
            .await
            .ok()
            .flatten()
    }

    async fn read(endpoint: &str) -> Option<Metrics> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let host = endpoint.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        let sum = |name: &str| -> f64 {
            text.lines()
                .filter(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        Some(Metrics {
            cpu: sum("process_cpu_seconds_total"),
            writes: sum("etcd_server_proposals_committed_total"),
            calls: sum("grpc_server_handled_total") as u64,
        })
    }
}
