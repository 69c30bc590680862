//! What `tracing` was given while a test ran, to look for secrets in, or count a line.

use std::future::Future;
use std::sync::{Arc, Mutex};

/// Runs `fut` to its end on a one-thread runtime (so every task logs to this thread)
/// under a subscriber that keeps every event at every level; returns its output and the
/// text that was logged.
pub fn capture<T>(fut: impl Future<Output = T>) -> (T, String) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let out = tracing::subscriber::with_default(subscriber, || runtime.block_on(fut));
    (out, captured.text())
}

/// Everything written to it, kept.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
