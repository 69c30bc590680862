//! The table the run prints (Markdown, as `BENCHMARKS.md` keeps it).

use test_servers::bench::{Latencies, Run, RwHandoff};

use crate::cpu::Split;

#[derive(Default)]
pub(crate) struct Table {
    cycles: Vec<String>,
    cpu: Vec<String>,
    handoffs: Vec<String>,
    rw_handoffs: Vec<String>,
    watched: Vec<String>,
    notes: Vec<String>,
    skipped: Vec<String>,
}

fn rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1}k/s", r / 1000.0)
    } else {
        format!("{r:.0}/s")
    }
}

impl Table {
    // Each row goes to stderr as soon as it is measured (progress), and into the table.
    fn push_cycles(&mut self, row: String) {
        eprintln!("{row}");
        self.cycles.push(row);
    }

    fn push_handoffs(&mut self, row: String) {
        eprintln!("{row}");
        self.handoffs.push(row);
    }

    fn push_watched(&mut self, row: String) {
        eprintln!("{row}");
        self.watched.push(row);
    }

    pub(crate) fn cycles(
        &mut self,
        backend: &str,
        what: &str,
        tasks: usize,
        baseline: &str,
        base: Run,
        project: Run,
    ) {
        self.push_cycles(format!(
            "| {backend} | {what} | {tasks} | {} ({baseline}) | {} | **{:.2}x** | {:.0} / {:.0} µs | {:.0} / {:.0} µs |",
            rate(base.rate),
            rate(project.rate),
            project.rate / base.rate,
            project.p50_us,
            project.p99_us,
            base.p50_us,
            base.p99_us,
        ));
    }

    pub(crate) fn cpu(&mut self, what: &str, tasks: usize, split: Split) {
        let us = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{v:.0} µs"));
        let row = format!(
            "| {what} | {tasks} | {} | {} | {} |",
            rate(split.rate),
            us(split.client_us),
            us(split.server_us)
        );
        eprintln!("{row}");
        self.cpu.push(row);
    }

    pub(crate) fn handoff(
        &mut self,
        backend: &str,
        waiters: usize,
        how: &str,
        latencies: &Latencies,
        attempts: Option<f64>,
        raw: Option<&Latencies>,
    ) {
        let attempts = attempts.map_or("–".to_owned(), |a| format!("{a:.1}"));
        // Higher is better, as the cycles' ratios: the raw p50 over this one.
        let ratio = raw.map_or("–".to_owned(), |raw| {
            format!("**{:.2}x**", raw.ms(0.5) / latencies.ms(0.5).max(1e-6))
        });
        self.push_handoffs(format!(
            "| {backend} | {waiters} | {how} | {:.2} ms | {:.2} ms | {ratio} | {attempts} | {} |",
            latencies.ms(0.5),
            latencies.ms(0.99),
            latencies.len()
        ));
    }

    pub(crate) fn rw_handoff(&mut self, backend: &str, how: &str, m: &RwHandoff) {
        let row = format!(
            "| {backend} | {how} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {} | {} |",
            m.writer_waits.ms(0.5),
            m.writer_waits.ms(0.99),
            m.readers_in.ms(0.5),
            m.readers_in.ms(0.99),
            m.writer_waits.len(),
            m.reads,
        );
        eprintln!("{row}");
        self.rw_handoffs.push(row);
    }

    pub(crate) fn watched(
        &mut self,
        backend: &str,
        locks: usize,
        per_period: Renewals,
        bytes_per_lock: f64,
        lost: usize,
    ) {
        let or_dash = |n: Option<f64>| n.map_or("–".to_owned(), |c| format!("{c:.0}"));
        self.push_watched(format!(
            "| {backend} | {locks} | {:.0} | {:.1} | {} | {} | {:.1} ms | {bytes_per_lock:.0} B | {lost} |",
            per_period.locks,
            per_period.batches,
            or_dash(per_period.round_trips),
            or_dash(per_period.server_calls),
            per_period.longest.as_secs_f64() * 1e3,
        ));
    }

    /// A line under the watched locks' table: what a backend's server said of the run.
    pub(crate) fn note(&mut self, line: String) {
        let line = format!("- {line}");
        eprintln!("{line}");
        self.notes.push(line);
    }

    pub(crate) fn skipped(&mut self, backend: &str, why: &str) {
        let row = format!("- {backend}: skipped, {why}");
        eprintln!("{row}");
        self.skipped.push(row);
    }

    pub(crate) fn print(&self) {
        println!("### Uncontended cycles (median of interleaved rounds)\n");
        println!("| backend | cycle | tasks | baseline | project | ratio | project p50 / p99 | baseline p50 / p99 |");
        println!("|---|---|---:|---|---:|---:|---:|---:|");
        for row in &self.cycles {
            println!("{row}");
        }
        if !self.cpu.is_empty() {
            println!("\n### Where a Redis cycle's time goes (CPU per cycle; one run each)\n");
            println!("| cycle | tasks | rate | client CPU | Redis server CPU |");
            println!("|---|---:|---:|---:|---:|");
            for row in &self.cpu {
                println!("{row}");
            }
        }
        println!("\n### Handoff: release call to the next holder's Acquired\n");
        println!("| backend | waiters | woken by | p50 | p99 | raw p50 / p50 | obtain attempts per acquisition | handoffs |");
        println!("|---|---:|---|---:|---:|---:|---:|---:|");
        for row in &self.handoffs {
            println!("{row}");
        }
        if !self.rw_handoffs.is_empty() {
            println!(
                "\n### Reader-writer handoff: 1 writer, 8 readers on one key (each holds 1 ms)\n"
            );
            println!("| backend | woken by | writer's wait p50 / p99 | writer's release to a reader in, p50 / p99 | writes | reads meanwhile |");
            println!("|---|---|---:|---:|---:|---:|");
            for row in &self.rw_handoffs {
                println!("{row}");
            }
        }
        println!("\n### Locks held with the watchdog (ttl 9 s, a prolong every 3 s)\n");
        println!("| backend | locks | locks prolonged per 3 s | watchdog batches per 3 s | round trips per 3 s | server calls per 3 s | longest batch | client memory per lock | lost |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for row in &self.watched {
            println!("{row}");
        }
        if !self.notes.is_empty() {
            println!();
        }
        for row in &self.notes {
            println!("{row}");
        }
        for row in &self.skipped {
            println!("{row}");
        }
    }
}

/// What one renewal period of the watched locks cost.
pub(crate) struct Renewals {
    /// Locks prolonged.
    pub(crate) locks: f64,
    /// `prolongate_many` calls.
    pub(crate) batches: f64,
    /// Pipelines or statements, where the backend has a network.
    pub(crate) round_trips: Option<f64>,
    /// Calls the server counted, where it can.
    pub(crate) server_calls: Option<f64>,
    /// The longest `prolongate_many` call.
    pub(crate) longest: std::time::Duration,
}
