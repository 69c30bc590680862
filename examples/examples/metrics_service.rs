//! A service that takes locks and serves their metrics to Prometheus.
//!
//! ```text
//! cargo run -p examples --example metrics_service                       # file lock, 10 s
//! LOCK_URL=redis://127.0.0.1:6379/0 cargo run -p examples --example metrics_service -- \
//!     --listen 127.0.0.1:9898 --workers 16 --seconds 60
//! curl -s 127.0.0.1:9898/metrics | grep distlock_
//! ```
//!
//! `--workers` tasks contend for `--keys` keys (each holds its lock 5-50 ms, then works
//! 5-50 ms without it), and one task
//! loses its lock on purpose every second (a 100 ms ttl without a watchdog, held for
//! 300 ms), so `distlock_locks_lost_total{cause="expired"}` moves too. The exporter is
//! `metrics-exporter-prometheus`, installed before the first lock is taken; the locker
//! records through `MetricsObserver`. At the end the program reads its own endpoint twice
//! over and prints how the counters moved. `--samples FILE` also writes each obtain's wait
//! (CSV: workers, result, waited seconds) for `scripts/plot-wait-times.py`.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::observe::metrics::{MetricsObserver, HISTOGRAMS};
use distlock::observe::{Event, Observer};
use distlock::{Attempt, LockConfig, Locker};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Options {
    listen: SocketAddr,
    workers: usize,
    keys: usize,
    seconds: u64,
    samples: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        listen: "127.0.0.1:0".parse().expect("an address"),
        workers: 8,
        keys: 2,
        seconds: 10,
        samples: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--listen" => o.listen = value.parse().map_err(|e| bad(&e))?,
            "--workers" => o.workers = value.parse().map_err(|e| bad(&e))?,
            "--keys" => o.keys = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => o.seconds = value.parse().map_err(|e| bad(&e))?,
            "--samples" => o.samples = Some(value),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if o.workers == 0 || o.keys == 0 {
        return Err("--workers and --keys must be at least 1".into());
    }
    Ok(o)
}

/// Hands every event to the metrics, and keeps each obtain's wait for `--samples`: two
/// observers in one.
struct Tee {
    metrics: MetricsObserver,
    waits: Mutex<Vec<(&'static str, f64)>>,
}

impl Observer for Tee {
    fn event(&self, event: &Event<'_>) {
        self.metrics.event(event);
        if let Event::ObtainEnded { end, waited, .. } = event {
            let mut waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
            waits.push((end.as_str(), waited.as_secs_f64()));
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = options().map_err(|e| format!("metrics_service: {e}"))?;
    // A free port when none is asked for: the exporter does not say which one it bound.
    let listen = if o.listen.port() == 0 {
        std::net::TcpListener::bind(o.listen)?.local_addr()?
    } else {
        o.listen
    };
    let mut exporter = PrometheusBuilder::new()
        .with_recommended_naming(true)
        .with_http_listener(listen);
    for (name, buckets) in HISTOGRAMS {
        exporter = exporter.set_buckets_for_metric(Matcher::Full(name.into()), buckets)?;
    }
    exporter.install()?;

    let config = LockConfig::from_env().unwrap_or_else(|_| {
        let dir = std::env::temp_dir().join("distlock-metrics-example");
        LockConfig::from_url(format!("file://{}", dir.display()))
    });
    let tee = Arc::new(Tee {
        metrics: MetricsObserver::new().with_label("service", "metrics_service"),
        waits: Mutex::new(Vec::new()),
    });
    let locker = config.locker().await?.with_observer(tee.clone());
    println!(
        "{} workers on {} keys through the {} backend for {} s; metrics on http://{listen}/metrics",
        o.workers,
        o.keys,
        locker.backend().name(),
        o.seconds
    );

    let until = tokio::time::Instant::now() + Duration::from_secs(o.seconds);
    let mut tasks = Vec::new();
    for n in 0..o.workers {
        let (locker, key) = (locker.clone(), format!("report-{}", n % o.keys));
        tasks.push(tokio::spawn(
            async move { work(&locker, &key, until).await },
        ));
    }
    tasks.push(tokio::spawn({
        let locker = locker.clone();
        async move { lose_locks(&locker, until).await }
    }));

    tokio::time::sleep(Duration::from_secs(o.seconds) / 2).await;
    let halfway = scrape(listen).await?;
    for task in tasks {
        task.await??;
    }
    let end = scrape(listen).await?;
    let stats = locker.stats();
    println!("locker stats at the end: {stats:?}");
    for (name, labels) in [
        (
            "distlock_obtain_duration_seconds_count",
            "result=\"obtained\"",
        ),
        (
            "distlock_obtain_duration_seconds_count",
            "result=\"timeout\"",
        ),
        ("distlock_locks_lost_total", "cause=\"expired\""),
        ("distlock_hold_duration_seconds_count", "end=\"lost\""),
    ] {
        let (a, b) = (sum(&halfway, name, labels), sum(&end, name, labels));
        println!("{name}{{{labels}}}: {a} halfway, {b} at the end");
    }
    let obtained = |text: &str| sum(text, "distlock_obtain_duration_seconds_count", "obtained");
    if obtained(&end) <= obtained(&halfway) || sum(&end, "distlock_locks_lost_total", "") == 0.0 {
        return Err("the served metrics did not move as locks were taken and lost".into());
    }
    if let Some(path) = &o.samples {
        let waits = tee.waits.lock().unwrap_or_else(|p| p.into_inner());
        let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(file, "workers,result,waited_s")?;
        for (result, waited) in waits.iter() {
            writeln!(file, "{},{result},{waited:.6}", o.workers)?;
        }
        println!("{} wait samples written to {path}", waits.len());
    }
    Ok(())
}

/// Takes `key` again and again until `until`, holding it 5-50 ms each time, with 5-50 ms
/// of other work in between.
async fn work(locker: &Locker, key: &str, until: tokio::time::Instant) -> distlock::Result<()> {
    while tokio::time::Instant::now() < until {
        let attempt = locker
            .lock(key)
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(2))
            .obtain()
            .await?;
        if let Attempt::Obtained(guard) = attempt {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(5..=50))).await;
            let _ = guard.release().await?;
        }
        tokio::time::sleep(Duration::from_millis(fastrand::u64(5..=50))).await;
    }
    Ok(())
}

/// Once a second, a lock held past its ttl without a watchdog: it is lost, and says so.
async fn lose_locks(locker: &Locker, until: tokio::time::Instant) -> distlock::Result<()> {
    while tokio::time::Instant::now() < until {
        let lock = locker.lock("short-lived").ttl(Duration::from_millis(100));
        if let Attempt::Obtained(guard) = lock.try_obtain().await? {
            tokio::select! {
                () = guard.lost() => {}
                () = tokio::time::sleep(Duration::from_millis(300)) => {}
            }
            let _ = guard.release().await?;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    Ok(())
}

/// GET /metrics from the exporter, as any Prometheus server would, within 10 s.
async fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let get = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        match response.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_owned()),
            _ => Err(std::io::Error::other(format!(
                "the metrics endpoint answered: {}",
                response.lines().next().unwrap_or("nothing")
            ))),
        }
    };
    tokio::time::timeout(Duration::from_secs(10), get)
        .await
        .map_err(|_| std::io::Error::other("the metrics endpoint did not answer within 10 s"))?
}

/// The sum of the series `name` whose labels contain `labels`.
fn sum(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
