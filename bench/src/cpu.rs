//! Where a cycle's time goes: CPU seconds of this process and of the Redis server.

use std::future::Future;

use redis::aio::ConnectionManager;
use test_servers::bench::Run;

/// This process's CPU time (user + system, every thread) in seconds, from `/proc/self/stat`
/// (ticks of `USER_HZ`, 100 a second on Linux: a 10 ms resolution, so measure for seconds).
pub(crate) fn client_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// The Redis server's CPU time (user + system) in seconds, from `INFO cpu`.
pub(crate) async fn server_seconds(conn: &mut ConnectionManager) -> Option<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.ok()?;
    let mut total = 0.0;
    for line in info.lines() {
        if let Some(v) = line
            .strip_prefix("used_cpu_user:")
            .or_else(|| line.strip_prefix("used_cpu_sys:"))
        {
            total += v.trim().parse::<f64>().ok()?;
        }
    }
    Some(total)
}

/// A measurement's rate, and what each of its `cycles` cost in CPU.
#[derive(Clone, Copy)]
pub(crate) struct Split {
    pub(crate) rate: f64,
    /// This process, microseconds per cycle.
    pub(crate) client_us: Option<f64>,
    /// The Redis server, microseconds per cycle.
    pub(crate) server_us: Option<f64>,
}

/// Runs `measure` (`cycles` cycles) and splits its CPU time between this process and the
/// Redis server behind `info`.
pub(crate) async fn split(
    info: &mut ConnectionManager,
    cycles: usize,
    measure: impl Future<Output = Run>,
) -> Split {
    let before = (client_seconds(), server_seconds(info).await);
    let run = measure.await;
    let after = (client_seconds(), server_seconds(info).await);
    let per_cycle = |a: Option<f64>, b: Option<f64>| Some((b? - a?) * 1e6 / cycles as f64);
    Split {
        rate: run.rate,
        client_us: per_cycle(before.0, after.0),
        server_us: per_cycle(before.1, after.1),
    }
}
