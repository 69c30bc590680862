//! Runnable examples of the lock framework; see `examples/`.
//!
//! `cargo run -p examples --example cron_report` runs the classic story on the file backend.
