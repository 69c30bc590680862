//! What `tracing` was given while a test ran, to look for secrets in, or count a line.

use std::future::Future;
use std::sync::{Arc, Mutex};

/// Runs `fut` to its end on a one-thread runtime (so every task logs to this thread)
/// under a subscriber that keeps every event at every level; returns its output and the
/// text that was logged.
///
/// Tests of one binary run in parallel, most of them without a subscriber. While exactly
/// one dispatcher is registered in the process, tracing-core decides a callsite's interest
/// the first time it is hit from the default of the thread that hits it
/// (tokio-rs/tracing#3611): a test without a subscriber reaching a callsite first (sqlx's
/// slow-statement warning, say) would silence it for this capture for good. A second
/// dispatcher kept alive for the life of the process makes tracing ask every registered
/// dispatcher instead.
pub fn capture<T>(fut: impl Future<Output = T>) -> (T, String) {
    static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
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

#[cfg(test)]
mod tests {
    use super::capture;

    fn warn_here() {
        tracing::warn!("the one callsite both threads hit");
    }

    /// tokio-rs/tracing#3611: a thread without a subscriber hitting a callsite first, while
    /// the capture's dispatcher is the only one registered, silenced that callsite for the
    /// capture.
    #[test]
    fn a_callsite_another_thread_hits_first_still_reaches_the_capture() {
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let ((), log) = capture(async move {
            std::thread::spawn(move || {
                warn_here();
                go.send(()).unwrap();
            });
            wait.recv().unwrap();
            warn_here();
        });
        assert!(log.contains("the one callsite both threads hit"), "{log:?}");
    }
}
