//! Every event as metrics, through the [`metrics`](https://docs.rs/metrics) facade (the
//! `metrics` feature): the library links only the facade, and the application installs
//! the exporter it wants (Prometheus, StatsD, OpenTelemetry, …).
//!
//! ```
//! use std::sync::Arc;
//! use lock_core::{Locker, MemoryBackend, observe::metrics::MetricsObserver};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! // Install an exporter first, e.g. metrics_exporter_prometheus::PrometheusBuilder.
//! let locker = Locker::new(Arc::new(MemoryBackend::new()))
//!     .with_observer(Arc::new(MetricsObserver::new().with_label("service", "billing")));
//! let guard = locker.lock("nightly-report").try_obtain().await?.obtained().unwrap();
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # The metrics
//! Names follow OpenTelemetry's database-client conventions (`db.client.operation.duration`
//! and friends): dotted, durations in seconds. A Prometheus exporter turns the dots into
//! underscores (`distlock_obtain_duration`).
//!
//! | name | kind | unit | labels | what |
//! |---|---|---|---|---|
//! | [`OBTAIN_DURATION`] | histogram | s | `backend`, `result` | how long an obtain took, waiting included; `result`: `obtained`, `busy`, `timeout`, `cancelled`, `error` |
//! | [`OBTAIN_ATTEMPTS`] | histogram | {attempt} | `backend`, `result` | calls to the backend per obtain |
//! | [`OBTAIN_PENDING`] | gauge | {task} | `backend` | obtains in progress now |
//! | [`LOCKS_HELD`] | gauge | {lock} | `backend` | acquisitions held now |
//! | [`HOLD_DURATION`] | histogram | s | `backend`, `end` | how long an acquisition was held; `end`: `released`, `late`, `lost`, `dropped`, `failed` |
//! | [`LOCKS_LOST`] | counter | {lock} | `backend`, `cause` | locks lost while held; `cause`: `expired`, `taken` |
//! | [`RENEWAL_DURATION`] | histogram | s | `backend` | a watchdog batch's round trip |
//! | [`RENEWAL_BATCH_SIZE`] | histogram | {lock} | `backend` | locks per watchdog batch |
//! | [`ERRORS`] | counter | {error} | `backend`, `kind`, `operation` | failed backend calls; `kind`: `unavailable`, `protocol`, …; `operation`: `obtain`, `prolongate`, `release`, … |
//!
//! # Keys and cardinality
//! Keys are not labels by default: a service that locks one key per invoice would make a
//! series per invoice. [`MetricsObserver::with_keys`] names a fixed set of keys that get a
//! `key` label of their own on the per-lock metrics (all but the watchdog's and the
//! errors); every other key shares `key="_other"`, so sums stay right.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, RwLock};

use metrics::{Counter, Gauge, Histogram, Label, Unit};

use super::{Event, HoldEnd, LostCause, Observer, ObtainEnd};
use crate::{ErrorKind, Key, Operation};

/// How long an obtain took, from its start to its end (histogram, seconds).
pub const OBTAIN_DURATION: &str = "distlock.obtain.duration";
/// Calls to the backend per obtain (histogram).
pub const OBTAIN_ATTEMPTS: &str = "distlock.obtain.attempts";
/// Obtains in progress (gauge).
pub const OBTAIN_PENDING: &str = "distlock.obtain.pending";
/// Acquisitions held (gauge).
pub const LOCKS_HELD: &str = "distlock.locks.held";
/// How long an acquisition was held (histogram, seconds).
pub const HOLD_DURATION: &str = "distlock.hold.duration";
/// Locks lost while held (counter).
pub const LOCKS_LOST: &str = "distlock.locks.lost";
/// A watchdog batch's round trip (histogram, seconds).
pub const RENEWAL_DURATION: &str = "distlock.renewal.duration";
/// Locks per watchdog batch (histogram).
pub const RENEWAL_BATCH_SIZE: &str = "distlock.renewal.batch_size";
/// Failed backend calls (counter).
pub const ERRORS: &str = "distlock.errors";

/// Bucket bounds in seconds for the duration histograms, for exporters that need them
/// (Prometheus): 1 ms to an hour.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];

/// Bucket bounds for the count histograms (attempts, batch sizes).
pub const COUNT_BUCKETS: &[f64] = &[
    1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
];

/// Every histogram with the bucket bounds that suit it, to configure an exporter:
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # struct PrometheusBuilder;
/// # impl PrometheusBuilder { fn set_buckets_for_metric(self, _: &str, _: &[f64]) -> Result<Self, Box<dyn std::error::Error>> { Ok(self) } }
/// let mut builder = PrometheusBuilder;
/// for (name, buckets) in lock_core::observe::metrics::HISTOGRAMS {
///     builder = builder.set_buckets_for_metric(name, buckets)?; // Matcher::Full(name.into())
/// }
/// # Ok(()) }
/// ```
pub const HISTOGRAMS: [(&str, &[f64]); 5] = [
    (OBTAIN_DURATION, SECONDS_BUCKETS),
    (OBTAIN_ATTEMPTS, COUNT_BUCKETS),
    (HOLD_DURATION, SECONDS_BUCKETS),
    (RENEWAL_DURATION, SECONDS_BUCKETS),
    (RENEWAL_BATCH_SIZE, COUNT_BUCKETS),
];

