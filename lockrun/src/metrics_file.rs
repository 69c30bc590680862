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
        write_atomically(&self.path, self.handle.render().as_bytes())
    }
}

/// Writes `text` to `path` through a temporary file in the same directory, flushed, then
/// renamed over `path`. The temporary file has a random name and is created only if no
/// file, directory or symbolic link has that name (`O_EXCL`): a link planted beside `path`
/// cannot make lockrun write through it (a predictable `.NAME.<pid>.tmp` opened with
/// `File::create` followed links and truncated whatever they named). It is readable by
/// everyone, as node_exporter, running as another user, must read it; the metrics are no
/// secret.
fn write_atomically(path: &Path, text: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;

    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)?;
    tmp.write_all(text)?;
    tmp.as_file().sync_all()?;
    // Dropped on failure, the temporary file is removed.
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_link_planted_beside_the_file_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("run.prom");
        // Every name the old code could pick for its temporary file, in this process.
        let planted = dir
            .path()
            .join(format!(".run.prom.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();

        write_atomically(&path, b"metric 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "metric 1\n");
        assert!(std::fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        // Nothing else is left behind.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 3, "{left:?}");
    }
}
