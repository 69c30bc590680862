//! `--metrics-file PATH`: the run's lock metrics in Prometheus' text format, written when
//! lockrun exits, for node_exporter's textfile collector.
//!
//! The metrics are lock-core's (`lock_core::observe::metrics`), each with the run's key as
//! a `key` label: lockruns on different keys may write files side by side without their
//! series colliding (give each its own PATH). The file is written to a temporary file in the same directory,
//! then renamed over PATH, so the collector never reads half of it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lock_core::observe::metrics::{MetricsObserver, HISTOGRAMS};
use lock_core::observe::Observer;
use lock_core::Key;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The recorder of this process, and where its text goes.
pub(crate) struct MetricsFile {
    path: PathBuf,
    handle: PrometheusHandle,
}

impl MetricsFile {
    /// Installs a Prometheus recorder as this process's recorder.
    pub(crate) fn install(path: &Path) -> Result<Self, String> {
        let mut builder = PrometheusBuilder::new().with_recommended_naming(true);
        for (name, buckets) in HISTOGRAMS {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)
                .map_err(|e| e.to_string())?;
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
        Ok(MetricsFile {
            path: path.to_owned(),
            handle,
        })
    }

    /// The observer that records the run's lock on `key` (the full key), every metric
    /// labelled with it: the run has no other key.
    pub(crate) fn observer(&self, key: &Key) -> Arc<dyn Observer> {
        Arc::new(MetricsObserver::new().with_label("key", key.as_str()))
    }

    /// Writes the text: a temporary file beside PATH, flushed, renamed over it.
    pub(crate) fn write(&self) -> std::io::Result<()> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(self.handle.render().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}