/// The `key` label of the keys [`MetricsObserver::with_keys`] did not name.
pub const OTHER_KEY: &str = "_other";

const OBTAIN_ENDS: [ObtainEnd; 5] = [
    ObtainEnd::Obtained,
    ObtainEnd::Busy,
    ObtainEnd::TimedOut,
    ObtainEnd::Cancelled,
    ObtainEnd::Failed(ErrorKind::Unavailable),
];
const HOLD_ENDS: [HoldEnd; 5] = [
    HoldEnd::Released,
    HoldEnd::Late,
    HoldEnd::Lost,
    HoldEnd::Dropped,
    HoldEnd::Failed,
];
const LOST_CAUSES: [LostCause; 2] = [LostCause::Expired, LostCause::Taken];

/// An [`Observer`] that records every event as the metrics of the [module docs](self).
///
/// Handles are made once per backend, the first time it reports, through the recorder
/// installed then: install the exporter before the first lock is taken.
pub struct MetricsObserver {
    labels: Vec<Label>,
    keys: Option<Vec<String>>,
    backends: RwLock<Vec<(&'static str, Handles)>>,
}

impl MetricsObserver {
    /// Records with the `backend` label (and the ones of each metric), no key labels.
    /// Describes the metrics (units, help texts) to the recorder installed now.
    pub fn new() -> Self {
        describe();
        MetricsObserver {
            labels: Vec::new(),
            keys: None,
            backends: RwLock::new(Vec::new()),
        }
    }

    /// Adds a label with a fixed value to every metric, for example the service or the
    /// locker's role when a process has several lockers.
    pub fn with_label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.push(Label::new(name.into(), value.into()));
        self
    }

    /// Gives each of `keys` (full keys, the locker's prefix included) a `key` label of its
    /// own; every other key is recorded as `key="_other"`. Keep the set small and fixed:
    /// each key makes a series per label value.
    pub fn with_keys<I>(mut self, keys: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.keys = Some(keys.into_iter().map(Into::into).collect());
        self
    }

    /// Runs `record` with `backend`'s handles, made the first time it reports.
    fn with_handles(&self, backend: &'static str, record: impl FnOnce(&Handles)) {
        let find = |all: &[(&'static str, Handles)]| -> Option<usize> {
            all.iter().position(|(name, _)| *name == backend)
        };
        {
            let all = self.backends.read().unwrap_or_else(|p| p.into_inner());
            if let Some(at) = find(&all) {
                return record(&all[at].1);
            }
        }
        let mut all = self.backends.write().unwrap_or_else(|p| p.into_inner());
        let at = find(&all).unwrap_or_else(|| {
            let handles = Handles::new(backend, &self.labels, self.keys.as_deref());
            all.push((backend, handles));
            all.len() - 1
        });
        record(&all[at].1);
    }
}

impl Default for MetricsObserver {
    fn default() -> Self {
        MetricsObserver::new()
    }
}

impl fmt::Debug for MetricsObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsObserver")
            .field("labels", &self.labels)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl Observer for MetricsObserver {
    fn event(&self, event: &Event<'_>) {
        self.with_handles(event.backend(), |h| h.record(event));
    }
}

/// The handles of one backend.
struct Handles {
    /// The labels every metric has: the fixed ones, then `backend`.
    base: Vec<Label>,
    /// Every key's, or (with keys named) the other keys'.
    all: Series,
    named: HashMap<String, Series>,
    renewal_duration: Histogram,
    renewal_batch_size: Histogram,
    /// Made on the first error of each kind and operation: most never happen.
    errors: Mutex<HashMap<(ErrorKind, Operation), Counter>>,
}

/// The per-lock metrics of one key (or of all keys).
struct Series {
    obtain_duration: [Histogram; 5],
    obtain_attempts: [Histogram; 5],
    pending: Gauge,
    held: Gauge,
    hold_duration: [Histogram; 5],
    lost: [Counter; 2],
}

impl Handles {
    fn new(backend: &'static str, fixed: &[Label], keys: Option<&[String]>) -> Self {
        let mut base = fixed.to_vec();
        base.push(Label::new("backend", backend));
        let (all, named) = match keys {
            None => (Series::new(&base), HashMap::new()),
            Some(keys) => {
                let with_key = |key: &str| {
                    let mut labels = base.clone();
                    labels.push(Label::new("key", key.to_owned()));
                    Series::new(&labels)
                };
                let named = keys.iter().map(|k| (k.clone(), with_key(k))).collect();
                (with_key(OTHER_KEY), named)
            }
        };
        Handles {
            renewal_duration: metrics::histogram!(RENEWAL_DURATION, base.iter()),
            renewal_batch_size: metrics::histogram!(RENEWAL_BATCH_SIZE, base.iter()),
            base,
            all,
            named,
            errors: Mutex::new(HashMap::new()),
        }
    }

