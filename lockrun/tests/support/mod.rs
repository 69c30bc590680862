//! What the lockrun test binaries share: names no other test uses, and a backend URL of
//! each kind for one test alone.

use std::path::PathBuf;

/// One `#[test]` per case and backend: `mod file { fn case() }`, `mod redis { … }`, …
#[macro_export]
macro_rules! on_each_backend {
    ($($case:ident),* $(,)?) => {
        mod file { $( #[test] fn $case() { super::$case("file") } )* }
        mod redis { $( #[test] fn $case() { super::$case("redis") } )* }
        mod postgres { $( #[test] fn $case() { super::$case("postgres") } )* }
        mod mysql { $( #[test] fn $case() { super::$case("mysql") } )* }
        mod etcd { $( #[test] fn $case() { super::$case("etcd") } )* }
    };
}

/// A name no other test, run or process uses.
pub(crate) fn unique() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{nanos}-{n}", std::process::id())
}

/// How to add a query parameter to `url`.
fn sep(url: &str) -> char {
    if url.contains('?') {
        '&'
    } else {
        '?'
    }
}

/// A backend URL for this test alone.
pub(crate) fn url(backend: &str) -> (String, Option<PathBuf>) {
    let id = unique();
    match backend {
        "file" => {
            let dir = std::env::temp_dir().join(format!("lockrun-test-{id}"));
            (format!("file://{}", dir.display()), Some(dir))
        }
        "redis" => {
            let base = test_servers::redis::shared_url();
            (format!("{base}{}prefix=lockrun-{id}:", sep(&base)), None)
        }
        "redis-watch" => {
            let base = test_servers::redis::shared_url().replacen("redis://", "redis+watch://", 1);
            (format!("{base}{}prefix=lockrun-{id}:", sep(&base)), None)
        }
        "postgres" => {
            let base = test_servers::postgres::shared_url();
            (format!("{base}{}table=lockrun_test", sep(&base)), None)
        }
        "mysql" => {
            let base = test_servers::mysql::shared_url();
            (format!("{base}{}table=lockrun_test", sep(&base)), None)
        }
        "etcd" => {
            static ETCD: std::sync::OnceLock<test_servers::etcd::EtcdCluster> =
                std::sync::OnceLock::new();
            let member = ETCD.get_or_init(|| test_servers::etcd::EtcdCluster::start(1));
            let host = member.endpoint(0).trim_start_matches("http://").to_owned();
            (format!("etcd://{host}/lockrun-{id}"), None)
        }
        other => panic!("no backend {other}"),
    }
}