    fn record(&self, event: &Event<'_>) {
        match *event {
            Event::ObtainStarted { key, .. } => self.of(key).pending.increment(1.0),
            Event::ObtainEnded {
                key,
                end,
                waited,
                attempts,
                ..
            } => {
                let series = self.of(key);
                series.pending.decrement(1.0);
                let at = obtain_index(end);
                series.obtain_duration[at].record(waited.as_secs_f64());
                series.obtain_attempts[at].record(f64::from(attempts));
            }
            Event::HoldStarted { key, .. } => self.of(key).held.increment(1.0),
            Event::HoldEnded { key, held, end, .. } => {
                let series = self.of(key);
                series.held.decrement(1.0);
                series.hold_duration[hold_index(end)].record(held.as_secs_f64());
            }
            Event::Lost { key, cause, .. } => self.of(key).lost[lost_index(cause)].increment(1),
            Event::Renewal { locks, latency, .. } => {
                self.renewal_duration.record(latency.as_secs_f64());
                self.renewal_batch_size.record(locks as f64);
            }
            Event::BackendError {
                kind, operation, ..
            } => self.error(kind, operation).increment(1),
        }
    }

    fn of(&self, key: &Key) -> &Series {
        if self.named.is_empty() {
            return &self.all;
        }
        self.named.get(key.as_str()).unwrap_or(&self.all)
    }

    fn error(&self, kind: ErrorKind, operation: Operation) -> Counter {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        errors
            .entry((kind, operation))
            .or_insert_with(|| {
                let mut labels = self.base.clone();
                labels.push(Label::new("kind", kind_label(kind)));
                labels.push(Label::new("operation", operation.as_str()));
                metrics::counter!(ERRORS, labels)
            })
            .clone()
    }
}

impl Series {
    fn new(base: &[Label]) -> Self {
        let with = |name: &'static str, value: &'static str| {
            let mut labels = base.to_vec();
            labels.push(Label::new(name, value));
            labels
        };
        Series {
            obtain_duration: OBTAIN_ENDS
                .map(|e| metrics::histogram!(OBTAIN_DURATION, with("result", e.as_str()))),
            obtain_attempts: OBTAIN_ENDS
                .map(|e| metrics::histogram!(OBTAIN_ATTEMPTS, with("result", e.as_str()))),
            pending: metrics::gauge!(OBTAIN_PENDING, base.iter()),
            held: metrics::gauge!(LOCKS_HELD, base.iter()),
            hold_duration: HOLD_ENDS
                .map(|e| metrics::histogram!(HOLD_DURATION, with("end", e.as_str()))),
            lost: LOST_CAUSES.map(|c| metrics::counter!(LOCKS_LOST, with("cause", c.as_str()))),
        }
    }
}

fn obtain_index(end: ObtainEnd) -> usize {
    match end {
        ObtainEnd::Obtained => 0,
        ObtainEnd::Busy => 1,
        ObtainEnd::TimedOut => 2,
        ObtainEnd::Cancelled => 3,
        ObtainEnd::Failed(_) => 4,
    }
}

fn hold_index(end: HoldEnd) -> usize {
    match end {
        HoldEnd::Released => 0,
        HoldEnd::Late => 1,
        HoldEnd::Lost => 2,
        HoldEnd::Dropped => 3,
        HoldEnd::Failed => 4,
    }
}

fn lost_index(cause: LostCause) -> usize {
    match cause {
        LostCause::Expired => 0,
        LostCause::Taken => 1,
    }
}

/// An error kind as a label value: lowercase, no spaces.
fn kind_label(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidInput => "invalid_input",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::Corrupt => "corrupt",
        ErrorKind::Protocol => "protocol",
        ErrorKind::PermissionDenied => "permission_denied",
        ErrorKind::ExpiredOnArrival => "expired_on_arrival",
        ErrorKind::Config => "config",
        ErrorKind::Lost => "lost",
        ErrorKind::StaleToken => "stale_token",
        ErrorKind::Unsupported => "unsupported",
    }
}

/// Units and help texts, for exporters that show them.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(
        OBTAIN_DURATION,
        Unit::Seconds,
        "How long an obtain took, waiting included, by result"
    );
    describe_histogram!(
        OBTAIN_ATTEMPTS,
        Unit::Count,
        "Calls to the backend per obtain, by result"
    );
    describe_gauge!(OBTAIN_PENDING, Unit::Count, "Obtains in progress");
    describe_gauge!(LOCKS_HELD, Unit::Count, "Locks held");
    describe_histogram!(
        HOLD_DURATION,
        Unit::Seconds,
        "How long a lock was held, by how it ended"
    );
    describe_counter!(LOCKS_LOST, Unit::Count, "Locks lost while held, by cause");
    describe_histogram!(
        RENEWAL_DURATION,
        Unit::Seconds,
        "Round trip of a watchdog's batch of renewals"
    );
    describe_histogram!(RENEWAL_BATCH_SIZE, Unit::Count, "Locks per watchdog batch");
    describe_counter!(
        ERRORS,
        Unit::Count,
        "Failed backend calls, by kind and operation"
    );
}
